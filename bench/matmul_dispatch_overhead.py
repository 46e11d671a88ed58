"""The per-call CPU time of tuner.matmul's own Python layer, on Numba's CUDA simulator with the
simulated kernel launch replaced by a no-op. It says nothing about GPU time.

    python bench/matmul_dispatch_overhead.py [--against TREE] [--rounds 7] [--calls 2000] [--out FILE]

What runs is everything tuner does around a launch: the current device and its records
(tuned._library), the operand checks and placement (arrays.prepare), the kernel's lookup
(Library.kernel), the bound launch with its grid (Kernel.bind) and the result (Call.result), and
the simulator's configuration of the launch. The launch itself (FakeCUDAKernel.__call__, the
lowest level, where the simulator would run the kernel's threads) returns at once. Each way is
timed on 64x64 float32 simulator device arrays (a 4x32x32 stack for the batched family), and
once on stand-ins for numba-cuda's device arrays (_NumbaLike): the best of 3 loops of --calls
calls, per call.

On the simulator some steps cost differently than on a GPU: its device arrays are NumPy arrays
behind a Python wrapper (attribute access is dearer; the stand-ins are not), the current device is
not asked of a driver, the launch is configured by the simulator, not by numba-cuda, and the
driver's launch (some 50 us on an H100 with numba-cuda's dispatch, the bare launch of
bench/results/h100/matmul_on_gpu.json) is absent.

With --against TREE (a checkout of another commit, its tuner/templates present), each round runs
one child process per tree, alternating, so that both see the same load; the medians over rounds
and their ratio (this tree's over TREE's) are printed as JSON, with the versions, the commits
and the load average.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def _stub_the_launch() -> None:
    """Make a simulated kernel launch (not a device function's call inside one) do nothing."""
    from numba.cuda.simulator import kernel

    launch = kernel.FakeCUDAKernel.__call__

    def no_launch(self, *args):
        if self._device or kernel._kernel_context:
            return launch(self, *args)
        return None

    kernel.FakeCUDAKernel.__call__ = no_launch


class _NumbaLike:
    """A stand-in for a numba-cuda device array over host memory, as tuner.matmul reads one: plain
    attributes, and the CUDA Array Interface built at each ask, as numba-cuda's property builds it
    (the simulator's arrays forward each attribute to a NumPy array, and export NumPy's interface).
    The stubbed launch never reads it."""

    def __init__(self, host):
        self._host = host
        self.shape, self.strides, self.dtype, self.size, self.ndim = (host.shape, host.strides, host.dtype,
                                                                       host.size, host.ndim)
        self.stream = 0

    def copy_to_host(self):
        return self._host.copy()

    def is_c_contiguous(self):
        return self._host.flags.c_contiguous

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": None if self._host.flags.c_contiguous else self.strides,
                "data": (self._host.ctypes.data, False), "typestr": self.dtype.str, "stream": None, "version": 3}


def _measure(calls: int) -> dict:
    """Per-call seconds of each way of launching, in this process (a child)."""
    import warnings

    import numpy as np
    from numba import cuda

    _stub_the_launch()
    import tuner

    warnings.simplefilter("ignore", tuner.UntunedWarning)  # once, at the first call of each product
    A, B = (cuda.to_device(np.ones((64, 64), np.float32)) for _ in range(2))
    C = cuda.device_array((64, 64), np.float32)
    stack_A, stack_B = (cuda.to_device(np.ones((4, 32, 32), np.float32)) for _ in range(2))
    stack_C = cuda.device_array((4, 32, 32), np.float32)
    like_A, like_B, like_C = (_NumbaLike(np.ones((64, 64), np.float32)) for _ in range(3))
    kernel = tuner.get_kernel(64, 64, 64, "float32")
    bare = kernel.kernel.bind(A, B, C)
    ways = {"bare launch (Kernel.bind)": bare,
            "TunedKernel.__call__": lambda: kernel(A, B, C),
            "tuner.matmul, out given": lambda: tuner.matmul(A, B, out=C),
            "tuner.matmul, new result": lambda: tuner.matmul(A, B),
            "tuner.matmul, alpha and beta": lambda: tuner.matmul(A, B, out=C, alpha=2.0, beta=0.5),
            "tuner.matmul, a stack, out given": lambda: tuner.matmul(stack_A, stack_B, out=stack_C),
            "tuner.matmul, out given, numba-cuda-like arrays": lambda: tuner.matmul(like_A, like_B, out=like_C)}
    seconds = {}
    for name, launch in ways.items():
        launch()
        seconds[name] = min(timeit.repeat(launch, number=calls, repeat=3)) / calls
    return seconds


def _child(tree: Path, calls: int, cache: Path) -> dict:
    """One child's measurements, with `tree`'s tuner imported, on the simulator, in an empty cache."""
    environment = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_ENABLE_CUDASIM": "1",
                   "TUNER_CACHE_DIR": str(cache)}
    environment.pop("TUNER_KERNEL_DIR", None)
    done = subprocess.run([sys.executable, __file__, "--child", "--calls", str(calls)], env=environment,
                          cwd=cache, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip()


def _versions() -> dict:
    from importlib.metadata import version

    return {"python": platform.python_version(), **{name: version(name) for name in ("numpy", "numba", "numba-cuda")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout, measured alternately with this one")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.calls)))
        return
    trees = {"this": REPOSITORY, **({"against": args.against.resolve()} if args.against else {})}
    rounds = {name: [] for name in trees}
    load_before, started = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            for name, tree in trees.items():
                cache = Path(scratch) / f"{name}-{number}"
                cache.mkdir(mode=0o700)
                rounds[name].append(_child(tree, args.calls, cache))
    medians = {name: {way: statistics.median(measured[way] for measured in runs) for way in runs[0]}
               for name, runs in rounds.items()}
    result = {
        "what": "seconds per call on Numba's CUDA simulator with the launch stubbed: tuner's own layer, no GPU time",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "versions": _versions(),
        "trees": {name: {"path": str(tree), "commit": _commit(tree)} for name, tree in trees.items()},
        "rounds": args.rounds, "calls": args.calls, "wall_seconds": round(time.time() - started, 1),
        "median_seconds_per_call": medians,
        "all_rounds": rounds,
    }
    if args.against:
        result["ratio_this_over_against"] = {way: medians["this"][way] / medians["against"][way]
                                             for way in medians["this"]}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
