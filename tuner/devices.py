"""What the GPU is: its description, its peak arithmetic rate, and its fingerprint (the cache key).

The fingerprint hashes everything that can change which kernel is fastest or whether a cached
one still works: the device model and its size, the driver and runtime, the Numba packages and
the templates. Two different GPUs never share it, and a change of software changes it.
"""
import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from importlib import metadata
from importlib.resources import files


def templates_hash() -> str:
    """A hash of every kernel template of the registered families (the report's page is not one)."""
    from .family import templates

    digest = hashlib.sha256()
    for name in templates():
        digest.update(name.encode() + b"\0" + files("tuner.templates").joinpath(name).read_bytes())
    return digest.hexdigest()[:16]


def software(distributions: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of the given Python distributions ("missing" when absent)."""
    versions = {}
    for name in distributions:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


@dataclass(frozen=True)
class Device:
    """One GPU (or the simulator) as the tuner sees it."""

    backend: str  # "cuda" or "roc"
    name: str
    arch: str  # "sm_90", a gcnArchName such as "gfx90a:sramecc+:xnack-", or "simulator"
    multiprocessors: int  # SMs or compute units (host CPUs for the simulator)
    memory_bytes: int
    clock_khz: int  # the maximum shader clock
    l2_bytes: int
    driver: str
    runtime: str
    software: dict = field(default_factory=dict)  # distribution -> version, and the templates hash
    peak_gflops: dict = field(default_factory=dict)  # accumulate dtype -> nominal peak; empty if unknown

    @property
    def simulated(self) -> bool:
        return self.arch == "simulator"

    @property
    def fingerprint(self) -> str:
        """A short stable hash of the whole description."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def slug(self) -> str:
        """A file-name-safe label: backend, device name and fingerprint."""
        name = "".join(c if c.isalnum() else "-" for c in self.name.lower()).strip("-")
        while "--" in name:
            name = name.replace("--", "-")
        return f"{self.backend}-{name}-{self.fingerprint}"

    @property
    def model(self) -> dict:
        """What identifies the hardware, apart from the software that drives it."""
        return {name: getattr(self, name) for name in _HARDWARE}

    def as_dict(self) -> dict:
        return {**asdict(self), "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, description: dict) -> "Device":
        """The device an as_dict() description (as a cache record holds it) describes."""
        return cls(**{name: value for name, value in description.items() if name != "fingerprint"})

    def peak(self, accumulate: str) -> float | None:
        """Nominal peak GFLOP/s of multiply-adds in `accumulate` precision, if known."""
        return self.peak_gflops.get(accumulate)


def software_changes(old: Device, new: Device) -> list[str]:
    """The software differences between two descriptions of one GPU model, as 'name old -> new'."""
    changes = [f"{name} {getattr(old, name)} -> {getattr(new, name)}" for name in ("driver", "runtime")
               if getattr(old, name) != getattr(new, name)]
    for name in sorted(set(old.software) | set(new.software)):
        if old.software.get(name) != new.software.get(name):
            changes.append(f"{name} {old.software.get(name, 'missing')} -> {new.software.get(name, 'missing')}")
    return changes


_HARDWARE = ("backend", "name", "arch", "multiprocessors", "memory_bytes", "clock_khz", "l2_bytes")

# Vector FMA lanes per streaming multiprocessor, FP32 and FP64, by compute capability.
_CUDA_LANES = {
    (7, 0): (64, 32), (7, 5): (64, 2), (8, 0): (64, 32), (8, 6): (128, 2), (8, 7): (128, 2),
    (8, 9): (128, 2), (9, 0): (128, 64), (10, 0): (128, 64), (12, 0): (128, 2),
}


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version (such as 580.65.06), where Linux exposes it."""
    try:
        with open("/proc/driver/nvidia/version") as version:
            found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", version.readline())
    except OSError:
        return "unknown"
    return found.group(1) if found else "unknown"


def describe_cuda(cuda) -> Device:
    """The current CUDA device, through numba-cuda."""
    from numba.cuda.cudadrv import driver, runtime

    gpu = cuda.get_current_device()
    cc = tuple(gpu.compute_capability)
    sms, clock_khz = gpu.MULTIPROCESSOR_COUNT, gpu.CLOCK_RATE
    peaks = {}
    if cc in _CUDA_LANES:
        fp32, fp64 = _CUDA_LANES[cc]
        peaks = {"float32": 2 * fp32 * sms * clock_khz / 1e6, "float64": 2 * fp64 * sms * clock_khz / 1e6}
    return Device(
        backend="cuda",
        name=gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name),
        arch=f"sm_{cc[0]}{cc[1]}",
        multiprocessors=sms,
        memory_bytes=cuda.current_context().get_memory_info().total,
        clock_khz=clock_khz,
        l2_bytes=gpu.L2_CACHE_SIZE,
        driver=f"{_nvidia_driver()} (CUDA {'.'.join(map(str, driver.get_version()))})",
        runtime="NVRTC " + ".".join(map(str, runtime.get_version())),
        software={**software(("numba", "numba-cuda")), "templates": templates_hash()},
        peak_gflops=peaks,
    )


# Vector FP64 rate relative to FP32 on AMD Instinct parts; others are left without a peak.
_ROC_FP64_RATIO = {"gfx908": 0.5, "gfx90a": 1.0, "gfx940": 1.0, "gfx941": 1.0, "gfx942": 1.0, "gfx950": 1.0}


def _amdgpu_driver() -> str:
    try:
        with open("/sys/module/amdgpu/version") as version:
            return version.read().strip() or "unknown"
    except OSError:
        return "unknown"


def describe_hip(hip) -> Device:
    """The current AMD device, through numba-hip (whose device attributes mirror numba-cuda's).

    The architecture keeps its target features (gfx90a:sramecc+:xnack-) because the runtime sets
    NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES=1 before numba-hip loads.
    """
    from numba.hip.hipdrv import driver

    gpu = hip.get_current_device()
    cus, clock_khz, arch = gpu.MULTIPROCESSOR_COUNT, gpu.CLOCK_RATE, str(gpu.amdgpu_arch)
    # Scalar (non-packed) FP32 FMAs: 64 lanes per compute unit, two flops each.
    fp32 = 2 * 64 * cus * clock_khz / 1e6
    ratio = _ROC_FP64_RATIO.get(arch.split(":")[0])
    hip_version = ".".join(map(str, driver.get_version()))
    return Device(
        backend="roc",
        name=str(gpu.name),
        arch=arch,
        multiprocessors=cus,
        memory_bytes=hip.current_context().get_memory_info().total,
        clock_khz=clock_khz,
        l2_bytes=gpu.L2_CACHE_SIZE,
        driver=f"amdgpu {_amdgpu_driver()} (HIP {hip_version})",
        runtime=f"HIP {hip_version}",
        software={**software(("numba", "numba-hip")), "templates": templates_hash()},
        peak_gflops={"float32": fp32, **({"float64": fp32 * ratio} if ratio else {})},
    )


def describe_simulator(backend: str) -> Device:
    """Numba's CUDA simulator standing in for a `backend` GPU: the host CPU runs every thread."""
    return Device(
        backend=backend,
        name=f"Numba CUDA simulator on {platform.processor() or platform.machine()}",
        arch="simulator",
        multiprocessors=os.cpu_count() or 1,
        memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        clock_khz=0,
        l2_bytes=0,
        driver="none",
        runtime="none",
        software={**software(("numba", "numba-cuda")), "templates": templates_hash()},
    )
