"""The tuned kernels against cuBLAS (through CuPy) and the seed's kernels, measured in one run.

    python bench/versus_cublas.py OUTDIR [--dtypes float32 float64] [--shapes M,N,K ...]

For each dtype and shape it times, with the search's protocol (device events, L2 flushed before
each repetition, median):
- the tuned kernel (`tuner.get_kernel`, from the cache present; untuned if none);
- the probe: named configurations rendered directly (PROBE), also where the search's heuristics
  prune them: the default, the dtype's flagship (`tuner.space.FLAGSHIPS`, the highest static
  ceiling), the flagship promising 2 blocks per SM in its launch bounds, and its 8x8 tile with
  scalar (strided) fragments, fully unrolled;
- cuBLAS through CuPy: strict FP32 (CUPY_TF32=0 and NVIDIA_TF32_OVERRIDE=0 are set before CuPy
  loads, unless given, and recorded; a float32 cuBLAS row whose error against float64 exceeds
  STRICT_FP32, as TF32's near 1e-3 would, is marked and makes the run exit 1) and FP64;
- the seed's `fast_matmul` (TPB=16) and its naive kernel, from ../shared/seeds, with the bounds
  fixed only as far as the shapes need: the K loop runs over ceil(K/16) tiles instead of the
  grid's width, loads outside A or B read 0, and no thread returns before a barrier. As in the
  seed, they accumulate in a float64 `tmp = 0.`, map threadIdx.x to rows (uncoalesced loads,
  bank conflicts in sA), which makes the "x seed" ratios large. The naive kernel skips products
  over 4096^3.
"Of peak" is against the FP32 or FP64 vector peak; cuBLAS's DGEMM uses the FP64 tensor cores,
so its share can pass 100%. Small products include Numba's per-launch host time in the events.
Each result is checked against cuBLAS in float64. Writes OUTDIR/versus_cublas.json (device
fingerprint, versions, command, one row per kernel) and prints a table of GFLOP/s, the ratio to
cuBLAS, the ratio to the seed and the fraction of peak last. It runs on the simulator as a dry
run of the script (NumPy stands in for cuBLAS; the times mean nothing).
"""
import argparse
import functools
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from numba import cuda  # a global, as the simulator needs for a kernel's `cuda`

import tuner
from tuner import DISTRIBUTION
from tuner.backends import CUDA
from tuner.benchmarks import BENCH_FILE
from tuner.devices import software
from tuner.kernel import load
from tuner.measure import GPU_PROTOCOL, Protocol, time_launch
from tuner.runtime import detect_runtime
from tuner.config import Config
from tuner.space import FLAGSHIPS, Space

SHAPES = ["1024,1024,1024", "4096,4096,4096", "8192,8192,8192", "1000,1000,1000", "4096,4096,128", "127,4099,513"]
TPB = 16
# The seeds' launches, when this slow (at large sizes), get three repetitions, not a stable median.
SLOW = Protocol(warmup_seconds=0.0, batch=3, max_reps=3, stable=1.0)
SLOW_SECONDS = 0.02
# The largest relative error of a float32 cuBLAS product that is strict FP32 (TF32 errs near 1e-3).
STRICT_FP32 = 1e-5


def probe(dtype: str) -> dict[str, Config]:
    """The named configurations timed beside the tuned kernel, for `dtype`."""
    flagship = FLAGSHIPS.get(dtype)
    if flagship is None:
        return {"default": Config()}
    scalar = replace(flagship, vector_fragments=False, pad=1, min_blocks=0)
    return {"default": Config(), "flagship": flagship, "flagship, 2 blocks per SM": replace(flagship, min_blocks=2),
            "8x8 scalar fragments, full unroll": scalar}


@functools.cache
def seed_kernels(dtype):
    """The seed's naive and fast_matmul kernels, for `dtype` shared arrays (compiled once per
    dtype and layout by Numba)."""
    @cuda.jit
    def naive(A, B, C):
        i, j = cuda.grid(2)
        if i < C.shape[0] and j < C.shape[1]:
            tmp = 0.
            for k in range(A.shape[1]):
                tmp += A[i, k] * B[k, j]
            C[i, j] = tmp

    @cuda.jit
    def fast_matmul(A, B, C):
        sA = cuda.shared.array(shape=(TPB, TPB), dtype=dtype)
        sB = cuda.shared.array(shape=(TPB, TPB), dtype=dtype)
        x, y = cuda.grid(2)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tmp = 0.
        for i in range((A.shape[1] + TPB - 1) // TPB):
            sA[tx, ty] = A[x, ty + i * TPB] if x < A.shape[0] and ty + i * TPB < A.shape[1] else 0
            sB[tx, ty] = B[tx + i * TPB, y] if y < B.shape[1] and tx + i * TPB < B.shape[0] else 0
            cuda.syncthreads()
            for j in range(TPB):
                tmp += sA[tx, j] * sB[j, ty]
            cuda.syncthreads()
        if x < C.shape[0] and y < C.shape[1]:
            C[x, y] = tmp

    return naive, fast_matmul


def _timed(runtime, launch, seconds_guess: float, seed: bool) -> list[float]:
    return time_launch(runtime, launch, SLOW if seed and seconds_guess > SLOW_SECONDS else GPU_PROTOCOL)


def _compare(runtime, cupy, dtype: str, shape: tuple[int, int, int]) -> list[dict]:
    m, n, k = shape
    rng = np.random.default_rng(0)
    A, B = rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    if cupy is not None:
        reference = cupy.asnumpy(cupy.asarray(A, np.float64) @ cupy.asarray(B, np.float64))
    else:
        reference = A.astype(np.float64) @ B.astype(np.float64)
    flops = 2 * m * n * k
    rows = []

    def record(name, launch, C, **extra):
        launch()
        result = C.copy_to_host() if hasattr(C, "copy_to_host") else cupy.asnumpy(C)
        error = float(np.linalg.norm(result.astype(np.float64) - reference) / np.linalg.norm(reference))
        first = runtime.elapsed(launch)
        times = _timed(runtime, launch, first, seed=name.startswith("seed"))
        median = statistics.median(times)
        rows.append({"dtype": dtype, "shape": shape, "kernel": name, "seconds": median, "reps": len(times),
                     "times": times, "gflops": flops / median / 1e9, "relative_error": error, **extra})

    tuned = tuner.get_kernel(m, n, k, dtype)
    C = cuda.device_array((m, n), dtype)
    record("tuned", tuned.kernel.bind(dA, dB, C), C, config=tuned.config.as_dict(), tuned=tuned.tuned,
           tuned_for=tuned.tuned_for.key if tuned.tuned_for else None)
    space = Space.of(CUDA, dtype)
    for name, config in probe(dtype).items():
        broken = space.broken_rules(config)
        if broken:
            print(f"probe {name!r} ({dtype}) not run: {broken[0]}", file=sys.stderr)
            continue
        C = cuda.device_array((m, n), dtype)
        record(name, load(space, config).bind(dA, dB, C), C, config=config.as_dict(),
               pruned_by=space.pruned_by(config))
    if cupy is not None:
        cA, cB = cupy.asarray(A), cupy.asarray(B)
        cC = cupy.empty((m, n), dtype)
        record("cublas", lambda: cupy.matmul(cA, cB, out=cC), cC,
               tf32={name: os.environ.get(name) for name in ("CUPY_TF32", "NVIDIA_TF32_OVERRIDE")})
        if dtype == "float32" and not runtime.simulated:
            rows[-1]["strict_fp32"] = rows[-1]["relative_error"] <= STRICT_FP32
    naive, fast = seed_kernels(np.dtype(dtype).type)
    grid = ((m + TPB - 1) // TPB, (n + TPB - 1) // TPB)
    C = cuda.device_array((m, n), dtype)
    record("seed fast_matmul", lambda: fast[grid, (TPB, TPB)](dA, dB, C), C)
    if m * n * k <= 4096 ** 3:
        C = cuda.device_array((m, n), dtype)
        record("seed naive", lambda: naive[grid, (TPB, TPB)](dA, dB, C), C)
    by_name = {row["kernel"]: row["seconds"] for row in rows}
    peak = runtime.device.peak(dtype)
    for row in rows:
        row["ratio_to_cublas"] = by_name["cublas"] / row["seconds"] if "cublas" in by_name else None
        row["ratio_to_seed"] = by_name["seed fast_matmul"] / row["seconds"]
        row["fraction_of_peak"] = row["gflops"] / peak if peak and not runtime.simulated else None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, metavar="M,N,K")
    args = parser.parse_args()
    runtime = detect_runtime("cuda")
    os.environ.setdefault("CUPY_TF32", "0")  # before CuPy loads: it reads them once
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    try:
        import cupy
    except ImportError:
        cupy = None
    rows = [row for dtype in args.dtypes for text in args.shapes
            for row in _compare(runtime, cupy, dtype, tuple(int(size) for size in text.split(",")))]
    args.outdir.mkdir(parents=True, exist_ok=True)
    result = {"device": runtime.device.as_dict(), "clock": runtime.clock, "command": " ".join(sys.argv),
              "versions": software((DISTRIBUTION, "numba", "numba-cuda", "numpy", "cupy-cuda13x")),
              "protocol": {"default": GPU_PROTOCOL.__dict__, "slow": SLOW.__dict__}, "rows": rows}
    (args.outdir / BENCH_FILE).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{runtime.device.name} [{runtime.device.fingerprint}], {runtime.clock}")
    print(f"{'dtype':8} {'shape':16} {'kernel':34} {'GFLOP/s':>10} {'x cuBLAS':>9} {'x seed':>8} {'of peak':>8} "
          f"{'error':>8}")
    for row in rows:
        def show(value, form):
            return format(value, form) if value is not None else "-"
        print(f"{row['dtype']:8} {'x'.join(map(str, row['shape'])):16} {row['kernel']:34} {row['gflops']:10.4g} "
              f"{show(row['ratio_to_cublas'], '9.3f')} {show(row['ratio_to_seed'], '8.2f')} "
              f"{show(row['fraction_of_peak'], '8.1%')} {row['relative_error']:8.1e}"
              + ("  NOT STRICT FP32" if row.get("strict_fp32") is False else ""))
    if any(row.get("strict_fp32") is False for row in rows):
        raise SystemExit(f"cuBLAS's float32 error exceeds {STRICT_FP32}: it did not run in strict FP32")


if __name__ == "__main__":
    main()
