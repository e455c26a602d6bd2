#!/usr/bin/env bash
# The GPU checks in one command, for a lent machine whose python3 holds torch but not
# Esper: the CUDA-marked tests, then benchmarks/gpu_graph_step.py, gpu_streams.py and
# gpu_recipes.py. Every part writes its stdout to $OUT/NAME.out (default ./gpu-out) as
# it finishes, its stderr to $OUT/session.log, and has its own time limit, so a part
# that hangs costs its limit, not the session.
#
#   bash benchmarks/gpu_session.sh [SITE]
#
# SITE: a folder of pure-Python packages the machine lacks (cattrs, tomli_w, recent attrs
# and pluggy) and of Esper's *.dist-info folders, whose entry points register the
# plugins; put before the machine's own packages. Without it Esper must be installed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
SITE="${1:-}"
plugins=$(ls -d "$PWD"/plugins/*/ | tr '\n' ':')
export PYTHONPATH="${SITE:+$PWD/$SITE:}$PWD:$plugins${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 OMP_NUM_THREADS=4
PY=${PYTHON:-python3}

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
$PY -c "import torch, esper_core, esper_streams; from esper_core.plugins import PluginManager; \
print(torch.__version__, torch.cuda.get_device_name(0), sorted(PluginManager().infos))" \
  >>"$OUT/nvidia-smi.txt" 2>&1 || { cat "$OUT/nvidia-smi.txt"; exit 3; }
tail -n 1 "$OUT/nvidia-smi.txt"

part() {  # NAME LIMIT_S COMMAND...: run, keep stdout in NAME.out, stderr in session.log
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  echo "== $name" >>"$OUT/session.log"
  timeout "$limit" "$@" >"$OUT/$name.out" 2>>"$OUT/session.log"
  echo "== $name: exit $? in $((SECONDS - started)) s" | tee -a "$OUT/session.log"
}

part pytest 170 $PY -m pytest -p no:cacheprovider -m cuda -rA -q \
  tests/plugins/esper_streams/test_cuda_paths.py tests/plugins/esper_streams/test_streams.py \
  tests/core/test_device.py tests/core/test_device_traffic.py tests/core/test_data.py \
  tests/integration/test_grower_owns_seeds.py
tail -n 25 "$OUT/pytest.out"
part gpu_graph_step 90 $PY benchmarks/gpu_graph_step.py --device cuda
grep -A 12 '"scaling"' "$OUT/gpu_graph_step.out"
part gpu_streams 180 $PY benchmarks/gpu_streams.py --device cuda --profile --fixes --out "$OUT"
part gpu_recipes 200 $PY benchmarks/gpu_recipes.py --device cuda
