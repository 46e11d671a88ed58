#!/usr/bin/env bash
# The whole tuner checked on a GPU machine, in parts that each fit one 10-minute device call.
# From the repository root there, with .whl carried (bench/fetch_wheels.sh fills it here):
# Each part starts with a preflight (a one-line kernel JIT-compiled and launched, the toolchain's
# versions printed) and stops at once if that fails.
#   bash bench/gpu_check.sh e2e $OUT     tuner devices; bench/verification_mutants.py (planted kernel
#                                        bugs that verification must fail: the guard band after C
#                                        on a GPU); bench/sanitized_kernels.py (verification under
#                                        compute-sanitizer: out-of-bounds reads, 90 s at most);
#                                        tuner search float32 and float64 at 4096^3,
#                                        float32 at 1000^3 and a batch of 64 at 256^3; tuner list;
#                                        bench/matmul_on_gpu.py
#                                        (NumPy, Numba, CuPy against cuBLAS; first-call latency;
#                                        dispatch); tuner.matmul from the shipped records alone
#                                        (an empty cache); tuner regenerate after a simulated
#                                        template change; tuner list
#   bash bench/gpu_check.sh compare $OUT bench/versus_cublas.py: tuned kernels (from the records in
#                                        cache/, so commit e2e's first) and the probe's named
#                                        configurations against strict-FP32 cuBLAS and the seeds;
#                                        then tuner search float32 at 1000^3 with no compile worker
#                                        (the measuring process counts each ceiling)
#   bash bench/gpu_check.sh tensor $OUT  tuner search --dtype tf32 and float16-tc at 4096^3 (the
#                                        tensor cores through mma.sync), then
#                                        bench/tensor_core_probe.py: those tuned kernels and named
#                                        configurations against cuBLAS in the same mode
#   bash bench/gpu_check.sh sweep $OUT   bench/sweep.py, float32 4096^3, for SWEEP_BUDGET seconds
#                                        (default 480), after the sweeps already in bench/data/
# Writes $OUT/PART.log (every command with its exit status and output) and $OUT/PART.tar.gz (the
# cache, the studies and the JSON outputs); the sweep's JSON lines also as $OUT/sweep-*.jsonl.
# SIMULATE=1 runs it all on Numba's CUDA simulator with tiny shapes: a dry run, times meaningless.
# On the H100 (2026-11-23) the parts took 334 s (e2e, before bench/verification_mutants.py and
# bench/sanitized_kernels.py were added), 206 s (compare, before its search with no compile
# worker, about a minute more, was added), 424 s (tensor) and 507 s (sweep, SWEEP_BUDGET=500), plus
# about a minute to start the machine for the first.
set -uo pipefail
part=${1:?usage: bench/gpu_check.sh e2e|compare|tensor|sweep OUTDIR}
out=${2:?usage: bench/gpu_check.sh e2e|compare|tensor|sweep OUTDIR}
mkdir -p "$out"
exec > >(tee "$out/$part.log") 2>&1
work=$(mktemp -d)
mkdir -p "$work/out"
# PYTHONSAFEPATH: `python -m tuner` must import the installed tuner, not the source tree here.
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 TUNER_CACHE_DIR="$work/out/cache" TUNER_KERNEL_DIR="$work/kernels"
if [ "${SIMULATE:-0}" = 1 ]; then
  export NUMBA_ENABLE_CUDASIM=1
  big=(32 32 32) odd=(24 20 18) batch=(--batch 2 --shape 16 16 16) simulate=(--simulate) trials=(--trials 2)
  shapes=(--shapes 16,16,16 13,17,9) tc_shapes=(--shapes 40,72,56) tc=(24 40 20)
else
  big=(4096 4096 4096) odd=(1000 1000 1000) batch=(--batch 64 --shape 256 256 256) simulate=() trials=(--trials 10)
  shapes=() tc_shapes=() tc=(4096 4096 4096)
fi
python=${PYTHON:-python3}

failed=0
step() {  # run one command, say how it ended, and pack what there is so far (a killed part keeps it)
  echo "=== $(date -u +%H:%M:%S) $*"
  "$@"
  local status=$?
  echo "=== exit $status"
  [ $status = 0 ] || failed=$((failed + 1))
  tar czf "$out/$part.tar.gz" -C "$work/out" .
}

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  step "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
  echo "tuner at $(cat .whl/COMMIT 2>/dev/null) (the wheel's commit)"
else  # the tuner installed here runs: this checkout's, as it stands
  echo "tuner at $(git rev-parse HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo ' (modified)')"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total,compute_mode --format=csv 2>&1 || true
"$python" -c 'import importlib.metadata as m, sys; print(sys.version)
for name in ("numba-matmul-tuner", "numba", "numba-cuda", "numpy", "optuna", "jinja2", "cupy-cuda13x", "torch"):
    try: print(name, m.version(name))
    except m.PackageNotFoundError: print(name, "missing")'

# Preflight, first in every part: the toolchain must JIT and launch a kernel before any variant is
# spent. numba-cuda needs libNVVM; without an nvidia-nvvm wheel, the system toolkit's is used.
if [ "${SIMULATE:-0}" != 1 ] && [ -z "${CUDA_HOME:-}" ]; then
  for toolkit in /usr/local/cuda /usr/local/cuda-*; do
    if [ -d "$toolkit/nvvm" ]; then export CUDA_HOME=$toolkit; break; fi
  done
fi
# tuner refuses a current directory that others can write (someone could put a .numba_config.yaml
# there); this copy of the tree is this run's own, so it is made private, and checked here.
chmod go-w . 2>/dev/null || true
"$python" - <<'PY' || { echo "=== preflight failed: no kernel can be compiled and launched here; stopping"; exit 3; }
import os
import numpy as np
from tuner.kernel import check_numba_config

check_numba_config()  # before Numba's GPU module loads, as tuner checks it
from numba import cuda

@cuda.jit
def one(x):
    x[0] = 1.0

x = cuda.to_device(np.zeros(1, np.float32))
one[1, 1](x)
assert x.copy_to_host()[0] == 1.0, "the one-line kernel did not write"
print("preflight: a kernel compiled and ran; CUDA_HOME", os.environ.get("CUDA_HOME", "unset"))
if not cuda.is_available() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    raise SystemExit(0)
from numba.cuda.cudadrv import driver, nvvm, runtime
print("driver CUDA", driver.driver.get_version(), "runtime", runtime.runtime.get_version(),
      "NVVM", nvvm.NVVM().get_version(), "device", cuda.get_current_device().name)
PY

search_trials=("${trials[@]}")
[ "${SIMULATE:-0}" = 1 ] || search_trials=()
case $part in
e2e)
  step "$python" -m tuner devices --json
  # Verification must fail kernels with planted bugs, before any search trusts it: on a GPU, which
  # checks no bounds, a store of one too many must change verify's guard band after C.
  step "$python" bench/verification_mutants.py "$work/out/verification"
  # Verification compares values, so a read past A or B whose value does not matter passes it on a
  # GPU: compute-sanitizer checks every access of the defaults, the double-buffered kernels and the
  # shipped records' configurations as they verify. Bounded: its checks stop after 65 s (a check
  # then running is killed and fails), the whole after 90. Without compute-sanitizer, or on the
  # simulator, it checks nothing, says so and exits 0.
  step timeout -k 10 -s TERM 90 "$python" bench/sanitized_kernels.py "$work/out/sanitized" --budget 65
  step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype float32 --shape "${big[@]}" --timeout 100 "${search_trials[@]}"
  step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype float64 --shape "${big[@]}" --timeout 100 "${search_trials[@]}"
  step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype float32 --shape "${odd[@]}" --timeout 45 "${search_trials[@]}"
  step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype float32 "${batch[@]}" --timeout 30 "${search_trials[@]}"
  step "$python" -m tuner list
  # The static ceilings: on a GPU the compile workers count each suggestion from the IR of the kernel
  # Numba compiled (resources.py); a count that fails prunes nothing and says nothing, so it is
  # checked here: the float32 and float64 studies must hold counted trials. None on the simulator.
  step "$python" - <<'PY'
import os
from pathlib import Path

import optuna

from tuner.storage import open_storage

counted = {}
for journal in sorted((Path(os.environ["TUNER_CACHE_DIR"]) / "studies").glob("*.journal")):
    storage = open_storage(str(journal))
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials(deepcopy=False)
        ceilings = [t.user_attrs["ceiling"] for t in trials if "ceiling" in t.user_attrs]
        pruned = sum(any("ceiling" in reason for reason in t.user_attrs.get("pruned", [])) for t in trials)
        counted[summary.study_name] = len(ceilings)
        print(f"{summary.study_name}: {len(trials)} trials, {len(ceilings)} with a static ceiling "
              f"({min(ceilings, default=0):.3f}-{max(ceilings, default=0):.3f}), {pruned} pruned by it")
if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    for dtype in ("float32", "float64"):
        assert any(counted[name] for name in counted if dtype in name), f"no {dtype} trial has a static ceiling"
PY
  step "$python" bench/matmul_on_gpu.py "$work/out/matmul" --shape "${big[@]}"
  # What a new user gets: an empty cache, so tuner.matmul takes the records shipped in cache/records.
  SHAPE="${big[*]}" TUNER_CACHE_DIR="$work/empty-cache" TUNER_KERNEL_DIR="$work/empty-cache/kernels" \
    step "$python" - <<'PY'
import os
import time

import numpy as np

import tuner
from tuner import cache

m, n, k = map(int, os.environ["SHAPE"].split())
start = time.perf_counter()
kernel = tuner.get_kernel(m, n, k, "float32")
print(f"get_kernel {time.perf_counter() - start:.2f} s; record {kernel.record}; config {kernel.config.describe()}")
rng = np.random.default_rng(0)
A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
C = tuner.matmul(A, B)
reference = A.astype(np.float64) @ B
error = np.linalg.norm(C - reference) / np.linalg.norm(reference)
print(f"tuner.matmul {m}x{n}x{k} from an empty cache: relative error {error:.1e}")
if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":  # the simulator has no shipped record of its own
    assert kernel.tuned and cache.shipped_dir() in kernel.record.parents, "not a shipped record"
    assert error < 1e-5
PY
  # As after a template change: the float32 big record becomes one of this GPU under older templates,
  # and the study is moved aside (kept in the tarball), so regenerate must re-render, re-verify
  # and re-time its configurations.
  BIG="float32-$(IFS=x; echo "${big[*]}").json" step "$python" - <<'PY'
import dataclasses, os
from pathlib import Path
from tuner import cache
root = Path(os.environ["TUNER_CACHE_DIR"])
path = next(p for p in cache.record_paths(root) if p.name == os.environ["BIG"])
found = cache.read_record(path)
device = found.device
older = dataclasses.replace(device, software={**device.software, "templates": "older"})
cache.write_record(cache.record_path(root, older.slug, path.stem), dataclasses.replace(found, device=older))
path.unlink()
study = root / "studies" / f"{device.slug}.journal"
study.rename(study.with_suffix(".journal.searched"))
print("moved", path, "to", cache.record_path(root, older.slug, path.stem), "and the study aside")
PY
  # Bounded, so that the part's last step runs within the device call: regenerate stops cleanly on
  # SIGTERM (killed 30 s later if hung). On a GPU it also re-verifies the shipped records (compiled
  # ahead in workers; tf32 and float16-tc are counted there and compiled again in this process),
  # which the simulator refuses as too large. Exit 124 says
  # the bound was reached, and counts as a failed step.
  step timeout -k 30 -s TERM 200 "$python" -m tuner regenerate "${simulate[@]}" "${trials[@]}"
  step "$python" -m tuner list --json
  ;;
compare)
  # The records committed to cache/ (e2e's), read as the user cache: the tuned kernels are theirs.
  TUNER_CACHE_DIR="$PWD/cache" step "$python" bench/versus_cublas.py "$work/out" "${shapes[@]}"
  # With no compile worker (as on a GPU in exclusive-process mode) the measuring process counts each
  # ceiling from the kernel it compiles and then measures; each counted trial must say so.
  step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype float32 --shape "${odd[@]}" --timeout 40 \
    --compile-workers 0 "${search_trials[@]}"
  step "$python" - <<'PY'
import os
from pathlib import Path

import optuna

from tuner.storage import open_storage

trials = [trial for journal in sorted((Path(os.environ["TUNER_CACHE_DIR"]) / "studies").glob("*.journal"))
          for summary in optuna.get_all_study_summaries(open_storage(str(journal)), include_best_trial=False)
          for trial in optuna.load_study(study_name=summary.study_name, storage=open_storage(str(journal))).trials
          if trial.state == optuna.trial.TrialState.COMPLETE]
counted = [trial for trial in trials if "ceiling" in trial.user_attrs]
timed = [trial.user_attrs["seconds"]["compile_and_count"] for trial in counted
         if "compile_and_count" in trial.user_attrs.get("seconds", {})]
print(f"no compile worker: {len(trials)} completed trials, {len(counted)} with a static ceiling, {len(timed)} of the measured "
      f"with compile_and_count seconds ({', '.join(f'{seconds:.1f}' for seconds in timed)})")
if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    assert counted and timed, "no trial was counted, or none measured says how long its count took"
PY
  ;;
tensor)
  # Tensor-core kernels link the mma wrappers and are not cached on disk, so each variant compiles
  # in the measuring process: budgets in seconds, not trials. The probe reads these records; it
  # runs in a process of its own, since CuPy reads CUPY_TF32 once.
  for precision in tf32 float16-tc; do
    step "$python" -m tuner search --backend cuda "${simulate[@]}" --dtype $precision --shape "${tc[@]}" \
      --timeout 150 "${search_trials[@]}"
  done
  step "$python" -m tuner list
  step "$python" bench/tensor_core_probe.py "$work/out/tensor_core" "${tc_shapes[@]}"
  ;;
sweep)
  # Straight into $out, line by line, so a run cut short still returns what it measured.
  step "$python" bench/sweep.py "$out" --shape "${big[@]}" --budget "${SWEEP_BUDGET:-480}" \
    --skip $(ls bench/data/sweep-*.jsonl 2>/dev/null)
  ;;
*)
  echo "unknown part $part: e2e, compare, tensor or sweep"; exit 2 ;;
esac
echo "=== $failed failed steps; wrote $(ls "$out" | tr '\n' ' ')"
[ $failed = 0 ]
