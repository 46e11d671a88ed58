#!/usr/bin/env bash
# One tuner search with everything a published figure needs kept under OUTDIR: the command, the
# environment, the devices and their fingerprints, the search's output, the cache and the study.
# The cache directory is OUTDIR/cache: do not pass --cache-dir.
#   bench/search_on_gpu.sh OUTDIR --backend cuda --dtype float32 --shape 4096 4096 4096 --trials 60
set -uo pipefail
python=${PYTHON:-python3}
out=${1:?usage: bench/search_on_gpu.sh OUTDIR [tuner search arguments]}
shift
mkdir -p "$out"
export TUNER_CACHE_DIR="$out/cache"
echo "python3 -m tuner search $*  # tuner at $(git rev-parse HEAD 2>/dev/null)$(git status --porcelain 2>/dev/null | grep -q . && echo ' (modified)')" > "$out/command.txt"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv 2>&1 || rocm-smi --showproductname 2>&1 || true
  "$python" -c 'import importlib.metadata as m
for name in ("numba", "numba-cuda", "numba-hip", "numpy", "optuna", "jinja2"):
    try: print(name, m.version(name))
    except m.PackageNotFoundError: pass'
} > "$out/environment.txt"
"$python" -m tuner devices --json > "$out/devices.json" 2> "$out/devices.err"
"$python" -m tuner search "$@" > "$out/search.out" 2> "$out/search.err"
status=$?
"$python" -m tuner list --json --cache-dir "$out/cache" > "$out/list.json"
cat "$out/search.out"
exit $status
