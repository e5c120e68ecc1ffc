#!/usr/bin/env bash
# The clients tests/test_serve.cpp points at `looplm serve` (Serve.OpenAiNpmClient,
# Serve.PageInARealBrowser): the official `openai` npm client and `puppeteer-core` (which drives
# Debian's chromium, headless), installed with npm into a cache directory (tests/npm_cache.sh):
#   ${LOOPLM_SERVE_CLIENTS:-~/.cache/looplm-serve-clients}/node_modules/...
# Exits 1 with a message when npm is missing or the registry cannot be reached (the tests then skip).
set -euo pipefail
exec "$(dirname "$0")/../npm_cache.sh" "${LOOPLM_SERVE_CLIENTS:-$HOME/.cache/looplm-serve-clients}" looplm-serve-clients \
  openai@7.60.0 puppeteer-core@25.19.0
