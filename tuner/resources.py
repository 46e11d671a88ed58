"""Static resource counts of a generated CUDA kernel, without a GPU.

The kernel is compiled to PTX by numba.cuda.compile_ptx (or, for a kernel Numba has compiled for
an sm_90 GPU, by NVVM alone from the LLVM IR it kept), then assembled by ptxas -v, which
reports registers per thread, stack frame, spill bytes and shared memory; a tensor-core kernel is
compiled to LTO-IR and linked with the mma wrappers by nvJitLink instead (tuner/mma.py), whose log
reports the same. The files go to a scratch folder of the kernel directory (disk.scratch_folder),
and a ptxas or nvdisasm that cannot run counts as a missing one. Where nvdisasm is installed, the
SASS gives the share of multiply-adds (FFMA, DFMA, or HMMA on the tensor cores) among the
instructions one interior k-tile issues (tuner/sass.py): for FFMA/DFMA, the kernel's static
ceiling as a fraction of the FP32 (FP64) peak; for HMMA, a count only (one HMMA keeps the tensor
pipe busy for several cycles).
"""
import importlib.util
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import sass, simulator
from .config import Tiling
from .disk import scratch_folder
from .kernel import file_settings, import_source, kernel_dir, private_dir
from .source import launch_bounds_of, render
from .space import Space

ARCH = (9, 0)  # Hopper (H100, H200)


class CountUnavailable(RuntimeError):
    """The counts cannot be made here: wrong backend, the simulator, or no ptxas."""


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel, how long compiling took, and the multiply-adds of one
    interior k-tile's SASS and their share of its instructions (None, with the reason, where they
    cannot be counted). `ptx_seconds` is NVVM's alone where the PTX came from a compiled kernel's IR;
    `ptxas_seconds` is 0 for a tensor-core kernel: linking includes it."""

    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    ptx_seconds: float
    ptxas_seconds: float = 0.0
    fma_fraction: float | None = None
    fma_fraction_missing: str = ""
    k_tile_multiply_adds: float | None = None  # FFMA/DFMA (HMMA) one interior k-tile issues per thread (warp)

    @property
    def compile_seconds(self) -> float:
        """PTX plus ptxas: for a fresh compile (`tuner resources`), what one variant costs the search
        before it runs; from a compiled kernel's IR, NVVM's share of the PTX alone."""
        return self.ptx_seconds + self.ptxas_seconds

    @property
    def spills(self) -> bool:
        """Whether registers spill to local memory (`tuner resources` says so)."""
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def as_dict(self) -> dict:
        return dict(asdict(self), spills=self.spills, compile_seconds=round(self.compile_seconds, 3))


def ptxas_path() -> str:
    """ptxas from the newest nvidia-cuda-nvcc wheel (matching numba-cuda's NVVM), else PATH."""
    if importlib.util.find_spec("nvidia") is not None:
        import nvidia

        for base in nvidia.__path__:
            versioned = [p for p in Path(base).glob("cu*/bin/ptxas") if re.fullmatch(r"cu\d+", p.parts[-3])]
            newest_first = sorted(versioned, key=lambda p: int(p.parts[-3][2:]), reverse=True)
            for candidate in newest_first + [Path(base, "cuda_nvcc/bin/ptxas")]:
                if candidate.is_file():
                    return str(candidate)
    found = shutil.which("ptxas")
    if found is None:
        raise CountUnavailable("ptxas not found: pip install nvidia-cuda-nvcc (or the tests extra)")
    return found


def _countable(space: Space) -> None:
    """CountUnavailable, saying why, where Numba's compiler cannot make `space`'s counts here."""
    if not space.backend.counts_resources:
        raise CountUnavailable(f"no static count exists for {space.backend.name}: the resource counts and "
                                "fma_fraction come from PTX, ptxas and nvdisasm, which are NVIDIA's")
    if simulator.simulating():
        raise CountUnavailable("the resource counts need Numba's compiler: unset NUMBA_ENABLE_CUDASIM")


def _kernel_function(space: Space, config: Tiling, directory: Path | None):
    """The Python function of `config`'s kernel, for Numba's compiler (not the simulator)."""
    _countable(space)
    return import_source(render(space, config), space.backend.module, directory, file_settings(space)).matmul.py_func


def compile_ptx(space: Space, config: Tiling, arch: tuple[int, int] = ARCH,
                directory: Path | None = None) -> tuple[str, float]:
    """The PTX of `config`'s kernel for `arch` (its file in the kernel `directory`, by default
    kernel_dir()), and the seconds compile_ptx took."""
    from numba import cuda

    function = _kernel_function(space, config, directory)
    start = time.perf_counter()
    ptx, _ = cuda.compile_ptx(function, space.family.signature(space.precision), cc=arch,
                              launch_bounds=launch_bounds_of(space, config))
    return ptx, time.perf_counter() - start


def _ptx(space: Space, config: Tiling, arch: tuple[int, int], directory: Path | None,
         compiled) -> tuple[str, float]:
    """compile_ptx's PTX and seconds; from the LLVM IR of `compiled` (Numba's kernel of `config`,
    Kernel.compile) where it was lowered for `arch`, this process's GPU being of `arch`: the same IR
    and NVVM options, so the same PTX, without typing and lowering the kernel again."""
    from numba import cuda

    if compiled is None or cuda.get_current_device().compute_capability != arch:  # Numba lowers some code by it
        return compile_ptx(space, config, arch, directory)
    start = time.perf_counter()
    ptx = compiled.inspect_asm(arch)  # NVVM again: Numba's own PTX is for compute_90a (CUDACodeLibrary._ensure_cc)
    return ptx, time.perf_counter() - start


def _field(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    if match is None:
        raise CountUnavailable(f"unexpected ptxas output: {text.strip()[:200]}")
    return int(match.group(1))


def scratch(directory: Path | None = None):
    """A scratch folder for a count's files in the kernel `directory` (by default kernel_dir()), not
    in /tmp: there one that a process killed mid-count left is removed later (disk.scratch_folder)."""
    return scratch_folder(private_dir(directory or kernel_dir()) / "scratch")


def assemble(ptx: str, arch: tuple[int, int] = ARCH, max_registers: int = 0, cubin: Path | None = None) -> str:
    """ptxas -v's report for `ptx`; the assembled kernel goes to `cubin` if given (the PTX beside
    it), else to a scratch folder."""
    if cubin is None:
        with scratch() as folder:
            return assemble(ptx, arch, max_registers, folder / "kernel.cubin")
    path = cubin.with_suffix(".ptx")
    path.write_text(ptx)
    ptxas = ptxas_path()
    command = [ptxas, f"-arch=sm_{arch[0]}{arch[1]}", "-v", str(path), "-o", str(cubin)]
    if max_registers:
        command.insert(1, f"-maxrregcount={max_registers}")
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:  # a file there, but no program this machine runs: as if none were
        raise CountUnavailable(f"{ptxas} cannot run here ({error.strerror or error}): replace it, "
                               "e.g. pip install --force-reinstall nvidia-cuda-nvcc") from error
    if done.returncode:
        older = "Unsupported .version" in done.stderr  # NVVM's PTX is newer than this ptxas reads
        remedy = (f"; {ptxas} is older than numba-cuda's NVVM: pip install -U nvidia-cuda-nvcc (or the tests extra)"
                  if older else "")
        raise CountUnavailable(f"ptxas failed: {done.stderr.strip()[:300]}{remedy}")
    return done.stdout + done.stderr


def parse_ptxas(ptxas_output: str, ptx_seconds: float, **counts) -> Resources:
    """Parse ptxas -v's report; `counts` are the Resources fields that come from elsewhere."""
    return Resources(
        registers=_field(r"Used (\d+) registers", ptxas_output),
        stack_bytes=_field(r"(\d+) bytes stack frame", ptxas_output),
        spill_store_bytes=_field(r"(\d+) bytes spill stores", ptxas_output),
        spill_load_bytes=_field(r"(\d+) bytes spill loads", ptxas_output),
        shared_bytes=_field(r"(\d+) bytes smem", ptxas_output) if "bytes smem" in ptxas_output else 0,
        ptx_seconds=ptx_seconds,
        **counts,
    )


def interior_k_tile(cubin: Path, space: Space, config: Tiling) -> dict:
    """What one k-tile of an interior block issues (tuner/sass.py), from the assembled kernel."""
    return sass.k_tile_path(sass.disassemble(cubin, ptxas_path()), space.multiply_adds(config),
                            sum(config.loads_per_thread))


def _link(space: Space, config: Tiling, arch: tuple[int, int], directory: Path | None,
          cubin: Path) -> tuple[str, float]:
    """A tensor-core kernel compiled and linked with the mma wrappers into `cubin`: nvJitLink's
    log (ptxas's report) and the seconds it all took."""
    from . import mma

    function = _kernel_function(space, config, directory)
    start = time.perf_counter()
    code, log = mma.cubin(function, space.family.signature(space.precision), arch, launch_bounds_of(space, config))
    cubin.write_bytes(code)
    return log, time.perf_counter() - start


def count(space: Space, config: Tiling, arch: tuple[int, int] = ARCH, directory: Path | None = None,
          compiled=None) -> Resources:
    """Registers, stack, spills, shared memory, compile time and multiply-add share of `config`'s
    kernel as compiled for `arch` (its file in the kernel `directory`, by default kernel_dir());
    `compiled`: that kernel as Numba compiled it for this process's GPU, whose IR gives the PTX."""
    _countable(space)
    with scratch(directory) as folder:
        cubin = folder / "kernel.cubin"
        if space.precision.tensor_cores:
            output, seconds = _link(space, config, arch, directory, cubin)
            counts = {}
        else:
            ptx, seconds = _ptx(space, config, arch, directory, compiled)
            start = time.perf_counter()
            output = assemble(ptx, arch, config.max_registers, cubin)
            counts = {"ptxas_seconds": time.perf_counter() - start}
        try:
            path = interior_k_tile(cubin, space, config)
            counts["fma_fraction"] = round(path["multiply_adds"] / path["issued"], 4)
            counts["k_tile_multiply_adds"] = path["multiply_adds"]
        except (sass.NoDisassembler, ValueError, subprocess.CalledProcessError) as missing:
            counts["fma_fraction_missing"] = str(missing)  # no count: the variant is measured, unpruned
    return parse_ptxas(output, seconds, **counts)
