"""The measurement protocol: verify a variant once against a float64 reference, then time it.

A variant that fails to compile, fails to launch or gives a wrong answer is a Measurement with
that status and the reason; only an "ok" one has a time, so no failure can ever be the best.
"""
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import Tiling
from .formats import error_line
from .kernel import Kernel, load
from .problem import Problem
from .record import Measurement
from .runtime import Runtime
from .space import Space


@dataclass(frozen=True)
class Protocol:
    """How long to warm up and how many repetitions make a stable median."""

    warmup_seconds: float  # launch until this much launch time has passed
    batch: int  # repetitions per batch; a second batch is the first stability check
    max_reps: int
    stable: float  # stop once one more batch moves the median by less than this fraction


GPU_PROTOCOL = Protocol(warmup_seconds=0.05, batch=10, max_reps=200, stable=0.005)
# Simulated launches take seconds and do not vary with caches or clocks: one batch of two.
SIMULATOR_PROTOCOL = Protocol(warmup_seconds=0.0, batch=2, max_reps=2, stable=1.0)


@dataclass(frozen=True)
class Operands:
    """Fresh random inputs on the device, and the float64 product they must give."""

    A: object
    B: object
    reference: np.ndarray

    @classmethod
    def fresh(cls, runtime: Runtime, space: Space, problem: Problem, seed: int) -> "Operands":
        A, B = space.family.random_operands(problem, np.random.default_rng(seed), space.precision.input)
        reference = space.family.reference(A, B)
        return cls(runtime.module.to_device(A), runtime.module.to_device(B), reference)


@dataclass(frozen=True)
class Measured:
    """One variant measured, with what the search and the sweep keep beside the Measurement:
    every repetition's seconds, each phase's wall seconds (compile, verify, time) and the compiled
    kernel's registers, shared and local memory (empty on the simulator)."""

    measurement: Measurement
    times: tuple = ()
    phases: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)


def _resources(compiled) -> dict:
    if compiled is None:
        return {}
    return {"registers": compiled.regs_per_thread, "shared_bytes": compiled.shared_mem_per_block,
            "local_bytes": compiled.local_mem_per_thread}


def verify(runtime: Runtime, kernel: Kernel, operands: Operands, tolerance: float) -> tuple[float, str]:
    """Run once into a NaN-poisoned C and bound the relative error; (error, "") when correct."""
    poisoned = np.full(operands.reference.shape, np.nan, dtype=kernel.space.precision.output)
    C = runtime.module.to_device(poisoned)
    kernel.bind(operands.A, operands.B, C)()
    result = C.copy_to_host().astype(np.float64)
    error = float(np.linalg.norm(result - operands.reference) / max(np.linalg.norm(operands.reference), 1e-300))
    if not error <= tolerance:  # NaN fails too: an element the kernel never wrote
        return error, f"relative error {error:.3g} exceeds {tolerance:.0e}"
    return error, ""


def time_launch(runtime: Runtime, launch, protocol: Protocol) -> list[float]:
    """Seconds per repetition after warm-up, each after an L2 flush, until the median is stable."""
    warmed = 0.0
    while warmed < protocol.warmup_seconds:
        warmed += runtime.elapsed(launch)
    times: list[float] = []
    while True:
        before = statistics.median(times) if times else None
        for _ in range(protocol.batch):
            runtime.flush_l2()
            times.append(runtime.elapsed(launch))
        if len(times) >= protocol.max_reps:
            return times
        if before is not None and abs(statistics.median(times) - before) <= protocol.stable * before:
            return times


def measure(runtime: Runtime, space: Space, problem: Problem, config: Tiling, operands: Operands,
            protocol: Protocol, kernels: Path | None = None) -> Measured:
    """Compile (or load from Numba's disk cache), verify and time one statically valid
    configuration (its file in `kernels`, by default kernel.kernel_dir()), with the wall seconds
    of each phase."""
    phases, start = {}, time.perf_counter()

    def phase(name: str) -> None:
        nonlocal start
        phases[name], start = time.perf_counter() - start, time.perf_counter()

    try:
        kernel = load(space, config, kernels)
        resources = _resources(kernel.compile())
    except OSError:
        raise  # the kernel directory or the disk, not the variant
    except Exception as error:  # any other failure to build is this variant's, not the search's
        phase("compile")
        return Measured(Measurement("compile", error_line(error), clock=runtime.clock), phases=phases)
    phase("compile")
    try:
        error, wrong = verify(runtime, kernel, operands, space.family.tolerance(space.precision))
        phase("verify")
        if wrong:
            failed = Measurement("wrong", wrong, relative_error=error, clock=runtime.clock)
            return Measured(failed, (), phases, resources)
        C = runtime.module.device_array(operands.reference.shape, dtype=space.precision.output)
        times = time_launch(runtime, kernel.bind(operands.A, operands.B, C), protocol)
        phase("time")
    except Exception as error:  # a launch that fails marks the variant, and the search goes on
        return Measured(Measurement("launch", error_line(error), clock=runtime.clock), (), phases, resources)
    seconds = statistics.median(times)
    deciles = statistics.quantiles(times, n=10) if len(times) > 1 else [seconds] * 9
    gflops = problem.flops / seconds / 1e9
    peak = None if runtime.simulated else runtime.device.peak(space.precision.units)
    return Measured(Measurement(
        "ok", relative_error=error, seconds=seconds, spread=(deciles[-1] - deciles[0]) / seconds,
        reps=len(times), gflops=gflops, fraction_of_peak=gflops / peak if peak else None,
        clock=runtime.clock,
    ), tuple(times), phases, resources)


def verify_config(runtime: Runtime, space: Space, problem: Problem, config: Tiling, kernels: Path | None = None) -> str:
    """Why `config` does not compute `problem` correctly here (its compile or launch error, or its
    error against the float64 reference), or "" when it does."""
    try:
        kernel = load(space, config, kernels)
        kernel.compile()
        operands = Operands.fresh(runtime, space, problem, seed=0)
        _, wrong = verify(runtime, kernel, operands, space.family.tolerance(space.precision))
    except OSError:
        raise  # the kernel directory or the disk, not the configuration
    except Exception as error:  # the configuration's failure, said in one line
        return error_line(error)
    return wrong
