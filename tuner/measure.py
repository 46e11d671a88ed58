"""The measurement protocol: verify a variant against a float64 reference, then time it.

A variant that fails to compile, fails to launch or gives a wrong answer is a Measurement with
that status and the reason; only an "ok" one has a time, so no failure can ever be the best. (The
search tells an "ok" one that the record would refuse as "implausible": search.Search._measure.)
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
    edges: bool = True  # verify also on small products with edge tiles, alpha and beta (verify_edges)


GPU_PROTOCOL = Protocol(warmup_seconds=0.05, batch=10, max_reps=200, stable=0.005)
# Simulated launches take seconds and do not vary with caches or clocks: one batch of two, and no
# second verification, which would double a simulated variant's time (tests verify edges themselves).
SIMULATOR_PROTOCOL = Protocol(warmup_seconds=0.0, batch=2, max_reps=2, stable=1.0, edges=False)
# The edge check's alpha and beta (verify_edges): exact in binary, neither the identity nor zero.
ALPHA, BETA = -0.75, 0.5
# verify's guard band, after C (after a stack's last matrix): one row of C, which a row bound of one
# too many writes (r <= M), and this many elements more, which a column bound of one too many reaches too.
GUARD_ELEMENTS = 32


@dataclass(frozen=True)
class Operands:
    """Fresh random inputs on the device, the float64 result they must give, and each element's
    scale, |alpha| |A| @ |B| + |beta| |C|, which bounds that element's rounding error. C is None
    for a product into a NaN-poisoned C (beta 0), else C's values before the launch."""

    A: object
    B: object
    reference: np.ndarray
    scale: np.ndarray
    C: np.ndarray | None = None
    alpha: float = 1.0
    beta: float = 0.0

    @classmethod
    def fresh(cls, runtime: Runtime, space: Space, problem: Problem, seed: int, alpha: float = 1.0,
              beta: float = 0.0, shared: str = "") -> "Operands":
        """Operands of `problem` drawn with `seed`, for C = alpha * A @ B + beta * C: into a
        NaN-poisoned C where beta is 0, else into a random one. The operand `shared` names ("A" or
        "B", of a family of stacks) is its stack's first matrix alone, which the kernel broadcasts."""
        rng, family = np.random.default_rng(seed), space.family
        A, B = (operand[:1] if name == shared else operand
                for name, operand in zip("AB", family.random_operands(problem, rng, space.precision.input)))
        product, scale = family.reference(A, B), family.reference(np.abs(A), np.abs(B))
        if alpha != 1:  # in place: at 4096² each is 128 MiB
            product *= alpha
            scale *= abs(alpha)
        np.maximum(scale, np.finfo(np.float64).tiny, out=scale)
        A, B = runtime.module.to_device(A), runtime.module.to_device(B)
        if not beta:
            return cls(A, B, product, scale, None, alpha)
        C = rng.uniform(-1, 1, product.shape).astype(space.precision.output)
        return cls(A, B, product + beta * C.astype(np.float64), scale + abs(beta) * np.abs(C), C, alpha, beta)


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


def _signalling_nan(dtype: np.dtype) -> int:
    """The bits of a signalling NaN of the float `dtype`, the guard band's value: arithmetic never
    yields one (it quiets a NaN), so whatever a kernel computes and stores there changes it."""
    info = np.finfo(dtype)
    return ((1 << info.nexp) - 1) << info.nmant | 1 << (info.nmant - 2)


def _guarded(runtime: Runtime, shape: tuple[int, ...], dtype: str, values: np.ndarray | None) -> tuple:
    """A C of `shape` and `dtype` on the device holding `values` (NaN where None), at the front of
    a buffer whose tail is a guard band (one row of C and GUARD_ELEMENTS more) of signalling NaNs:
    the buffer, and C as a C-contiguous view of it, which Numba types as the C that is timed (and
    that tuner.matmul allocates), so the verified machine code is the timed one."""
    size = int(np.prod(shape))
    host = np.empty(size + shape[-1] + GUARD_ELEMENTS, dtype)
    host[:size] = np.nan if values is None else values.reshape(-1)
    host.view(f"u{host.itemsize}")[size:] = _signalling_nan(host.dtype)
    buffer = runtime.module.to_device(host)
    return buffer, buffer[:size].reshape(shape)


def verify(runtime: Runtime, kernel: Kernel, operands: Operands, tolerance: float) -> tuple[float, str]:
    """Run once, check that nothing past the end of C was written (its guard band: _guarded), and
    bound the error twice: over the whole result (the relative Frobenius error, which catches an
    error spread thinly, such as rounded inputs) and in each element (its error over its scale,
    which catches a wrong tile or element that the whole would dilute); (the relative error, "")
    when correct."""
    buffer, C = _guarded(runtime, operands.reference.shape, kernel.space.precision.output, operands.C)
    kernel.bind(operands.A, operands.B, C, operands.alpha, operands.beta)()
    guard = buffer[operands.reference.size:].copy_to_host()
    overwritten = int(np.count_nonzero(guard.view(f"u{guard.itemsize}") != _signalling_nan(guard.dtype)))
    difference = C.copy_to_host().astype(np.float64)
    difference -= operands.reference
    error = float(np.linalg.norm(difference) / max(np.linalg.norm(operands.reference), 1e-300))
    if overwritten:
        return error, f"wrote past the end of C: {overwritten} of the {guard.size} elements after it"
    if not error <= tolerance:  # NaN fails too: an element the kernel never wrote
        return error, f"relative error {error:.3g} exceeds {tolerance:.0e}"
    np.abs(difference, out=difference)
    worst = float(np.max(np.divide(difference, operands.scale, out=difference), initial=0.0))
    if not worst <= tolerance:
        return error, f"an element errs by {worst:.3g} of its |A|·|B|, over {tolerance:.0e}"
    return error, ""


def verify_edges(runtime: Runtime, kernel: Kernel) -> str:
    """Why `kernel` is wrong on its family's small products with edge tiles in every dimension
    (Family.verifications, an operand broadcast where the family has stacks), each computed both
    ways a kernel writes C: ALPHA * A @ B into a NaN-poisoned C (beta 0: C is not read), and
    ALPHA * A @ B + BETA * C into a random C; or "" when it is right there."""
    space = kernel.space
    for problem, shared in space.family.verifications(kernel.config, space.precision.name):
        broadcast = f" ({shared} one matrix, broadcast)" if shared else ""
        for beta in (0.0, BETA):
            operands = Operands.fresh(runtime, space, problem, seed=0, alpha=ALPHA, beta=beta, shared=shared)
            _, wrong = verify(runtime, kernel, operands, space.family.tolerance(space.precision))
            if wrong:
                return f"at {problem.shape_text}{broadcast} with alpha {ALPHA} and beta {beta:g}: {wrong}"
    return ""


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
        if not wrong and protocol.edges:
            wrong = verify_edges(runtime, kernel)
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


def verify_config(runtime: Runtime, space: Space, config: Tiling, kernels: Path | None = None) -> str:
    """Why `config` does not compute correctly here (its compile or launch error, or its error on
    verify_edges's products), or "" when it does."""
    try:
        kernel = load(space, config, kernels)
        kernel.compile()
        wrong = verify_edges(runtime, kernel)
    except OSError:
        raise  # the kernel directory or the disk, not the configuration
    except Exception as error:  # the configuration's failure, said in one line
        return error_line(error)
    return wrong
