"""Generated CUDA kernels compile to PTX for sm_90 without a GPU, and ptxas reports their resources.

Numba's compiler and its simulator cannot share a process, so these run `tuner resources` in a
fresh process with the simulator off.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.space import FLAGSHIPS

ROOT = Path(__file__).resolve().parent.parent


def _compiler_env():
    return {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}


def _resources(*args):
    done = subprocess.run([sys.executable, "-m", "tuner", "resources", "--backend", "cuda", "--json", *args],
                          capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_seed_kernel_compiles_without_spills():
    report = _resources("--seed-kernel")
    assert 0 < report["registers"] <= 64
    assert report["spills"] is False and report["shared_bytes"] == 2 * 16 * 16 * 4


@pytest.mark.parametrize("dtype", [
    # the register-cap test below compiles a float64 tile in the default run
    pytest.param("float64", marks=pytest.mark.slow),
    "float16",
])
def test_default_configuration_compiles_in_every_precision(dtype):
    report = _resources("--dtype", dtype)
    assert report["registers"] > 0 and report["ptx_seconds"] > 0


def test_a_kernel_capped_below_its_registers_keeps_to_the_cap_and_is_flagged_as_spilling():
    """A float64 4x8 tile takes 146 registers uncapped (ptxas 13.5), yet its estimate (Space.registers)
    lets it run under a cap of 128, where ptxas spills. About 10 s a compile."""
    tile = ("--dtype", "float64", "block_m=64", "block_n=64", "thread_m=4", "thread_n=8", "prefetch=false",
            "unroll_k=1")
    assert _resources(*tile)["registers"] > 128
    capped = _resources(*tile, "max_registers=128")
    assert capped["registers"] <= 128 and capped["spills"] is True


def test_resources_on_the_simulator_is_a_clear_error():
    done = subprocess.run([sys.executable, "-m", "tuner", "resources", "--backend", "cuda"],
                          capture_output=True, text=True, env=_compiler_env() | {"NUMBA_ENABLE_CUDASIM": "1"})
    assert done.returncode == 2 and "unset NUMBA_ENABLE_CUDASIM" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_every_valid_configuration_compiles(dtype, tmp_path):
    """The whole space, about 3 s per distinct PTX on one core: hours on 2 cores (run with -m sweep)."""
    out = tmp_path / f"{dtype}.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "compile_space.py"), "--dtype", dtype,
                           "--out", str(out)], capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    assert summary["coverage"] == 1.0 and summary["failed"] == 0


def test_fma_fraction_and_compile_seconds_are_reported():
    report = _resources("block_m=64", "block_n=64", "thread_m=4", "thread_n=4", "unroll_k=4")
    assert 0.3 < report["fma_fraction"] < 1 and report["fma_fraction_missing"] == ""
    assert report["compile_seconds"] >= report["ptx_seconds"] > 0


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
def test_the_flagship_issues_mostly_multiply_adds_without_spills(dtype):
    """About 20 s each: the fully unrolled 8x8 vector tile is the slowest variant to compile."""
    report = _resources("--dtype", dtype, *FLAGSHIPS[dtype].describe().split())
    assert report["fma_fraction"] >= 0.80 and report["spills"] is False and report["registers"] <= 255


def test_without_nvdisasm_there_is_no_fma_fraction_and_the_reason_says_why(tmp_path):
    from tuner.sass import NoDisassembler, nvdisasm_beside

    with pytest.raises(NoDisassembler, match="pip install nvidia-cuda-nvdisasm"):
        nvdisasm_beside(str(tmp_path / "ptxas"))


def test_a_disassembler_that_fails_leaves_no_fma_fraction_and_says_why():
    """As without nvdisasm: the search measures the variant unpruned, rather than stopping."""
    script = """
import json, subprocess
from tuner import sass
from tuner.backends import CUDA
from tuner.resources import count
from tuner.space import SEED, Space

def failing(cubin, ptxas):
    raise subprocess.CalledProcessError(1, ["nvdisasm", "-c", str(cubin)])

sass.disassemble = failing
print(json.dumps(count(Space.of(CUDA, "float32"), SEED).as_dict()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    assert counted["fma_fraction"] is None and "nvdisasm" in counted["fma_fraction_missing"]


def test_roc_has_no_static_count():
    done = subprocess.run([sys.executable, "-m", "tuner", "resources", "--backend", "roc"],
                          capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no static count exists for roc" in done.stderr


def test_the_batched_family_compiles_to_sm_90_without_spills():
    report = _resources("--family", "batched")
    assert report["registers"] > 0 and report["spills"] is False


def test_a_ptxas_older_than_nvvm_is_named_with_what_to_install(tmp_path, monkeypatch):
    """A ptxas on PATH older than numba-cuda's NVVM (a system CUDA) refuses its PTX's version."""
    from tuner import resources

    old = tmp_path / "ptxas"
    old.write_text("#!/bin/sh\n"
                   "echo \"ptxas $3, line 9; fatal   : Unsupported .version 9.5; current version is '9.0'\" >&2\n"
                   "exit 255\n")
    old.chmod(0o755)
    monkeypatch.setattr(resources, "ptxas_path", lambda: str(old))
    with pytest.raises(resources.CountUnavailable, match=f"Unsupported .version 9.5.*; {old} is older than "
                                                          "numba-cuda's NVVM: pip install -U nvidia-cuda-nvcc"):
        resources.assemble(".version 9.5\n")


@pytest.mark.parametrize("content, mode", [(b"#!/bin/sh\n", 0o644), (b"\x7fELF of another machine", 0o755)],
                         ids=["not executable", "another machine's"])
def test_a_ptxas_or_nvdisasm_that_cannot_run_counts_as_none_and_says_what_to_do(tmp_path, monkeypatch, content, mode):
    """Not executable, or built for another machine: as if it were missing, no count (the variant is
    measured unpruned), rather than an OSError that stops a search as the disk's would."""
    from tuner import resources, sass

    for name in ("ptxas", "nvdisasm"):
        (tmp_path / name).write_bytes(content)
        (tmp_path / name).chmod(mode)
    monkeypatch.setattr(resources, "ptxas_path", lambda: str(tmp_path / "ptxas"))
    with pytest.raises(resources.CountUnavailable, match=f"{tmp_path / 'ptxas'} cannot run here .*: replace it, "
                                                         "e.g. pip install --force-reinstall nvidia-cuda-nvcc"):
        resources.assemble(".version 9.0\n")
    with pytest.raises(sass.NoDisassembler, match="nvdisasm cannot run here .*: replace it, e.g. pip install "
                                                  "--force-reinstall nvidia-cuda-nvdisasm"):
        sass.disassemble(tmp_path / "kernel.cubin", str(tmp_path / "ptxas"))


def test_a_count_from_the_ir_of_a_kernel_numba_compiled_equals_a_fresh_count():
    """A compile worker counts a kernel from the LLVM IR Numba kept when it compiled it for an sm_90
    GPU (faked here: Numba builds the kernel as on an H100, with no link on the GPU), so that Numba
    neither types nor lowers it again; the count is the one compile_ptx's PTX gives. The kernel of
    a GPU of another compute capability, which Numba lowers for it, is counted afresh."""
    script = """
import json
from types import SimpleNamespace
from numba.cuda.core import sigutils
from numba.cuda.cudadrv import devices
from numba.cuda.dispatcher import _Kernel
from tuner import resources
from tuner.backends import CUDA
from tuner.config import Config
from tuner.kernel import load
from tuner.space import Space

space, config = Space.of(CUDA, "float32"), Config(block_m=32, block_n=32, thread_m=2, thread_n=2)
device = SimpleNamespace(compute_capability=resources.ARCH)
devices._runtime.get_or_create_context = lambda devnum=None: SimpleNamespace(device=device)
function = load(space, config).function
argtypes, _ = sigutils.normalize_signature(space.family.signature(space.precision))
compiled = _Kernel(function.py_func, argtypes, **function.targetoptions)  # as Dispatcher.compile makes it
fresh = resources.count(space, config).as_dict()

def compile_ptx(*args):
    raise AssertionError("typed and lowered again")

resources.compile_ptx = compile_ptx
reused = resources.count(space, config, compiled=compiled).as_dict()
device.compute_capability = (8, 0)
try:
    resources.count(space, config, compiled=compiled)
    afresh = False
except AssertionError:
    afresh = True
print(json.dumps({"fresh": fresh, "reused": reused, "afresh": afresh}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    seconds = ("ptx_seconds", "ptxas_seconds", "compile_seconds")
    fresh, reused = ({k: v for k, v in counted[name].items() if k not in seconds} for name in ("fresh", "reused"))
    assert reused == fresh and fresh["fma_fraction"] > 0 and counted["afresh"]
