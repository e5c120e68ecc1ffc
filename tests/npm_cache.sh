#!/usr/bin/env bash
# npm packages a test points looplm at, installed into a cache directory (outside the repository):
#   tests/npm_cache.sh CACHE NAME PACKAGE@VERSION...
# Idempotent: CACHE/looplm.stamp records what was installed; when it matches, nothing is done.
# Exits 1 with a message when npm is missing or the registry cannot be reached (the tests then
# skip). Used by tests/tokenizer_parity/setup.sh and tests/serve_clients/setup.sh.
set -euo pipefail
CACHE="$1"
NAME="$2"
shift 2
PKGS=("$@")
STAMP="$CACHE/looplm.stamp"
want="${PKGS[*]}"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: node and npm are needed (scripts/install_deps.sh --test installs them)" >&2
  exit 1
fi
mkdir -p "$CACHE"
cd "$CACHE"
[ -f package.json ] || echo "{\"name\": \"$NAME\", \"private\": true}" > package.json
echo "setup.sh: installing ${PKGS[*]} into $CACHE" >&2
if ! npm install --no-audit --no-fund --loglevel=error --fetch-timeout=30000 --fetch-retries=1 "${PKGS[@]}" >&2; then
  echo "setup.sh: npm install failed (is the npm registry reachable?)" >&2
  exit 1
fi
echo "$want" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
