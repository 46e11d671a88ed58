"""numba-hip on AMD GPUs: the ROC backend's limits, features, driver probe, cache check and device description."""
import contextlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

from ..devices import Device, code_hashes, software
from .base import Backend, Limits

# Vector FP64 rate relative to FP32 on AMD Instinct parts; others are left without a peak.
_FP64_RATIO = {"gfx908": 0.5, "gfx90a": 1.0, "gfx940": 1.0, "gfx941": 1.0, "gfx942": 1.0, "gfx950": 1.0}


def _amdgpu_driver() -> str:
    try:
        with open("/sys/module/amdgpu/version") as version:
            return version.read().strip() or "unknown"
    except OSError:
        return "unknown"


class HipBackend(Backend):
    """numba-hip: found through libamdhip64, described through numba.hip, whose device
    attributes mirror numba-cuda's."""

    def driver_libraries(self) -> list[str]:
        """$NUMBA_HIP_RUNTIME alone where set, as numba-hip then loads that file and no other."""
        if os.environ.get("NUMBA_HIP_RUNTIME"):
            return [os.environ["NUMBA_HIP_RUNTIME"]]
        rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
        return ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", f"{rocm}/lib/libamdhip64.so"]

    def check_caches(self) -> None:
        """numba-hip caches the device library it links into every kernel, LLVM bitcode, in
        $TMPDIR/numba/hip/uid_<uid> (numba/hip/util/fscache.py), which it creates when imported and
        reads back whoever wrote it, unless NUMBA_HIP_USE_DEVICE_LIB_CACHE=0: that folder must be
        private, and is created with mode 700 if new."""
        from ..kernel import private_dir  # here, not above: tuner.kernel imports this package

        with contextlib.suppress(ValueError):  # a value int() refuses, on which numba-hip fails to import
            if not int(os.environ.get("NUMBA_HIP_USE_DEVICE_LIB_CACHE", 1)):
                return
        private_dir(Path(tempfile.gettempdir(), "numba", "hip", f"uid_{os.getuid()}"),
                    "set TMPDIR to a folder of your own, or NUMBA_HIP_USE_DEVICE_LIB_CACHE=0",
                    "numba-hip's device-library cache")

    def describe(self, module: ModuleType) -> Device:
        """The arch is numba-hip's amdgpu_arch, the one it compiles for: the bare gfx name unless
        NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES=1 was set before numba.hip was first imported. tuner
        leaves that default: numba-hip builds the device library it links into every kernel for the
        bare name, and a program that imported numba.hip before tuner would otherwise describe its
        GPU unlike `tuner search` did."""
        from numba.hip.hipdrv import driver

        gpu = module.get_current_device()
        cus, clock_khz, arch = gpu.MULTIPROCESSOR_COUNT, gpu.CLOCK_RATE, str(gpu.amdgpu_arch)
        # Scalar (non-packed) FP32 FMAs: 64 lanes per compute unit, two flops each.
        fp32 = 2 * 64 * cus * clock_khz / 1e6
        ratio = _FP64_RATIO.get(arch.split(":")[0])
        hip_version = ".".join(map(str, driver.get_version()))
        return Device(
            backend=self.name,
            name=str(gpu.name),
            arch=arch,
            multiprocessors=cus,
            memory_bytes=module.current_context().get_memory_info().total,
            clock_khz=clock_khz,
            l2_bytes=gpu.L2_CACHE_SIZE,
            driver=f"amdgpu {_amdgpu_driver()} (HIP {hip_version})",
            runtime=f"HIP {hip_version}",
            software={**software(("numba", "numba-hip")), **code_hashes(), **self.compile_settings()},
            peak_gflops={"float32": fp32, **({"float64": fp32 * ratio} if ratio else {})},
        )

    def compile_settings(self) -> dict[str, str]:
        """numba-hip compiles a kernel that its jit does not give debug= (tuner's do not) with
        debug info where NUMBA_CUDA_DEBUGINFO is set (decorators.py), and runs LLVM's mid-end
        optimisations on it where NUMBA_HIP_MIDEND_OPT is (codegen.py). NUMBA_OPT and
        NUMBA_HIP_OPT_LEVEL change nothing there: its jit's opt defaults to True, not to NUMBA_OPT,
        and its compile_llvm_ir alone reads the level."""
        from numba.core import config
        from numba.hip import hipconfig

        config.reload_config()  # as its compiler does
        return {"NUMBA_CUDA_DEBUGINFO": str(int(bool(config.CUDA_DEBUGINFO_DEFAULT))),
                "NUMBA_HIP_MIDEND_OPT": str(int(bool(hipconfig.ENABLE_MIDEND_OPT)))}


ROC = HipBackend(
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
        grid_rows=65535,  # CUDA's bound, within HIP's 65536 (ROCm clr's hipModuleLaunchKernel, which numba-hip calls)
    ),
    dtypes=("float32", "float64"),  # numba-hip has no half precision (its README)
    tensor_cores=False,
    # numba-hip's kernels take the options of its dispatcher's _Kernel, which has no launch_bounds,
    # and its code library raises NotImplementedError for any max_registers (codegen.py).
    max_registers=False,
    launch_bounds=False,
    # numba-hip's shared.array is typed from (shape, dtype) alone (typing_lowering/hip/typing.py), so
    # alignment= does not compile, and vector fragments stay out of the ROC space.
    shared_alignment=False,
    visible_devices="HIP_VISIBLE_DEVICES",
    # ROCm's GPU isolation variables (its HIP environment variables page): ROCr's, ROCclr's, and HIP's,
    # which takes either of the last two.
    hiding_variables=("ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    forced_target="",  # numba-hip compiles for the current device's amdgpu_arch
    compiles_without_gpu=False,  # numba-hip compiles for the current device's amdgpu_arch
    counts_resources=False,
    # HIP counts an RDNA part's work-group processors (two compute units each) as its multiprocessors,
    # and RDNA3 and CDNA3 issue two FP32 operations per lane: the nominal peak can be a quarter of the real one.
    peak_bounds_rates=False,
    array_wrapper="as_cuda_array",  # numba.hip has it (api.py); not run on AMD hardware
    install="install numba-hip in its own environment: python3 -m venv .venv-roc && "
            ".venv-roc/bin/pip install -e '.[roc]' (it cannot share one with numba-cuda)",
    driver_init="hipInit",
    driver_count="hipGetDeviceCount",
    # An HSA dispatch packet holds a grid's size along each axis in threads, in 32 bits, so ROCm's
    # hipModuleLaunchKernel refuses a grid of more (blocks x threads per block) along x.
    grid_column_threads=2**32 - 1,
)
