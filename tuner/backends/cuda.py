"""numba-cuda on NVIDIA GPUs: the limits, features and device description of the CUDA backend."""
import re
from types import ModuleType

from ..devices import Device, code_hashes, software
from ..dtypes import Precision
from .base import Backend, Limits

# Vector FMA lanes per streaming multiprocessor, FP32 and FP64, by compute capability.
_LANES = {
    (7, 0): (64, 32), (7, 5): (64, 2), (8, 0): (64, 32), (8, 6): (128, 2), (8, 7): (128, 2),
    (8, 9): (128, 2), (9, 0): (128, 64), (10, 0): (128, 64), (12, 0): (128, 2),
}

# The wheels of the compilers numba-cuda loads, CUDA 13's and CUDA 12's: NVVM (the kernels; in
# nvidia-cuda-nvcc-cu12 under CUDA 12), NVRTC (the mma wrappers) and nvJitLink (the linking).
# NVVM reports 2.0 under both, so the wheels' versions are what tell its builds apart.
COMPILERS = ("nvidia-nvvm", "nvidia-cuda-nvrtc", "nvidia-nvjitlink",
             "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvrtc-cu12", "nvidia-nvjitlink-cu12")

TENSOR_CORE_ARCH = 80  # the first compute capability with the mma.sync shapes of tuner/mma.py (sm_80)


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version (such as 580.65.06), where Linux exposes it."""
    try:
        with open("/proc/driver/nvidia/version") as version:
            found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", version.readline())
    except OSError:
        return "unknown"
    return found.group(1) if found else "unknown"


class CudaBackend(Backend):
    """numba-cuda: found through libcuda, described through numba.cuda."""

    def lacks(self, device: Device, precision: Precision) -> str:
        """The tensor-core shapes (mma.sync m16n8k8 with TF32, m16n8k16 with float16, and cvt.rna.tf32)
        need compute capability 8.0 or newer."""
        if precision.tensor_cores and int(device.arch.removeprefix("sm_")) < TENSOR_CORE_ARCH:
            return (f"{precision.name} needs the mma.sync of compute capability 8.0 or newer, and this GPU "
                    f"({device.name}) is {device.arch}; use float32 or float16")
        return ""

    def driver_libraries(self) -> list[str]:
        return ["libcuda.so.1"]

    def describe(self, module: ModuleType) -> Device:
        from numba.cuda.cudadrv import driver, runtime

        gpu = module.get_current_device()
        cc = tuple(gpu.compute_capability)
        sms, clock_khz = gpu.MULTIPROCESSOR_COUNT, gpu.CLOCK_RATE
        peaks = {}
        if cc in _LANES:
            fp32, fp64 = _LANES[cc]
            peaks = {"float32": 2 * fp32 * sms * clock_khz / 1e6, "float64": 2 * fp64 * sms * clock_khz / 1e6}
        return Device(
            backend=self.name,
            name=gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name),
            arch=f"sm_{cc[0]}{cc[1]}",
            multiprocessors=sms,
            memory_bytes=module.current_context().get_memory_info().total,
            clock_khz=clock_khz,
            l2_bytes=gpu.L2_CACHE_SIZE,
            driver=f"{_nvidia_driver()} (CUDA {'.'.join(map(str, driver.get_version()))})",
            runtime="NVRTC " + ".".join(map(str, runtime.get_version())),
            software={**software(("numba", "numba-cuda", *COMPILERS)), **code_hashes(), **self.compile_settings()},
            peak_gflops=peaks,
        )

    def compile_settings(self) -> dict[str, str]:
        """numba-cuda compiles a kernel that its jit does not give opt= or debug= (tuner's give
        neither) at NVVM -opt=3 unless NUMBA_OPT is 0, and with debug info (and no default LTO)
        where NUMBA_CUDA_DEBUGINFO is set (decorators.py); NUMBA_CUDA_ENABLE_NRT adds reference
        counting to its arrays (target.py). NUMBA_OPT is kept as the -opt level it gives."""
        try:
            from numba.cuda.core import config  # importing numba.cuda, which sets CUDA_ENABLE_NRT
        except ImportError:  # numba's built-in numba.cuda, which reads numba's own
            from numba.core import config

        config.reload_config()  # as its compiler does
        return {"NUMBA_OPT": "3" if config.OPT else "0",
                "NUMBA_CUDA_DEBUGINFO": str(int(bool(config.CUDA_DEBUGINFO_DEFAULT))),
                "NUMBA_CUDA_ENABLE_NRT": str(int(bool(getattr(config, "CUDA_ENABLE_NRT", False))))}


CUDA = CudaBackend(
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
    tensor_cores=True,
    max_registers=True,
    launch_bounds=True,
    shared_alignment=True,
    visible_devices="CUDA_VISIBLE_DEVICES",
    hiding_variables=("CUDA_VISIBLE_DEVICES",),
    forced_target="FORCE_CUDA_CC",
    compiles_without_gpu=True,
    counts_resources=True,  # PTX, ptxas and nvdisasm are NVIDIA's
    peak_bounds_rates=True,  # CUDA cores per multiprocessor, from a table of the architectures known
    array_wrapper="as_cuda_array",
    install="pip install -e '.[cuda]'",
    driver_init="cuInit",
    driver_count="cuDeviceGetCount",
    driver_forked=3,  # CUDA_ERROR_NOT_INITIALIZED, cuInit's answer in a process forked after its parent's cuInit
)
