#!/usr/bin/env bash
# `pip install --no-build-isolation --no-index .` into a fresh virtual environment (with the system's
# site packages, for Debian's numpy), as docs/python.md says: the module builds in the CMake build
# directory already there (seconds), `import looplm` works from another directory without
# PYTHONPATH, is the installed file, reports the CLI's version and runs; `pip uninstall` removes it.
# Skipped (exit 77) without python3-venv or pip.
# Usage: tests/python/pip_install.sh BUILD_DIR PYTHON
set -euo pipefail
build=$(realpath "$1")
python=${2:-/usr/bin/python3}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! "$python" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1; then
  cat "$work/venv.log"; echo "SKIP: $python -m venv failed (python3-venv)"; exit 77
fi
"$work/venv/bin/python" -m pip --version >/dev/null 2>&1 || { echo "SKIP: no pip in the venv (python3-pip)"; exit 77; }
LOOPLM_BUILD_DIR=$build "$work/venv/bin/python" -m pip install -v --no-build-isolation --no-index "$src" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; fail "pip install"; }
# The venv's python is the build directory's: the module is built there, not in a new directory.
if grep -q "building for" "$work/pip.log"; then grep "building for" "$work/pip.log"; fail "pip built in a second build directory"; fi
grep -q "Successfully installed looplm-" "$work/pip.log" || { cat "$work/pip.log"; fail "pip installed no looplm"; }
cd "$work"
out=$(env -u PYTHONPATH "$work/venv/bin/python" -c '
import looplm
c = looplm.preset("looped")
print(looplm.__version__, looplm.__file__, c["R"])')
read -r version file R <<<"$out"
case "$file" in "$work/venv/"*) ;; *) fail "import looplm found $file, not the venv's";; esac
cli=$("$build/looplm" --version | sed -n 's/^looplm \([0-9.]*\).*/\1/p' | head -1)
[ "$version" = "$cli" ] || fail "looplm.__version__ $version, looplm --version $cli"
[ "$R" -ge 1 ] || fail "looplm.preset('looped') gave R=$R"
echo "ok: pip installed looplm $version into a venv: $file ($(du -h "$file" | cut -f1))"
"$work/venv/bin/python" -m pip uninstall -y looplm >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log"; fail "pip uninstall"; }
if env -u PYTHONPATH "$work/venv/bin/python" -c "import looplm" 2>/dev/null; then fail "looplm still imports after pip uninstall"; fi
echo "ok: pip uninstall removes it"
