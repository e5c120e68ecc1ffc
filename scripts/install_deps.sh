#!/usr/bin/env bash
# Debian 12 packages looplm needs to build and run its default job (gnuplot-nox: the loss curves of
# scripts/plot_metrics.sh; libpcre2-dev, libicu-dev: Hugging Face tokenizers' regexes and Unicode
# normalization; pybind11-dev, python3-dev, python3-numpy: the Python module, docs/python.md
# (python3-pip, python3-venv, python3-setuptools, python3-wheel: `pip install .` of it, offline);
# libcpp-httplib-dev: looplm serve; openmpi-bin, libopenmpi-dev: data-parallel training under
# mpirun, docs/training.md; without them looplm builds as one process); with --test also what the
# test suite adds (qemu-user: the tests again on emulated CPUs without AVX-512; python3-jinja2: the
# chat templates checked live against Jinja itself, tests/chat_template; node and npm: the
# tokenizer parity test and the serve clients; chromium: the serve page in a real browser; curl: calling the server as the
# README does); with --fuzz what the fuzz targets add (clang and its libFuzzer / sanitizer
# runtimes: scripts/test.sh --fuzz, fuzz/README.md). Idempotent.
set -euo pipefail
PKGS=(g++ cmake make pkg-config libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev libpcre2-dev libicu-dev bible-kjv gnuplot-nox
      pybind11-dev python3-dev python3-numpy python3-pip python3-venv python3-setuptools python3-wheel
      libcpp-httplib-dev openmpi-bin libopenmpi-dev)
[ "${1:-}" = "--test" ] && PKGS+=(qemu-user chromium curl python3-jinja2)
# The tokenizer parity test runs Hugging Face's tokenizers.js (tests/tokenizer_parity/setup.sh):
# Debian's node and npm unless a node is installed already (NodeSource's conflicts with Debian's npm).
[ "${1:-}" = "--test" ] && ! command -v npm >/dev/null 2>&1 && PKGS+=(nodejs npm)
[ "${1:-}" = "--fuzz" ] && PKGS+=(clang libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
