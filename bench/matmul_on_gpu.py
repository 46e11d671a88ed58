"""tuner.matmul on the GPU: first-call latency (cold and warm), dispatch overhead, and results
checked against cuBLAS for NumPy, Numba and CuPy operands.

    python bench/matmul_on_gpu.py OUTDIR [--shape M N K] [--dtype float32]

- cold: a fresh process with empty kernel and Numba caches: import, render, compile, launch;
- warm: a fresh process after that, served from Numba's on-disk cache (`cache=True`);
- hot: the second call in the same process; then a call with an F-ordered device A,
  after which the tuned kernel must still have one specialization (Numba's compiled overloads):
  the C-contiguous one it was verified for, A copied into a contiguous array first;
- dispatch: per-call time of tuner.matmul on device arrays against a bare launch of the same
  compiled kernel, on a product small enough that the CPU side is what is timed.
Each phase runs in its own process. Writes OUTDIR/matmul_on_gpu.json, prints a table last, and exits 1
if a phase failed or the tuned kernel was compiled for another layout too.
Times are wall-clock (time.perf_counter) around synchronised calls. It also runs on the
simulator (NUMBA_ENABLE_CUDASIM=1), to check the script, where the times mean nothing.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DISPATCH_CALLS = 2000


def _elapsed(function) -> tuple[float, object]:
    start = time.perf_counter()
    value = function()
    return time.perf_counter() - start, value


def _first_call(shape, dtype) -> dict:
    """One process's first and second call, with the import and device set-up timed apart."""
    import_seconds, tuner = _elapsed(lambda: __import__("tuner"))
    from numba import cuda

    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, shape[::2]).astype(dtype)
    B = rng.uniform(-1, 1, shape[:0:-1]).astype(dtype)
    setup_seconds, kernel = _elapsed(lambda: tuner.get_kernel(*shape, dtype))
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    cuda.synchronize()

    def call():
        result = tuner.matmul(dA, dB)
        cuda.synchronize()
        return result

    first_seconds, result = _elapsed(call)
    second_seconds, _ = _elapsed(call)
    # F-ordered as NumPy's copy is (a device array's .T would be a C-contiguous copy on a GPU)
    transposed = tuner.matmul(cuda.to_device(np.asfortranarray(A)), dB).copy_to_host()
    stats = getattr(kernel.kernel.function, "stats", None)  # the simulator keeps none, nor overloads
    disk_cache = {"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values())} if stats else None
    reference = A.astype(np.float64) @ B.astype(np.float64)
    error, transposed_error = (float(np.linalg.norm(C - reference) / np.linalg.norm(reference))
                               for C in (result.copy_to_host(), transposed))
    return {"first_use_seconds": setup_seconds + first_seconds,
            "import_seconds": import_seconds, "get_kernel_seconds": setup_seconds,
            "first_call_seconds": first_seconds, "second_call_seconds": second_seconds,
            "relative_error": error, "transposed_A_relative_error": transposed_error,
            "kernel_specializations": len(kernel.kernel.function.overloads) if stats else None,
            "tuned": kernel.tuned, "config": kernel.config.as_dict(), "disk_cache": disk_cache,
            "record": str(kernel.record) if kernel.record else None}


def _dispatch(dtype) -> dict:
    """Per-call seconds of tuner.matmul against the bare kernel launch, on a 64^3 product."""
    import tuner
    from numba import cuda

    shape = (64, 64, 64)
    kernel = tuner.get_kernel(*shape, dtype)
    A, B = (cuda.to_device(np.ones((64, 64), dtype)) for _ in range(2))
    C = cuda.device_array((64, 64), kernel.kernel.space.precision.output)
    bare = kernel.kernel.bind(A, B, C)
    ways = {"bare launch (Kernel.bind)": bare,
            "TunedKernel.__call__": lambda: kernel(A, B, C),
            "tuner.matmul, out given": lambda: tuner.matmul(A, B, out=C),
            "tuner.matmul, new result": lambda: tuner.matmul(A, B)}
    per_call = {}
    calls = 5 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else DISPATCH_CALLS
    for name, launch in ways.items():
        for _ in range(calls // 40 + 1):
            launch()
        cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        cuda.synchronize()
        per_call[name] = (time.perf_counter() - start) / calls
    return {"shape": shape, "calls": calls, "seconds_per_call": per_call,
            "matmul_overhead_seconds": per_call["tuner.matmul, out given"] - per_call["bare launch (Kernel.bind)"]}


def _against_cublas(shape, dtype) -> dict:
    """Relative error of tuner.matmul against cuBLAS (through CuPy) for NumPy, Numba, CuPy and,
    where installed, PyTorch operands, and the kind of array each call returned; also a CuPy operand
    on a non-blocking stream beside a NumPy one, into a NumPy out (the streams must be ordered)."""
    import tuner

    try:
        import cupy
    except ImportError:
        return {"skipped": "CuPy is not installed"}
    from numba import cuda

    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, shape[::2]).astype(dtype)
    B = rng.uniform(-1, 1, shape[:0:-1]).astype(dtype)
    cupy_A, cupy_B = cupy.asarray(A), cupy.asarray(B)
    with cupy.cuda.Device():
        cublas = cupy.asnumpy(cupy.matmul(cupy_A, cupy_B)).astype(np.float64)
    results = {"numpy": tuner.matmul(A, B),
               "numba": tuner.matmul(cuda.to_device(A), cuda.to_device(B)),
               "cupy": tuner.matmul(cupy_A, cupy_B)}
    with cupy.cuda.Stream(non_blocking=True):  # exported with B: the launch goes on it, A's copy does not
        results["cupy_nonblocking_stream_host_A_numpy_out"] = tuner.matmul(
            A, cupy.asarray(B), out=np.empty((shape[0], shape[1]), np.float32 if dtype == "float16" else dtype))
    try:
        import torch

        results["torch"] = tuner.matmul(torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda"))
    except ImportError:
        pass
    kinds = {name: type(value).__module__ + "." + type(value).__name__ for name, value in results.items()}
    to_host = {"numba": lambda C: C.copy_to_host(), "cupy": cupy.asnumpy, "torch": lambda C: C.cpu().numpy()}
    results = {name: to_host.get(name, np.asarray)(value) for name, value in results.items()}
    norm = np.linalg.norm(cublas)
    return {"result_types": kinds, "relative_error_vs_cublas": {
        name: float(np.linalg.norm(value.astype(np.float64) - cublas) / norm) for name, value in results.items()}}


def _child(phase: str, shape, dtype) -> None:
    result = {"first": lambda: _first_call(shape, dtype), "dispatch": lambda: _dispatch(dtype),
              "cublas": lambda: _against_cublas(shape, dtype)}[phase]()
    print(json.dumps(result))


def _run_child(phase: str, args, env) -> dict:
    command = [sys.executable, __file__, "--child", phase, "--shape", *map(str, args.shape), "--dtype", args.dtype]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        return {"failed": done.returncode, "stderr": done.stderr[-3000:]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "warnings": done.stderr.strip().splitlines()[-5:]}


def _environment() -> dict:
    from tuner.runtime import detect_runtime

    runtime = detect_runtime()
    return {"device": runtime.device.as_dict(), "python": sys.version.split()[0], "platform": platform.platform(),
            "numpy": np.__version__, "command": " ".join(sys.argv)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--shape", nargs=3, type=int, default=[4096, 4096, 4096])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--child", choices=("first", "dispatch", "cublas"))
    args = parser.parse_args()
    if args.child:
        _child(args.child, tuple(args.shape), args.dtype)
        return
    kernels = Path(tempfile.mkdtemp(prefix="tuner-bench-kernels-"))
    env = {**os.environ, "TUNER_KERNEL_DIR": str(kernels)}
    results = {"environment": _environment(), "shape": args.shape, "dtype": args.dtype,
               "cold": _run_child("first", args, env), "warm": _run_child("first", args, env),
               "dispatch": _run_child("dispatch", args, env), "cublas": _run_child("cublas", args, env)}
    out = Path(args.outdir or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "matmul_on_gpu.json").write_text(json.dumps(results, indent=2) + "\n")
    device = results["environment"]["device"]
    print(f"{device['name']} [{device['fingerprint']}], {args.dtype} {'x'.join(map(str, args.shape))}")
    for phase in ("cold", "warm"):
        row = results[phase]
        if "failed" in row:
            print(f"{phase:5} failed: {row['stderr'].splitlines()[-1] if row['stderr'] else row['failed']}")
            continue
        print(f"{phase:5} first use {row['first_use_seconds']:.3f} s = get_kernel {row['get_kernel_seconds']:.3f} s "
              f"+ first call {row['first_call_seconds']:.4f} s; import {row['import_seconds']:.3f} s, "
              f"second call {row['second_call_seconds']:.4f} s, "
              f"error {row['relative_error']:.2e} (transposed A {row['transposed_A_relative_error']:.2e}, kernel "
              f"specializations {row['kernel_specializations']}), tuned {row['tuned']}, "
              f"Numba disk cache {row['disk_cache']}")
    dispatch = results["dispatch"]
    for name, seconds in dispatch.get("seconds_per_call", {}).items():
        print(f"dispatch {name:28} {seconds * 1e6:8.1f} us per call")
    print(f"cuBLAS check: {json.dumps(results['cublas'].get('relative_error_vs_cublas', results['cublas']))}")
    problems = _problems(results)
    for problem in problems:
        print(f"FAILED: {problem}")
    if problems:
        raise SystemExit(1)


def _problems(results: dict) -> list[str]:
    """What makes the run fail: a phase that failed, or a tuned kernel holding more than the one
    C-contiguous specialization it was verified for after the call on a device A of another layout."""
    problems = [f"the {phase} phase failed" for phase in ("cold", "warm", "dispatch", "cublas")
                if "failed" in results[phase]]
    problems += [f"{phase}: the kernel has {row['kernel_specializations']} specializations after the call on an "
                 f"F-ordered device A, not 1" for phase, row in ((phase, results[phase]) for phase in ("cold", "warm"))
                 if row.get("kernel_specializations") not in (None, 1)]
    return problems


if __name__ == "__main__":
    main()
