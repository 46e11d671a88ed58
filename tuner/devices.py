"""What the GPU is: its description, its peak arithmetic rate, and its fingerprint (the cache key).

Each backend describes its own devices (tuner/backends/), the simulator its own (tuner/simulator.py).

The fingerprint hashes everything that can change which kernel is fastest or whether a cached
one still works: the device model and its size, the driver and runtime, the Numba packages and
the compilers they load, the templates with the code that renders them and decides their launch
(GENERATOR), and the protocol that verifies and times a variant (VERIFICATION). Two different GPUs
never share it, and a change of software changes it. Not hashed: the code around them that does
not decide a kernel or its check (tuner/kernel.py's file handling and launch call, tuner/runtime.py's
device events and L2 flush), so that an edit there re-verifies nothing.
"""
import hashlib
import json
from dataclasses import asdict, dataclass, field
from importlib import metadata
from importlib.resources import files

from .formats import printable


# The tuner's code that decides a configuration's kernel and its launch: what fills in the templates
# (the source, the jit options, the fragment offsets and types), what the kernels import (the mma
# wrappers), the families' compile signatures and grids, and the backends' limits. A folder stands
# for its modules.
GENERATOR = ("config.py", "dtypes.py", "family.py", "families", "mma.py", "source.py", "backends")
# The tuner's code that decides whether a variant is correct and how it is timed: a record made
# under a weaker check must not be trusted as one made under this one.
VERIFICATION = ("measure.py",)


def generator_files() -> list[tuple[str, str]]:
    """The (package, file) of every kernel template of the registered families (the report's page
    is not one) and of every module of GENERATOR, in a fixed order."""
    from .family import templates

    found = [("tuner.templates", name) for name in templates()]
    for name in GENERATOR:
        entry = files("tuner").joinpath(name)
        found += sorted(("tuner", f"{name}/{child.name}") for child in entry.iterdir()
                        if child.name.endswith(".py")) if entry.is_dir() else [("tuner", name)]
    return found


def _read(package: str, name: str) -> bytes:
    """The bytes of a file of the installed package."""
    return files(package).joinpath(name).read_bytes()


def _hash(found: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for package, name in found:
        digest.update(name.encode() + b"\0" + _read(package, name))
    return digest.hexdigest()[:16]


def templates_hash() -> str:
    """A hash of the generator_files, so that a tuner whose kernels differ has another fingerprint."""
    return _hash(generator_files())


def code_hashes() -> dict[str, str]:
    """The hashes of the tuner's code that a description's software holds: the templates (with the
    GENERATOR modules) and the verification (the VERIFICATION modules)."""
    return {"templates": templates_hash(), "verification": _hash([("tuner", name) for name in VERIFICATION])}


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
    arch: str  # "sm_90", the gfx name numba-hip compiles for, such as "gfx90a", or "simulator"
    multiprocessors: int  # SMs or compute units (host CPUs for the simulator)
    memory_bytes: int
    clock_khz: int  # the maximum shader clock
    l2_bytes: int
    driver: str
    runtime: str
    software: dict = field(default_factory=dict)  # distribution -> version, and the code_hashes
    peak_gflops: dict = field(default_factory=dict)  # accumulate dtype -> nominal peak; empty if unknown

    def __post_init__(self):
        """What a driver, a system file or a package's metadata reports is kept as a label that a
        record can hold (schema.Text): a character not shown as itself becomes U+FFFD."""
        for name in ("name", "arch", "driver", "runtime"):
            object.__setattr__(self, name, printable(getattr(self, name)))
        object.__setattr__(self, "software", {printable(key): printable(value)
                                              for key, value in self.software.items()})

    @property
    def simulated(self) -> bool:
        """Whether this describes Numba's CUDA simulator (tuner.simulator.describe)."""
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

    def peak(self, units: str) -> float | None:
        """Nominal peak GFLOP/s of the arithmetic `units` (Precision.units), if known: the CUDA
        cores' float32 and float64 rates; none for the tensor cores."""
        return self.peak_gflops.get(units)


def software_changes(old: Device, new: Device) -> list[str]:
    """The software differences between two descriptions of one GPU model, as 'name old -> new';
    "unrecorded" for what a description (made by another version of tuner) does not hold, and
    nothing for a distribution it does not hold and that is missing now."""
    changes = [f"{name} {getattr(old, name)} -> {getattr(new, name)}" for name in ("driver", "runtime")
               if getattr(old, name) != getattr(new, name)]
    for name in sorted(set(old.software) | set(new.software)):
        before, now = old.software.get(name, "unrecorded"), new.software.get(name, "unrecorded")
        if before != now and (before, now) != ("unrecorded", "missing"):
            changes.append(f"{name} {before} -> {now}")
    return changes


# The memory size the driver reports is in the fingerprint, not the model: it changes with ECC on a
# GDDR card and with what the driver reserves, so one card would otherwise become another model.
_HARDWARE = ("backend", "name", "arch", "multiprocessors", "clock_khz", "l2_bytes")

