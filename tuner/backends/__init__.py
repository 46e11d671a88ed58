"""The GPU targets a kernel is generated for, and everything that differs between them.

This is the one place that knows the backends apart: the Numba module the kernel source uses,
the hardware limits the search space is checked against, what the compiler supports, and the
variable that pins a process to a GPU.
"""
from dataclasses import dataclass


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
    """A code-generation target: a Numba module with its limits and features."""

    name: str
    module: str  # the name the kernel source imports from numba
    limits: Limits
    dtypes: tuple[str, ...]  # input dtypes the backend's compiler supports
    max_registers: bool  # whether the jit decorator accepts max_registers
    launch_bounds: bool  # whether the jit decorator accepts launch_bounds (threads, blocks per SM)
    shared_alignment: bool  # whether shared.array accepts alignment=, which vector shared loads need
    visible_devices: str  # the environment variable that limits a process to some of the GPUs
    compiles_without_gpu: bool  # whether its kernels compile (to PTX) on a host without its GPU


CUDA = Backend(
    name="cuda",
    module="cuda",
    # numba-cuda declares shared memory statically, which CUDA caps at 48 KiB per block.
    limits=Limits(
        warp_size=32,
        max_threads_per_block=1024,
        shared_memory_per_block=48 * 1024,
        registers_per_thread=255,
        registers_per_block=64 * 1024,
        grid_rows=65535,
    ),
    dtypes=("float32", "float64", "float16"),
    max_registers=True,
    launch_bounds=True,
    shared_alignment=True,
    visible_devices="CUDA_VISIBLE_DEVICES",
    compiles_without_gpu=True,
)

ROC = Backend(
    name="roc",
    module="hip",
    # AMD CDNA: wavefronts of 64, 64 KiB of LDS per workgroup, 256 architectural VGPRs per lane,
    # and 512 VGPRs x 64 lanes on each of a compute unit's 4 SIMDs.
    limits=Limits(
        warp_size=64,
        max_threads_per_block=1024,
        shared_memory_per_block=64 * 1024,
        registers_per_thread=256,
        registers_per_block=4 * 512 * 64,
        grid_rows=65535,  # CUDA's bound; HIP's own was not checked on AMD hardware
    ),
    dtypes=("float32", "float64"),
    max_registers=False,
    launch_bounds=False,
    # numba-hip mirrors an older numba.cuda API; alignment= is not known to exist there (unchecked
    # on AMD hardware), so vector fragments stay out of the ROC space.
    shared_alignment=False,
    visible_devices="HIP_VISIBLE_DEVICES",
    compiles_without_gpu=False,
)

BACKENDS = {backend.name: backend for backend in (CUDA, ROC)}


def get_backend(name: str) -> Backend:
    """The backend called `name`, or a ValueError that lists the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}") from None
