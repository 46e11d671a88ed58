"""A backend opened on this machine: its Numba module, its device, and its clock.

One small interface serves the three ways a kernel runs: numba-cuda on an NVIDIA GPU, numba-hip
on an AMD GPU, and Numba's CUDA simulator standing in for either. Everything else (arrays,
launches) goes through the Numba module, whose API numba-cuda, numba-hip and the simulator share.
"""
import ctypes
import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType

from .backends import BACKENDS, Backend, get_backend
from .devices import Device, describe_cuda, describe_hip, describe_simulator
from .problem import Problem

_DESCRIBE = {"cuda": describe_cuda, "roc": describe_hip}
INSTALL = {
    "cuda": "pip install -e '.[cuda]'",
    "roc": "install numba-hip in its own environment: python3 -m venv .venv-roc && "
           ".venv-roc/bin/pip install -e '.[roc]' (it cannot share one with numba-cuda)",
}

# The simulator runs one Python thread per GPU thread: beyond this many multiply-adds a single
# launch takes minutes (a 64x64x64 product already takes up to 7 s).
SIMULATOR_MAX_MULTIPLY_ADDS = 128 ** 3


class RuntimeUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing and what to do."""


class NoGPU(RuntimeUnavailable):
    """No GPU of the backend's kind is visible; the simulator can stand in."""


def simulator_enabled() -> bool:
    """Whether this process runs (or will run) numba.cuda as the simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def simulating() -> bool:
    """Whether numba.cuda, as imported in this process, is Numba's CUDA simulator."""
    try:
        from numba.cuda.core import config  # numba-cuda
    except ImportError:
        from numba import config  # the numba.cuda built into numba<0.64 (numba-hip's environment)
    return bool(config.ENABLE_CUDASIM)


def driver_device_count(backend: Backend) -> int:
    """Devices the vendor driver reports to this process (after CUDA_VISIBLE_DEVICES or
    HIP_VISIBLE_DEVICES), asked through ctypes so that no Numba module loads; NoGPU if none."""
    if backend.name == "cuda":
        candidates, init, count = ["libcuda.so.1"], "cuInit", "cuDeviceGetCount"
    else:
        rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
        candidates = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", f"{rocm}/lib/libamdhip64.so"]
        init, count = "hipInit", "hipGetDeviceCount"
    library = _load_first(candidates)
    if library is None:
        raise NoGPU(f"no {backend.name} driver found ({' or '.join(candidates)} is not loadable)")
    devices = ctypes.c_int(0)
    if getattr(library, init)(0) != 0 or getattr(library, count)(ctypes.byref(devices)) != 0:
        raise NoGPU(f"the {backend.name} driver found no usable device")
    if devices.value == 0:
        raise NoGPU(f"the {backend.name} driver reports no device")
    return devices.value


def _load_first(candidates: list[str]):
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@dataclass
class Runtime:
    """Where kernels run: a Numba module, the device behind it, and how launches are timed."""

    backend: Backend
    module: ModuleType  # numba.cuda, numba.hip, or numba.cuda as the simulator
    device: Device
    _flush_buffers: tuple = field(default=(), repr=False)

    @property
    def simulated(self) -> bool:
        return self.device.simulated

    @property
    def clock(self) -> str:
        """What a measured time is, in words; shown wherever times appear."""
        return "simulated CPU time" if self.simulated else "GPU time (device events)"

    def elapsed(self, launch) -> float:
        """Seconds one call of `launch` takes: device events on a GPU, CPU time on the simulator."""
        if self.simulated:
            start = time.process_time()  # all the simulator's threads
            launch()
            return time.process_time() - start
        start, end = self.module.event(timing=True), self.module.event(timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        return self.module.event_elapsed_time(start, end) / 1e3

    def flush_l2(self) -> None:
        """Evict the L2 cache by copying a buffer twice its size on the device (no-op simulated)."""
        if self.simulated:
            return
        if not self._flush_buffers:
            words = max(self.device.l2_bytes, 8 << 20) // 2  # int32 words in 2 x L2
            self._flush_buffers = tuple(self.module.device_array(words, "int32") for _ in range(2))
        source, target = self._flush_buffers
        target.copy_to_device(source)

    def too_slow(self, problem: Problem) -> str:
        """Why `problem` would take minutes or more here (on the simulator), or "" if it would not."""
        if self.simulated and problem.multiply_adds > SIMULATOR_MAX_MULTIPLY_ADDS:
            return (f"{problem.shape_text} is too large for the simulator, which runs one Python "
                    "thread per GPU thread (at most 128**3 multiply-adds; a GPU takes more)")
        return ""

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
                    f"(float64 copies and product), over half of this machine's {host / 2**30:.0f} GiB")
        return ""

    def devices(self) -> list[Device]:
        """Every device this runtime can see (one for the simulator)."""
        if self.simulated:
            return [self.device]
        found = []
        for gpu in self.module.gpus:
            with gpu:
                found.append(_DESCRIBE[self.backend.name](self.module))
        return found


def open_runtime(backend: Backend, simulate: bool = False) -> Runtime:
    """The runtime for `backend`: the simulator if asked for (or NUMBA_ENABLE_CUDASIM=1), else
    the GPU. Raises NoGPU when there is none, RuntimeUnavailable when Numba's module is missing."""
    loaded = sys.modules.get("numba.cuda")
    if simulate or simulator_enabled():
        if loaded is not None and not simulator_enabled():
            raise RuntimeUnavailable("numba.cuda was imported before --simulate took effect; "
                                     "set NUMBA_ENABLE_CUDASIM=1 before starting Python")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from numba import cuda

        if not simulating():
            raise RuntimeUnavailable("Numba read its configuration before --simulate took effect; "
                                     "set NUMBA_ENABLE_CUDASIM=1 before starting Python")
        return Runtime(backend, cuda, describe_simulator(backend.name))
    driver_device_count(backend)
    os.environ.setdefault("NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES", "1")
    try:
        module = importlib.import_module(f"numba.{backend.module}")
    except Exception as error:  # numba-hip's import also fails on missing clang or ROCm headers
        raise RuntimeUnavailable(f"numba.{backend.module} does not load ({type(error).__name__}: {error}); "
                                 f"{INSTALL[backend.name]}") from None
    if not module.is_available():
        raise RuntimeUnavailable(f"the {backend.name} driver reports a device but numba.{backend.module} cannot use "
                                 "it; check the driver and toolkit versions, or pass --simulate")
    return Runtime(backend, module, _DESCRIBE[backend.name](module))


def detect_runtime(backend: str | None = None) -> Runtime:
    """The runtime of `backend`, else of $TUNER_BACKEND, else the simulator when
    NUMBA_ENABLE_CUDASIM=1, else the first backend with a GPU here (CUDA, then ROC)."""
    name = backend or os.environ.get("TUNER_BACKEND")
    if name:
        return open_runtime(get_backend(name))
    if simulator_enabled():
        return open_runtime(BACKENDS["cuda"])
    reasons = []
    for candidate in BACKENDS.values():
        try:
            return open_runtime(candidate)
        except NoGPU as reason:
            reasons.append(str(reason))
    raise NoGPU("; ".join(reasons))
