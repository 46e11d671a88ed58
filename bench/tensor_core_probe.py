"""A hand-written tensor-core GEMM on the mma.sync wrappers (tuner/mma.py) against cuBLAS in the same mode.

    python bench/tensor_core_probe.py OUTDIR [--shapes M,N,K ...] [--modes tf32 float16]
    python bench/tensor_core_probe.py OUTDIR --static     # no GPU: registers, spills, HMMA of each kernel

The kernel: 64x64 block tiles, four warps of 32x32 (2x4 mma tiles each), k-tiles of two mma steps,
staged through shared memory with zeros past the edges; fragments are read from shared memory in the
PTX ISA layouts. It is a probe of the wrappers and a first number, not the tuned kernel of issue 21.
Modes, each against cuBLAS through CuPy in the same mode:
- tf32: float32 in and out, TF32 multiplies; cuBLAS with CUPY_TF32=1 (set here before CuPy loads);
- float16: float16 in, float32 accumulate and out; cuBLAS's gemmEx with those types and
  CUBLAS_COMPUTE_32F (CuPy's matmul, with a float16 result, if gemmEx fails; the row says which).
Each result is compared with the float64 product of the inputs (relative Frobenius error; `verified`
against the mode's tolerance), then timed with the search's protocol (device events, L2 flushed,
median). Writes OUTDIR/tensor_core_probe.json (device fingerprint, versions, command, rows).
On the simulator it is a dry run through the emulated wrappers: NumPy stands in for cuBLAS and
the times mean nothing.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "1")  # before CuPy is imported: its float32 matmul uses TF32

import numpy as np  # noqa: E402
from numba import cuda, types  # noqa: E402  (a global, as the simulator needs for a kernel's `cuda`)

from tuner import DISTRIBUTION  # noqa: E402
from tuner.devices import software  # noqa: E402
from tuner.measure import GPU_PROTOCOL, Protocol, time_launch  # noqa: E402
from tuner.mma import SHAPES, cubin, functions  # noqa: E402
from tuner.runtime import detect_runtime  # noqa: E402
from tuner.simulator import simulating  # noqa: E402

BM = BN = 64  # block tile; four warps of 32x32
THREADS = 128
DTYPES = {"tf32": (np.float32, np.float32), "float16": (np.float16, np.float32)}  # (in, out)
TOLERANCE = {"tf32": 2e-3, "float16": 1e-4}  # relative error against float64 (K up to 8192)
DRY_RUN = Protocol(warmup_seconds=0.0, batch=1, max_reps=1, stable=1.0)


def kernel(mode: str):
    """The GEMM kernel C = A @ B of `mode`, jitted (with LTO on a GPU, which inlines the wrappers)."""
    shape, mma = SHAPES[mode], functions()[mode]
    f16, ks, a_count, b_count = mode == "float16", shape.k, shape.a_count, shape.b_count
    bk = 2 * ks
    element = DTYPES[mode][0]

    def gemm(A, B, C):
        sA = cuda.shared.array((BM, bk), element)
        sB = cuda.shared.array((bk, BN), element)
        acc = cuda.local.array((2, 4, 4), np.float32)
        a = cuda.local.array((2, a_count), element)
        b = cuda.local.array(b_count, element)
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        g, t = lane >> 2, lane & 3
        wm, wn = (warp // 2) * 32, (warp % 2) * 32
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        m, n, k = C.shape[0], C.shape[1], A.shape[1]
        for mi in range(2):
            for ni in range(4):
                for i in range(4):
                    acc[mi, ni, i] = 0
        for k0 in range(0, k, bk):
            for e in range(tid, BM * bk, THREADS):
                r, c = e // bk, e % bk
                sA[r, c] = A[row0 + r, k0 + c] if row0 + r < m and k0 + c < k else 0
            for e in range(tid, bk * BN, THREADS):
                r, c = e // BN, e % BN
                sB[r, c] = B[k0 + r, col0 + c] if k0 + r < k and col0 + c < n else 0
            cuda.syncthreads()
            for kk in range(0, bk, ks):
                for mi in range(2):
                    for i in range(a_count):
                        if f16:
                            r, c = g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
                        else:
                            r, c = g + 8 * (i & 1), t + 4 * (i >> 1)
                        a[mi, i] = sA[wm + mi * 16 + r, kk + c]
                for ni in range(4):
                    for i in range(b_count):
                        r = 2 * t + (i & 1) + 8 * (i >> 1) if f16 else t + 4 * i
                        b[i] = sB[kk + r, wn + ni * 8 + g]
                    for mi in range(2):
                        mma(acc[mi, ni], a[mi], b)
            cuda.syncthreads()
        for mi in range(2):
            for ni in range(4):
                for i in range(4):
                    r, c = row0 + wm + mi * 16 + g + 8 * (i >> 1), col0 + wn + ni * 8 + 2 * t + (i & 1)
                    if r < m and c < n:
                        C[r, c] = acc[mi, ni, i]

    if simulating():
        return cuda.jit(gemm)
    return cuda.jit(gemm, lto=True)


def grid(m: int, n: int) -> tuple[int, int]:
    return (n + BN - 1) // BN, (m + BM - 1) // BM


def static_report(mode: str) -> dict:
    """ptxas's counts and the SASS's HMMA and local-memory instructions of `mode`'s kernel for sm_90."""
    from tuner.resources import parse_ptxas, ptxas_path
    from tuner.sass import disassemble

    source_kernel = kernel(mode).py_func
    inputs, output = (getattr(types, np.dtype(d).name) for d in DTYPES[mode])
    code, log = cubin(source_kernel, (inputs[:, :], inputs[:, :], output[:, :]), launch_bounds=THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(code)
        sass = disassemble(path, ptxas_path())
    counts = parse_ptxas(log, 0.0)
    return {"mode": mode, "registers": counts.registers, "stack_bytes": counts.stack_bytes,
            "spill_bytes": counts.spill_store_bytes + counts.spill_load_bytes, "shared_bytes": counts.shared_bytes,
            "hmma": len(re.findall(r"\bHMMA\.", sass)),
            "hmma_opcodes": sorted(set(re.findall(r"\bHMMA\.[\w.]+", sass))),
            "local_memory_instructions": len(re.findall(r"\b(?:LDL|STL)\b", sass))}


def _cublas(cupy, mode: str, A, B):
    """A launch of cuBLAS in `mode` on device copies of A and B, its result array, and how it is called."""
    cA, cB = cupy.asarray(A), cupy.asarray(B)
    m, k = A.shape
    n = B.shape[1]
    if mode == "tf32":
        cC = cupy.empty((m, n), np.float32)
        return (lambda: cupy.matmul(cA, cB, out=cC)), cC, f"cupy.matmul float32, CUPY_TF32={os.environ['CUPY_TF32']}"
    from cupy_backends.cuda.libs import cublas

    cC = cupy.empty((m, n), np.float32)
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


def compare(runtime, cupy, mode: str, shape: tuple[int, int, int], protocol: Protocol) -> list[dict]:
    m, n, k = shape
    rng = np.random.default_rng(0)
    element, output = DTYPES[mode]
    A, B = rng.uniform(-1, 1, (m, k)).astype(element), rng.uniform(-1, 1, (k, n)).astype(element)
    reference = A.astype(np.float64) @ B.astype(np.float64)
    rows = []

    def record(name, launch, C, **extra):
        launch()
        result = C.copy_to_host() if hasattr(C, "copy_to_host") else (cupy.asnumpy(C) if cupy else C)
        error = float(np.linalg.norm(result.astype(np.float64) - reference) / np.linalg.norm(reference))
        times = time_launch(runtime, launch, protocol)
        median = statistics.median(times)
        rows.append({"mode": mode, "shape": shape, "kernel": name, "seconds": median, "reps": len(times),
                     "times": times, "tflops": 2 * m * n * k / median / 1e12, "relative_error": error,
                     "verified": error <= TOLERANCE[mode], "tolerance": TOLERANCE[mode], **extra})

    gemm = kernel(mode)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), output)
    record("mma.sync probe", lambda: gemm[grid(m, n), THREADS](dA, dB, dC), dC)
    if cupy is not None:
        launch, C, how = _cublas(cupy, mode, A, B)
        record("cublas", launch, C, call=how)
    else:
        C = np.empty((m, n), output)
        record("numpy (no CuPy)", lambda: np.matmul(A.astype(output), B.astype(output), out=C), C)
    probe, baseline = rows[0], rows[-1]
    probe["ratio_to_cublas"] = baseline["seconds"] / probe["seconds"] if cupy is not None else None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--modes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--shapes", nargs="+", default=["4096,4096,4096", "1000,1000,1000", "127,4099,513"],
                        metavar="M,N,K")
    parser.add_argument("--static", action="store_true", help="no GPU: the kernels' SASS for sm_90 only")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    versions = software((DISTRIBUTION, "numba", "numba-cuda", "numpy", "cupy-cuda13x"))
    if args.static:
        result = {"command": " ".join(sys.argv), "arch": "sm_90", "versions": versions,
                  "kernels": [static_report(mode) for mode in args.modes]}
        (args.outdir / "tensor_core_probe_static.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["kernels"], indent=1))
        return
    runtime = detect_runtime("cuda")
    try:
        import cupy
    except ImportError:
        cupy = None
    protocol = DRY_RUN if runtime.simulated else GPU_PROTOCOL
    rows = [row for mode in args.modes for text in args.shapes
            for row in compare(runtime, cupy, mode, tuple(int(size) for size in text.split(",")), protocol)]
    result = {"device": runtime.device.as_dict(), "clock": runtime.clock, "command": " ".join(sys.argv),
              "simulator_dry_run": runtime.simulated, "versions": versions,
              "env": {"CUPY_TF32": os.environ["CUPY_TF32"]}, "protocol": protocol.__dict__, "rows": rows}
    (args.outdir / "tensor_core_probe.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{runtime.device.name} [{runtime.device.fingerprint}], {runtime.clock}")
    for row in rows:
        ratio = row.get("ratio_to_cublas")
        print(f"{row['mode']:8} {'x'.join(map(str, row['shape'])):16} {row['kernel']:16} {row['tflops']:9.4g} TFLOP/s "
              f"{'' if ratio is None else f'{ratio:6.3f}x cuBLAS'} error {row['relative_error']:.1e}"
              f"{'' if row['verified'] else ' NOT VERIFIED'}")
    if not all(row["verified"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
