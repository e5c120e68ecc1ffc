#!/usr/bin/env bash
# The clients tests/test_serve.cpp points at `looplm serve` (ServeClients.*): the official `openai`
# npm client and `puppeteer-core` (which drives Debian's chromium, headless), installed with npm
# into a cache directory:
#   ${LOOPLM_SERVE_CLIENTS:-~/.cache/looplm-serve-clients}/node_modules/...
# Idempotent: looplm.stamp records what was installed; when it matches, nothing is done. Exits 1
# with a message when npm is missing or the registry cannot be reached (the tests then skip).
set -euo pipefail
CACHE="${LOOPLM_SERVE_CLIENTS:-$HOME/.cache/looplm-serve-clients}"
PKGS=(openai@7.60.0 puppeteer-core@25.19.0)
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
[ -f package.json ] || echo '{"name": "looplm-serve-clients", "private": true}' > package.json
echo "setup.sh: installing ${PKGS[*]} into $CACHE" >&2
if ! npm install --no-audit --no-fund --loglevel=error --fetch-timeout=30000 --fetch-retries=1 "${PKGS[@]}" >&2; then
  echo "setup.sh: npm install failed (is the npm registry reachable?)" >&2
  exit 1
fi
echo "$want" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
