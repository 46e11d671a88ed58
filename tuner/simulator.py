"""Numba's CUDA simulator: a runtime that either backend's kernel source runs on, on the host CPU.

This is the one place that knows what the simulator is and what differs on it: whether it is on,
the Device it stands in as, how a kernel's `from numba import <module>` is bound to it, its clock
(the CPU time of every thread it runs) and the products too large for it.
"""
import contextlib
import os
import platform
import sys
import threading
import time
from unittest import mock

from .devices import Device, code_hashes, software
from .problem import Problem

CLOCK = "simulated CPU time"  # what a time measured on the simulator is, in words
ARCH = "simulator"  # the architecture in the simulator's device description
# What a search on the simulator does unless told otherwise: a 32-cubed product, 6 variants.
SHAPE = (32, 32, 32)
TRIALS = 6

# The simulator runs one Python thread per GPU thread. A launch of the default configuration
# (64x64 blocks of 256 threads) costs some 0.10-0.13 s per unit of work, a fitted model: each block
# is BLOCK_STEPS units, and each 8 of k one more per block (bench/results/simulator_cost.json).
# Beyond a 128-cubed product's work (76 units, 8 s) a launch may take minutes. The work is counted
# at that tile: a configuration of smaller tiles runs more threads and costs more (the seed's
# 16x16 blocks of 256 threads, 6.6 times as much at 64 cubed).
TILE, K_STEP, BLOCK_STEPS = 64, 8, 3

_LAUNCH = threading.Lock()

# jit options that only steer register allocation; the simulator's jit does not accept them.
_CODEGEN_ONLY_OPTIONS = ("launch_bounds", "max_registers")


def enabled() -> bool:
    """Whether this process runs (or will run) numba.cuda as the simulator: NUMBA_ENABLE_CUDASIM
    read as Numba reads it, a whole number, any but 0 turning it on (" 1" and "2" too); unset, off.
    ValueError for another value (empty too), which Numba would take for 0 with a warning that
    carries a traceback."""
    value = os.environ.get("NUMBA_ENABLE_CUDASIM")
    if value is None:
        return False
    try:
        return int(value) != 0
    except ValueError:
        raise ValueError(f"NUMBA_ENABLE_CUDASIM={value!r} is not a whole number, which Numba takes for 0 (off): "
                         "set it to 1 to run on Numba's CUDA simulator, or unset it") from None


def simulating() -> bool:
    """Whether numba.cuda, as imported in this process, is Numba's CUDA simulator."""
    try:
        from numba.cuda.core import config  # numba-cuda
    except ImportError:
        from numba import config  # the numba.cuda built into numba<0.64 (numba-hip's environment)
    return bool(config.ENABLE_CUDASIM)


def stands_in_for(module) -> bool:
    """Whether `module`, loaded as a GPU's, is numba.cuda running as the simulator, as Numba's
    configuration may ask (NUMBA_ENABLE_CUDASIM, or enable_cudasim in .numba_config.yaml)."""
    return module.__name__ == "numba.cuda" and simulating()


def describe(backend: str) -> Device:
    """Numba's CUDA simulator standing in for a `backend` GPU: the host CPU runs every thread."""
    return Device(
        backend=backend,
        name=f"Numba CUDA simulator on {platform.processor() or platform.machine()}",
        arch=ARCH,
        multiprocessors=os.cpu_count() or 1,
        memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        clock_khz=0,
        l2_bytes=0,
        driver="none",
        runtime="none",
        software={**software(("numba", "numba-cuda")), **code_hashes()},
    )


def describes(device: dict) -> bool:
    """Whether a device description read from a file (as much of one as a benchmark result holds)
    is the simulator's."""
    return device.get("arch") == ARCH


@contextlib.contextmanager
def bound(module_name: str):
    """While a kernel's source runs, on the simulator: `from numba import <module_name>` yields
    the simulated numba.cuda, whose jit then ignores the options that only steer register
    allocation. Only that one entry of sys.modules is set and put back, so that a module another
    thread imports meanwhile stays imported. Off the simulator, nothing changes."""
    if not simulating():
        yield
        return
    import numba
    from numba import cuda

    simulated_jit = cuda.jit

    def jit(*args, **options):
        for name in _CODEGEN_ONLY_OPTIONS:
            options.pop(name, None)
        return simulated_jit(*args, **options)

    name = f"numba.{module_name}"
    imported = sys.modules.get(name)
    sys.modules[name] = cuda
    try:
        with mock.patch.object(numba, module_name, cuda, create=True), mock.patch.object(cuda, "jit", jit):
            yield
    finally:
        if imported is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = imported


def elapsed(launch) -> float:
    """Seconds of CPU time one call of `launch` takes, over all the simulator's threads."""
    start = time.process_time()
    launch()
    return time.process_time() - start


def work(problem: Problem) -> int:
    """What a launch of the default configuration for `problem` costs the simulator, in the units above."""
    blocks = problem.products * -(-problem.m // TILE) * -(-problem.n // TILE)
    return blocks * (-(-problem.k // K_STEP) + BLOCK_STEPS)


MAX_WORK = work(Problem(128, 128, 128))


def one_launch_at_a_time():
    """A hold on the simulator for one launch, where it simulates (nothing otherwise): it keeps a
    launch's thread state, and a kernel's last configuration, for the whole process, so launches
    from several threads at once would mix up (tuner.matmul's callers may use threads)."""
    return _LAUNCH if simulating() else contextlib.nullcontext()


def too_slow(problem: Problem) -> str:
    """Why `problem` would take minutes or more on the simulator, or "" if it would not."""
    if work(problem) > MAX_WORK:
        return (f"{problem.shape_text} is too large for the simulator, which runs one Python thread per GPU "
                "thread (at most the work of a 128x128x128 product, counted in 64x64 blocks; a GPU takes more)")
    return ""
