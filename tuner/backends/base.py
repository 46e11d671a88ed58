"""What every backend answers: its hardware limits, what its compiler and launches support, how
its GPUs are found and described, and how its Numba module is installed and loaded."""
import ctypes
import importlib
import os
from dataclasses import dataclass
from types import ModuleType

from ..devices import Device
from ..dtypes import PRECISIONS, Precision

# Blocks along a grid's x axis, which runs over C's column tiles: CUDA's bound, and HIP's.
GRID_COLUMNS = 2**31 - 1


class NoDevice(Exception):
    """The backend's driver is missing or reports no device; the message says which."""


class DriverForked(Exception):
    """The backend's driver was initialised in the process that forked this one, so it cannot be used here."""


@dataclass(frozen=True)
class Limits:
    """Per-block hardware limits that decide whether a kernel configuration can launch."""

    warp_size: int
    max_threads_per_block: int
    shared_memory_per_block: int  # bytes of static shared memory (LDS) one block may declare
    registers_per_thread: int  # 32-bit registers one thread may use
    registers_per_block: int  # 32-bit registers all threads of one block may use together
    grid_rows: int  # blocks along the grid's y axis, which runs over C's row tiles


@dataclass(frozen=True)
class Backend:
    """A code-generation target: a Numba module with its limits and features. Each backend's
    module (cuda.py, hip.py) subclasses it with how to find, describe and load its GPUs."""

    name: str
    module: str  # the name the kernel source imports from numba
    limits: Limits
    dtypes: tuple[str, ...]  # input dtypes the backend's compiler supports
    tensor_cores: bool  # whether its kernels can call the mma.sync wrappers (tuner/mma.py)
    max_registers: bool  # whether the jit decorator accepts max_registers
    launch_bounds: bool  # whether the jit decorator accepts launch_bounds (threads, blocks per SM)
    shared_alignment: bool  # whether shared.array accepts alignment=, which vector shared loads need
    visible_devices: str  # the environment variable that limits a process to some of the GPUs
    # Every variable by which its driver shows a process only some of the GPUs, visible_devices among them.
    hiding_variables: tuple[str, ...]
    compiles_without_gpu: bool  # whether its kernels compile (to PTX) on a host without its GPU
    counts_resources: bool  # whether static counts (ptxas registers, SASS fma_fraction) exist for its kernels
    peak_bounds_rates: bool  # whether its devices' nominal peak (Device.peak) is above any rate a kernel reaches
    array_wrapper: str  # the module's function that wraps a __cuda_array_interface__ exporter, if it has one
    install: str  # how to install its Numba module
    driver_init: str  # the driver library's initialisation function
    driver_count: str  # the driver library's device-count function
    # The setting of the Numba configuration its module reads that compiles for another GPU than the
    # one in use (refused: tuner/kernel.py), "" where it has none.
    forced_target: str
    # Threads (blocks x threads per block) a grid holds along its x axis, where that is bounded as well
    # as its blocks (GRID_COLUMNS); None where it is not.
    grid_column_threads: int | None = None
    # What its driver's initialisation function returns in a process forked after its parent
    # initialised the driver, which the child cannot use; None where that is not known.
    driver_forked: int | None = None

    @property
    def fixed(self) -> dict:
        """The parameters its compiler lacks, with the one value its kernels then take (their only
        one in Space.domains): not printed where they hold it (Tiling.shown)."""
        return {name: value for name, value, supported in (
            ("max_registers", 0, self.max_registers), ("min_blocks", 0, self.launch_bounds),
            ("vector_fragments", False, self.shared_alignment)) if not supported}

    def grid_columns(self, threads: int) -> int:
        """Column tiles one grid of blocks of `threads` threads holds: GRID_COLUMNS, or fewer where the
        threads along the grid's x axis are bounded (grid_column_threads)."""
        if self.grid_column_threads is None:
            return GRID_COLUMNS
        return min(GRID_COLUMNS, self.grid_column_threads // threads)

    def lacks(self, device: Device, precision: Precision) -> str:
        """Why `device` cannot run kernels of `precision` (a dtypes.Precision its compiler takes), or ""."""
        return ""

    def precisions(self) -> list[str]:
        """The names of the precisions its kernels can be generated for."""
        return [name for name, precision in PRECISIONS.items()
                if precision.input in self.dtypes and (self.tensor_cores or not precision.tensor_cores)]

    def driver_libraries(self) -> list[str]:
        """The names under which the vendor driver library may be loaded, in order."""
        raise NotImplementedError

    def detect(self) -> int:
        """Devices the vendor driver reports to this process (after the visible-devices variable),
        asked through ctypes so that no Numba module loads; NoDevice if none, DriverForked where the
        driver says this process was forked after its parent initialised it (driver_forked)."""
        candidates = self.driver_libraries()
        library = _load_first(candidates)
        if library is None:
            raise NoDevice(f"no {self.name} driver found ({' or '.join(candidates)} is not loadable)")
        devices = ctypes.c_int(0)
        status = getattr(library, self.driver_init)(0)
        if status == self.driver_forked:
            raise DriverForked(f"the {self.name} driver cannot be used in this process ({self.driver_init} returns "
                               f"{status}, as it does in a process forked after its parent initialised the driver)")
        if status != 0 or getattr(library, self.driver_count)(ctypes.byref(devices)) != 0:
            raise NoDevice(f"the {self.name} driver found no usable device{self._hidden()}")
        if devices.value == 0:
            raise NoDevice(f"the {self.name} driver reports no device{self._hidden()}")
        return devices.value

    def _hidden(self) -> str:
        """Where variables that hide GPUs are set, that the driver showed this process only the
        devices they list (none where one is empty or names no device here), and what to do; else ""."""
        hiding = [f"{name}={os.environ[name]!r}" for name in self.hiding_variables if name in os.environ]
        if not hiding:
            return ""
        return (f" among those {' and '.join(hiding)} let this process see; unset them, or list devices that exist"
                if len(hiding) > 1 else
                f" among those {hiding[0]} lets this process see; unset it, or list devices that exist")

    def check_caches(self) -> None:
        """Before its module loads: UnsafeKernelDirectory, saying what to do, where a folder that the
        module reads compiled code back from, other than Numba's cache of the kernels (which
        tuner.kernel checks), is not private. numba-cuda keeps none."""

    def load(self) -> ModuleType:
        """The backend's Numba module, imported."""
        return importlib.import_module(f"numba.{self.module}")

    def describe(self, module: ModuleType) -> Device:
        """The current device of the loaded `module`: the description its fingerprint hashes."""
        raise NotImplementedError

    def compile_settings(self) -> dict[str, str]:
        """The settings of its Numba module's configuration that change the code it compiles for
        tuner's kernels, by the variable that sets each, at the values it reads now (importing the
        module). They are in the fingerprint, and in the name of a kernel's file, since Numba's
        on-disk cache of the kernels does not key by them."""
        return {}


def _load_first(candidates: list[str]):
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None
