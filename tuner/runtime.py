"""A backend opened on this machine: its Numba module, its device, and its clock.

One small interface serves the three ways a kernel runs: numba-cuda on an NVIDIA GPU, numba-hip
on an AMD GPU, and Numba's CUDA simulator standing in for either. What differs is asked of the
backend object (tuner/backends/) or the simulator (tuner/simulator.py); everything else (arrays,
launches) goes through the Numba module, whose API numba-cuda, numba-hip and the simulator share.
"""
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from . import simulator
from .backends import BACKENDS, SIMULATOR_DEFAULT, Backend, DriverForked, NoDevice, get_backend
from .devices import Device
from .dtypes import Precision
from .problem import Problem


class RuntimeUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing and what to do."""


class NoGPU(RuntimeUnavailable):
    """No GPU of the backend's kind is visible; the simulator can stand in."""


# What to do in a process forked after its parent initialised the GPU's driver, which the child cannot use.
SPAWN = ("start worker processes with the 'spawn' start method (multiprocessing.get_context('spawn')), or use the GPU "
         "in the parent only after forking them")


def driver_device_count(backend: Backend) -> int:
    """Devices `backend`'s driver reports to this process, without loading Numba (Backend.detect);
    NoGPU if none, RuntimeUnavailable saying what to do where this process was forked after its
    parent initialised the driver."""
    try:
        return backend.detect()
    except NoDevice as reason:
        raise NoGPU(str(reason)) from None
    except DriverForked as reason:
        raise RuntimeUnavailable(f"{reason}; {SPAWN}") from None


# The least a cache flush copies, as Triton's do_bench zeroes 256 MB: AMD's Infinity Cache (256 MiB
# on MI300), which HIP does not count in the L2's size, is evicted too, and the copy outlasts the
# host's launch of the timed kernel queued behind it, so no host time falls between the events.
FLUSH_BYTES = 256 << 20


@dataclass
class Runtime:
    """Where kernels run: a Numba module, the device behind it, and how launches are timed."""

    backend: Backend
    module: ModuleType  # numba.cuda, numba.hip, or numba.cuda as the simulator
    device: Device
    _flush_buffers: tuple = field(default=(), repr=False)
    opened_in: int = field(default_factory=os.getpid, repr=False)  # the process that opened it

    @property
    def simulated(self) -> bool:
        return self.device.simulated

    @property
    def clock(self) -> str:
        """What a measured time is, in words; shown wherever times appear."""
        return simulator.CLOCK if self.simulated else "GPU time (device events)"

    def elapsed(self, launch) -> float:
        """Seconds one call of `launch` takes: device events on a GPU, CPU time on the simulator."""
        if self.simulated:
            return simulator.elapsed(launch)
        start, end = self.module.event(timing=True), self.module.event(timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        return self.module.event_elapsed_time(start, end) / 1e3

    def flush_l2(self) -> None:
        """Evict the caches by copying, on the device, a buffer twice the L2's size and at least
        FLUSH_BYTES (no-op simulated)."""
        if self.simulated:
            return
        if not self._flush_buffers:
            words = max(2 * self.device.l2_bytes, FLUSH_BYTES) // 4  # int32 words
            self._flush_buffers = tuple(self.module.device_array(words, "int32") for _ in range(2))
        source, target = self._flush_buffers
        target.copy_to_device(source)

    def wrap(self, array):
        """A device array the kernel can take, made from an object exporting
        `__cuda_array_interface__` (no copy); TypeError where the module cannot wrap one."""
        wrapper = getattr(self.module, self.backend.array_wrapper, None)
        if wrapper is None:
            raise TypeError(f"numba.{self.backend.module} takes no __cuda_array_interface__ arrays; "
                            "pass NumPy arrays or Numba device arrays")
        return wrapper(array)

    def too_slow(self, problem: Problem) -> str:
        """Why `problem` would take minutes or more here (on the simulator), or "" if it would not."""
        return simulator.too_slow(problem) if self.simulated else ""

    def lacks(self, precision: Precision) -> str:
        """Why this device cannot run kernels of `precision`, or "" (the
        simulator emulates every precision)."""
        return "" if self.simulated else self.backend.lacks(self.device, precision)

    def refuses(self, problem: Problem) -> str:
        """Why `problem` is too large to tune here, or "" if it is not."""
        shape = problem.shape_text
        too_slow = self.too_slow(problem)
        if too_slow:
            return too_slow
        if not self.simulated and problem.operand_bytes > self.device.memory_bytes // 2:
            return (f"{shape} needs {problem.operand_bytes / 2**30:.1f} GiB of operands, over half of the "
                    f"device's {self.device.memory_bytes / 2**30:.0f} GiB")
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if problem.reference_bytes > host // 2:
            return (f"{shape} needs {problem.reference_bytes / 2**30:.1f} GiB of host memory to verify against "
                    f"(float64 copies, product and checks), over half of this machine's {host / 2**30:.0f} GiB")
        return ""

    def devices(self) -> list[Device]:
        """Every device this runtime can see (one for the simulator)."""
        if self.simulated:
            return [self.device]
        found = []
        for gpu in self.module.gpus:
            with gpu:
                found.append(self.backend.describe(self.module))
        return found


def open_runtime(backend: Backend, simulate: bool = False) -> Runtime:
    """The runtime for `backend`: the simulator if asked for (or NUMBA_ENABLE_CUDASIM=1), else
    the GPU. Raises NoGPU when there is none, RuntimeUnavailable when Numba's module is missing,
    UnsafeKernelDirectory before Numba's GPU module loads (a driver, a memory manager) where the
    Numba configuration file in the current directory is unsafe (kernel.check_numba_config) or a
    folder the module reads compiled code back from is not private (Backend.check_caches), and
    RuntimeUnavailable where that file turns the simulator on in place of the GPU."""
    loaded = sys.modules.get("numba.cuda")
    if simulate or simulator.enabled():
        if loaded is not None and not simulator.enabled():
            raise RuntimeUnavailable("numba.cuda was imported before --simulate took effect; "
                                     "set NUMBA_ENABLE_CUDASIM=1 before starting Python")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from numba import cuda

        if not simulator.simulating():
            raise RuntimeUnavailable("Numba read its configuration before --simulate took effect; "
                                     "set NUMBA_ENABLE_CUDASIM=1 before starting Python")
        return Runtime(backend, cuda, simulator.describe(backend.name))
    driver_device_count(backend)
    from .kernel import check_numba_config  # here, not above: tuner.kernel imports this module

    check_numba_config()
    backend.check_caches()
    try:
        module = backend.load()
    except Exception as error:  # numba-hip's import also fails on missing clang or ROCm headers
        raise RuntimeUnavailable(f"numba.{backend.module} does not load ({type(error).__name__}: {error}); "
                                 f"{backend.install}") from None
    if simulator.stands_in_for(module):
        raise RuntimeUnavailable("Numba's configuration turns its CUDA simulator on (NUMBA_ENABLE_CUDASIM, or "
                                 f"enable_cudasim in {Path.cwd() / '.numba_config.yaml'}), so the GPU would not be "
                                 "measured; unset it, or pass --simulate")
    if not module.is_available():
        raise RuntimeUnavailable(f"the {backend.name} driver reports a device but numba.{backend.module} cannot use "
                                 "it; check the driver and toolkit versions, or pass --simulate")
    return Runtime(backend, module, backend.describe(module))


def chosen_backend(backend: str | None = None) -> str | None:
    """The backend asked for: `backend`, else $TUNER_BACKEND (ValueError if it names none), else None."""
    if backend:
        return backend
    chosen = os.environ.get("TUNER_BACKEND")
    if chosen and chosen not in BACKENDS:
        raise ValueError(f"TUNER_BACKEND={chosen!r} names no backend; set it to one of: {', '.join(BACKENDS)}, "
                         "or unset it")
    return chosen or None


def detect_runtime(backend: str | None = None) -> Runtime:
    """The runtime of `backend`, else of $TUNER_BACKEND, else the simulator when
    NUMBA_ENABLE_CUDASIM=1, else the first backend with a GPU here (CUDA, then ROC)."""
    backend = chosen_backend(backend)
    if backend:
        return open_runtime(get_backend(backend))
    if simulator.enabled():
        return open_runtime(BACKENDS[SIMULATOR_DEFAULT])
    reasons = []
    for candidate in BACKENDS.values():
        try:
            return open_runtime(candidate)
        except NoGPU as reason:
            reasons.append(str(reason))
    raise NoGPU("; ".join(reasons))
