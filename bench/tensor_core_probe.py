"""The tuner's tensor-core kernels (tf32, float16-tc) against cuBLAS in the same mode, in one run.

    python bench/tensor_core_probe.py OUTDIR [--precisions tf32 float16-tc] [--shapes M,N,K ...] [--probe NAME ...]

For each precision and shape it times, with the search's protocol (device events, L2 flushed
before each repetition, median):
- the tuned kernel (`tuner.get_kernel`, from the cache present, so run `tuner search --dtype
  tf32` first; the untuned default if there is none, said in the row);
- the probe: named configurations rendered directly (PROBE): the default, and larger block and
  warp tiles with deeper k-tiles;
- cuBLAS through CuPy in the same mode: for tf32, float32 matmul with CUPY_TF32=1 (set here
  before CuPy loads, recorded); for float16-tc, cublasGemmEx with float16 inputs, a float32
  result and CUBLAS_COMPUTE_32F (CuPy's float16 matmul if gemmEx fails; the row says which).
Each result is compared with the float64 product of the inputs (relative Frobenius error) and
marked verified against the precision's tolerance (tuner/family.py); a row that fails makes the
run exit 1. Writes OUTDIR/tensor_core_probe.json (device fingerprint, versions, command, one row
per kernel) and prints a table with the ratio to cuBLAS last. On the simulator it is a dry run of
the script through the emulated mma wrappers: NumPy stands in for cuBLAS and the times mean nothing.
The targets (issue 21): >= 0.5x cuBLAS TF32 and >= 0.4x cuBLAS FP16 at 4096^3.
"""
import argparse
import json
import os
import statistics
import sys
import warnings
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "1")  # before CuPy is imported: its float32 matmul uses TF32

import numpy as np  # noqa: E402

import tuner  # noqa: E402
from tuner import DISTRIBUTION  # noqa: E402
from tuner.config import WarpConfig  # noqa: E402
from tuner.devices import software  # noqa: E402
from tuner.dtypes import PRECISIONS  # noqa: E402
from tuner.kernel import load  # noqa: E402
from tuner.measure import GPU_PROTOCOL, Protocol, time_launch  # noqa: E402
from tuner.runtime import detect_runtime  # noqa: E402
from tuner.space import Space  # noqa: E402

PRECISION_NAMES = ("tf32", "float16-tc")
PROBE = {
    "default": WarpConfig(),
    "128x128 block, 64x32 warps, k 32": WarpConfig(block_m=128, block_n=128, block_k=32, warp_m=64, warp_n=32),
    "128x64 block, 32x32 warps, k 32": WarpConfig(block_m=128, block_n=64, block_k=32),
}
DRY_RUN = Protocol(warmup_seconds=0.0, batch=1, max_reps=1, stable=1.0)


def _cublas(cupy, precision: str, A, B):
    """A launch of cuBLAS in `precision`'s mode on device copies of A and B, its result, and how it is called."""
    cA, cB = cupy.asarray(A), cupy.asarray(B)
    m, k = A.shape
    n = B.shape[1]
    cC = cupy.empty((m, n), np.float32)
    if precision == "tf32":
        return (lambda: cupy.matmul(cA, cB, out=cC)), cC, f"cupy.matmul float32, CUPY_TF32={os.environ['CUPY_TF32']}"
    from cupy_backends.cuda.libs import cublas

    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = cupy.cuda.device.get_cublas_handle()
    CUDA_R_16F, CUDA_R_32F, COMPUTE_32F, GEMM_DEFAULT = 2, 0, 68, -1

    def launch():  # row-major C = A @ B is column-major C^T = B^T @ A^T
        cublas.gemmEx(handle, 0, 0, n, m, k, one.ctypes.data, cB.data.ptr, CUDA_R_16F, n, cA.data.ptr, CUDA_R_16F,
                      k, zero.ctypes.data, cC.data.ptr, CUDA_R_32F, n, COMPUTE_32F, GEMM_DEFAULT)
    try:
        launch()
        cupy.cuda.Device().synchronize()
        return launch, cC, "cublas.gemmEx float16 in, float32 out, CUBLAS_COMPUTE_32F"
    except Exception as failed:  # noqa: BLE001 - recorded in the row
        cC16 = cupy.empty((m, n), np.float16)
        return (lambda: cupy.matmul(cA, cB, out=cC16)), cC16, f"cupy.matmul float16 (gemmEx failed: {failed})"


def compare(runtime, cupy, precision: str, shape: tuple[int, int, int], protocol: Protocol,
            probe: list[str]) -> list[dict]:
    m, n, k = shape
    rng = np.random.default_rng(0)
    space = Space.of(runtime.backend, precision)
    element = space.precision.input
    A, B = rng.uniform(-1, 1, (m, k)).astype(element), rng.uniform(-1, 1, (k, n)).astype(element)
    reference = A.astype(np.float64) @ B.astype(np.float64)
    tolerance = space.family.tolerance(space.precision)
    dA, dB = runtime.module.to_device(A), runtime.module.to_device(B)
    rows = []

    def record(name, launch, C, **extra):
        launch()
        result = C.copy_to_host() if hasattr(C, "copy_to_host") else (cupy.asnumpy(C) if cupy else C)
        error = float(np.linalg.norm(result.astype(np.float64) - reference) / np.linalg.norm(reference))
        times = time_launch(runtime, launch, protocol)
        median = statistics.median(times)
        rows.append({"precision": precision, "shape": shape, "kernel": name, "seconds": median, "reps": len(times),
                     "times": times, "tflops": 2 * m * n * k / median / 1e12, "relative_error": error,
                     "verified": error <= tolerance, "tolerance": tolerance, **extra})

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tuned = tuner.get_kernel(m, n, k, precision)
    C = runtime.module.device_array((m, n), np.float32)
    record("tuned", tuned.kernel.bind(dA, dB, C), C, config=tuned.config.as_dict(),
           tuned_for=str(tuned.tuned_for) if tuned.tuned_for else None, warnings=[str(w.message) for w in said])
    for name in probe:
        config = PROBE[name]
        C = runtime.module.device_array((m, n), np.float32)
        record(name, load(space, config).bind(dA, dB, C), C, config=config.as_dict(), pruned=space.pruned_by(config))
    if cupy is not None:
        launch, C, how = _cublas(cupy, precision, A, B)
        record("cublas", launch, C, call=how)
        for row in rows[:-1]:
            row["ratio_to_cublas"] = rows[-1]["seconds"] / row["seconds"]
    else:
        C = np.empty((m, n), np.float32)
        record("numpy (no CuPy)", lambda: np.matmul(A.astype(np.float32), B.astype(np.float32), out=C), C)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISION_NAMES), choices=PRECISION_NAMES)
    parser.add_argument("--shapes", nargs="+", default=["4096,4096,4096", "1000,1000,1000", "127,4099,513"],
                        metavar="M,N,K")
    parser.add_argument("--probe", nargs="*", default=list(PROBE), choices=list(PROBE), metavar="NAME",
                        help=f"the named configurations to time (default all: {'; '.join(PROBE)})")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    versions = software((DISTRIBUTION, "numba", "numba-cuda", "numpy", "cupy-cuda13x"))
    runtime = detect_runtime("cuda")
    try:
        import cupy
    except ImportError:
        cupy = None
    protocol = DRY_RUN if runtime.simulated else GPU_PROTOCOL
    rows = [row for precision in args.precisions for text in args.shapes
            for row in compare(runtime, cupy, precision, tuple(int(size) for size in text.split(",")), protocol,
                               args.probe)]
    result = {"device": runtime.device.as_dict(), "clock": runtime.clock, "command": " ".join(sys.argv),
              "simulator_dry_run": runtime.simulated, "versions": versions,
              "precisions": {name: PRECISIONS[name].__dict__ for name in args.precisions},
              "env": {"CUPY_TF32": os.environ["CUPY_TF32"]}, "protocol": protocol.__dict__, "rows": rows}
    (args.outdir / "tensor_core_probe.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{runtime.device.name} [{runtime.device.fingerprint}], {runtime.clock}")
    for row in rows:
        ratio = row.get("ratio_to_cublas")
        print(f"{row['precision']:10} {'x'.join(map(str, row['shape'])):14} {row['kernel'][:34]:34} "
              f"{row['tflops']:9.4g} TFLOP/s error {row['relative_error']:.1e}"
              f"{'' if row['verified'] else ' NOT VERIFIED'}{'' if ratio is None else f'  {ratio:6.3f}x cuBLAS'}")
    if not all(row["verified"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
