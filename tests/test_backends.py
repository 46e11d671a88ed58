"""Backends are objects: only their own modules, and the simulator's, tell them apart."""
import os
import re
import stat
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

import tuner
from tuner import devices
from tuner.backends import BACKENDS, CUDA, ROC, SIMULATOR_DEFAULT, NoDevice
from tuner.kernel import UnsafeKernelDirectory
from tuner.runtime import FLUSH_BYTES, NoGPU, Runtime, RuntimeUnavailable, driver_device_count, open_runtime

TUNER = Path(tuner.__file__).parent
# Where a backend's name or the simulator's arch may be spelled out and compared.
OWNERS = {"backends/base.py", "backends/cuda.py", "backends/hip.py", "backends/__init__.py", "simulator.py"}
ALLOWED = {("devices.py", 'return self.arch == "simulator"')}  # Device.simulated, the one test of it
NAMES = r"""['"](?:cuda|roc|hip|simulator)['"]"""
COMPARISON = re.compile(rf"""(?:==|!=)\s*{NAMES}|{NAMES}\s*(?:==|!=|:)|\bin\s*[(\[{{]\s*{NAMES}""")


def test_no_module_outside_the_backends_and_the_simulator_compares_their_names():
    found = []
    for path in sorted(TUNER.rglob("*")):
        relative = path.relative_to(TUNER).as_posix()
        if path.suffix not in (".py", ".j2") or relative in OWNERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if COMPARISON.search(line) and (relative, line.strip()) not in ALLOWED:
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "ask the backend object or tuner.simulator instead:\n" + "\n".join(found)


def test_the_comparison_pattern_catches_what_it_is_for():
    for line in ('if backend.name == "cuda":', "x != 'roc'", '{"roc": describe}', 'arch == "simulator"',
                 'if name in ("cuda", "roc")'):
        assert COMPARISON.search(line), line
    assert not COMPARISON.search('backend: str  # the name, such as cuda')


def test_the_registry_names_each_backend_once_and_the_simulator_stands_in_for_one():
    assert BACKENDS == {"cuda": CUDA, "roc": ROC} and SIMULATOR_DEFAULT in BACKENDS
    assert CUDA.counts_resources and not ROC.counts_resources


@pytest.mark.parametrize("backend", [CUDA, ROC], ids=lambda backend: backend.name)
def test_a_missing_driver_is_no_gpu_with_the_libraries_tried(backend, monkeypatch):
    monkeypatch.setattr(type(backend), "driver_libraries", lambda self: ["libtuner-no-such-driver.so"])
    with pytest.raises(NoDevice, match="no .* driver found"):
        backend.detect()
    with pytest.raises(NoGPU, match=f"no {backend.name} driver found \\(libtuner-no-such-driver.so is not loadable\\)"):
        driver_device_count(backend)


def test_roc_probes_the_hip_runtime_that_numba_hip_is_told_to_load(monkeypatch):
    """numba-hip loads $NUMBA_HIP_RUNTIME, and only it, where the variable is set."""
    monkeypatch.setenv("NUMBA_HIP_RUNTIME", "/opt/rocm-6.4.1/lib/libamdhip64.so")
    assert ROC.driver_libraries() == ["/opt/rocm-6.4.1/lib/libamdhip64.so"]
    monkeypatch.delenv("NUMBA_HIP_RUNTIME")
    assert ROC.driver_libraries()[0] == "libamdhip64.so"


def test_roc_leaves_numba_hips_target_alone_and_describes_the_gpu_by_it(monkeypatch):
    """numba-hip compiles for its Device.amdgpu_arch: the bare gfx name unless
    NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES=1, which it reads once, at its first import, and which the
    device library it links into every kernel ignores. Loading leaves that variable alone, so a
    program that imported numba.hip before tuner describes its GPU as `tuner search` does."""
    monkeypatch.delenv("NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES", raising=False)
    hip = _fake_numba_hip(monkeypatch)
    assert ROC.load() is hip and "NUMBA_HIP_DEFAULT_ARCH_WITH_FEATURES" not in os.environ
    device = ROC.describe(hip)
    assert (device.arch, device.multiprocessors, device.memory_bytes, device.runtime) == ("gfx90a", 104, 64 << 30,
                                                                                          "HIP 6.2")


def _fake_numba_hip(monkeypatch) -> types.ModuleType:
    """numba.hip, as far as ROC.describe reads it, on an MI250X with HIP 6.2."""
    gpu = types.SimpleNamespace(MULTIPROCESSOR_COUNT=104, CLOCK_RATE=1_700_000, L2_CACHE_SIZE=8 << 20,
                                amdgpu_arch="gfx90a", name="AMD Instinct MI250X / MI250")
    memory = types.SimpleNamespace(free=60 << 30, total=64 << 30)
    names = ("numba.hip", "numba.hip.hipdrv", "numba.hip.hipdrv.driver", "numba.hip.hipconfig")
    hip, hipdrv, driver, hipconfig = (types.ModuleType(name) for name in names)
    hip.get_current_device = lambda: gpu
    hip.current_context = lambda: types.SimpleNamespace(get_memory_info=lambda: memory)
    hipdrv.driver, driver.get_version = driver, lambda: (6, 2)
    hip.hipdrv, hip.hipconfig, hipconfig.ENABLE_MIDEND_OPT = hipdrv, hipconfig, False
    for module in (hip, hipdrv, driver, hipconfig):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return hip


def test_a_setting_that_changes_numba_hips_kernels_changes_the_fingerprint(monkeypatch, numba_env):
    """numba-hip reads NUMBA_HIP_MIDEND_OPT once, at import, and Numba's NUMBA_CUDA_DEBUGINFO at
    each jit; its kernels' optimisation level follows neither NUMBA_OPT nor NUMBA_HIP_OPT_LEVEL."""
    for name in ("NUMBA_OPT", "NUMBA_CUDA_DEBUGINFO", "NUMBA_HIP_OPT_LEVEL"):
        numba_env.delenv(name, raising=False)
    hip = _fake_numba_hip(monkeypatch)
    before = ROC.describe(hip)
    numba_env.setenv("NUMBA_OPT", "0")
    numba_env.setenv("NUMBA_HIP_OPT_LEVEL", "1")
    assert ROC.describe(hip).fingerprint == before.fingerprint
    numba_env.setenv("NUMBA_CUDA_DEBUGINFO", "1")
    monkeypatch.setattr(sys.modules["numba.hip.hipconfig"], "ENABLE_MIDEND_OPT", True)
    after = ROC.describe(hip)
    assert after.model == before.model and devices.software_changes(before, after) == [
        "NUMBA_CUDA_DEBUGINFO 0 -> 1", "NUMBA_HIP_MIDEND_OPT 0 -> 1"]


@pytest.fixture
def amd_host(tmp_path, monkeypatch):
    """An AMD GPU host (the driver's count faked) whose temporary folder ($TMPDIR, as tempfile read it) is
    `tmp_path`/tmp, and numba-hip's device-library cache there; importing numba.hip notes the mode of
    that cache (None if missing) in the list yielded, then fails."""
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    monkeypatch.delenv("NUMBA_HIP_USE_DEVICE_LIB_CACHE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(type(ROC), "detect", lambda self: 1)
    cache, modes = tmp_path / "tmp" / "numba" / "hip" / f"uid_{os.getuid()}", []

    def load(self):
        modes.append(stat.S_IMODE(cache.stat().st_mode) if cache.exists() else None)
        raise ImportError("no numba-hip here")

    monkeypatch.setattr(type(ROC), "load", load)
    (tmp_path / "tmp").mkdir()
    yield cache, modes


def test_numba_hips_device_library_cache_is_made_private_before_numba_hip_loads(amd_host):
    """numba-hip would make it with the umask's mode."""
    cache, modes = amd_host
    with pytest.raises(RuntimeUnavailable, match="no numba-hip here"):
        open_runtime(ROC)
    assert modes == [0o700]


def test_a_device_library_cache_others_could_plant_is_refused_before_numba_hip_loads(amd_host, monkeypatch):
    """numba-hip links the bitcode it finds there into every kernel, whoever wrote it."""
    cache, modes = amd_host
    shared = cache.parents[1]
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may put a folder of theirs as ours in it
    with pytest.raises(UnsafeKernelDirectory, match=f"^numba-hip's device-library cache {cache} lies in {shared}, "
                                                    "which other users can write .mode 777.; .*: set TMPDIR to a "
                                                    "folder of your own, or NUMBA_HIP_USE_DEVICE_LIB_CACHE=0$"):
        open_runtime(ROC)
    monkeypatch.setenv("NUMBA_HIP_USE_DEVICE_LIB_CACHE", "0")  # numba-hip then neither reads nor writes it
    with pytest.raises(RuntimeUnavailable, match="no numba-hip here"):
        open_runtime(ROC)
    assert len(modes) == 1  # the refused runtime did not import numba.hip


def test_a_tuner_backend_variable_naming_no_backend_is_refused_by_name(monkeypatch):
    from tuner.runtime import detect_runtime

    monkeypatch.setenv("TUNER_BACKEND", "metal")
    with pytest.raises(ValueError, match="TUNER_BACKEND='metal' names no backend; set it to one of: cuda, roc"):
        detect_runtime()


def test_a_process_forked_after_its_parent_initialised_cuda_is_told_to_spawn_not_that_there_is_no_gpu(monkeypatch):
    """In a process forked after its parent's cuInit (Numba's, PyTorch's), cuInit returns
    CUDA_ERROR_NOT_INITIALIZED (3), the driver's library faked here: that is a RuntimeUnavailable
    saying what to do, not a NoGPU after ROC is tried too, whose line would offer the simulator."""
    from tuner.backends import base
    from tuner.runtime import detect_runtime

    driver = types.SimpleNamespace(cuInit=lambda flags: 3, hipInit=lambda flags: 100)
    monkeypatch.setattr(base, "_load_first", lambda candidates: driver)
    for variable in ("NUMBA_ENABLE_CUDASIM", "TUNER_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(RuntimeUnavailable) as refused:
        detect_runtime()
    assert type(refused.value) is RuntimeUnavailable and str(refused.value) == (
        "the cuda driver cannot be used in this process (cuInit returns 3, as it does in a process forked after its "
        "parent initialised the driver); start worker processes with the 'spawn' start method "
        "(multiprocessing.get_context('spawn')), or use the GPU in the parent only after forking them")


def test_regenerate_on_the_simulator_takes_the_backend_from_tuner_backend(tmp_path, monkeypatch, capsys):
    from tuner.cli import main

    monkeypatch.setenv("TUNER_BACKEND", "roc")
    assert main(["regenerate", "--simulate", "--cache-dir", str(tmp_path)]) == 0
    assert "no roc records in the cache" in capsys.readouterr().out
    monkeypatch.setenv("TUNER_BACKEND", "metal")
    assert main(["regenerate", "--simulate", "--cache-dir", str(tmp_path)]) == 2
    assert "TUNER_BACKEND='metal' names no backend" in capsys.readouterr().err


def test_a_numba_config_file_that_turns_the_simulator_on_is_refused_in_place_of_the_gpu(tmp_path):
    # On a GPU host (the driver's count faked), Numba's numba.cuda would be its simulator: measuring it
    # as the GPU would record the simulator's times under the GPU's fingerprint.
    (tmp_path / ".numba_config.yaml").write_text("enable_cudasim: 1\n")
    code = ("import tuner.runtime as runtime; from tuner.cli import main\n"
            "runtime.driver_device_count = lambda backend: 1\n"
            "raise SystemExit(main(['search', '--backend', 'cuda', '--trials', '1']))")
    environment = {name: value for name, value in os.environ.items() if name != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(f"Numba's configuration turns its CUDA simulator on (NUMBA_ENABLE_CUDASIM, or "
                                        f"enable_cudasim in {tmp_path / '.numba_config.yaml'}), so the GPU would not "
                                        "be measured; unset it, or pass --simulate")


@pytest.mark.parametrize("value, on", [("1", True), (" 1", True), ("01", True), ("2", True), ("-1", True),
                                       ("0", False)])
def test_numba_enable_cudasim_is_read_as_numba_reads_it(monkeypatch, capsys, value, on):
    """A whole number, any but 0 on, as Numba's config reads it with int(): tuner must agree, or it
    would take Numba's simulator for a GPU (refused, on a GPU host) or say no GPU where Numba has one."""
    from tuner import simulator

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", value)
    assert simulator.enabled() is on
    if on:  # tuner devices says why it probed no GPU with the value as it is
        from tuner.cli import main

        assert main(["devices", "--backend", "cuda"]) == 0
        assert capsys.readouterr().err == f"cuda: GPUs not probed: NUMBA_ENABLE_CUDASIM={value}\n"


@pytest.mark.parametrize("value", ["true", "yes", "false", "on", "1.0", "", " "])
def test_a_numba_enable_cudasim_numba_cannot_read_is_refused_in_one_line(monkeypatch, capsys, value):
    """Numba would take it for 0 (off) with a warning that carries a traceback, the user having
    meant the simulator, likely (an empty one is warned of too: unset is how to say off): every
    command refuses it in one line saying to set 1 or unset it."""
    from tuner import simulator
    from tuner.cli import main

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", value)
    with pytest.raises(ValueError, match=f"^NUMBA_ENABLE_CUDASIM={value!r} is not a whole number"):
        simulator.enabled()
    for command in (["devices"], ["search", "--backend", "cuda", "--trials", "1"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err == (f"tuner {command[0]}: error: NUMBA_ENABLE_CUDASIM={value!r} is not a whole number, which "
                       "Numba takes for 0 (off): set it to 1 to run on Numba's CUDA simulator, or unset it\n")


@pytest.mark.parametrize("command", [["list"], ["show", "float32-8x8x8"], ["render", "--backend", "cuda"],
                                     ["search", "--backend", "cuda", "--simulate", "--trials", "1"]],
                         ids=["list", "show", "render", "search --simulate"])
def test_a_numba_enable_cudasim_numba_cannot_read_is_refused_by_every_command_before_numba_warns(tmp_path, command):
    """Commands that never open a runtime load Numba too, which warns of the value with a traceback
    (and --simulate, which sets 1 itself, took it silently): each says the one line instead."""
    environment = {**os.environ, "NUMBA_ENABLE_CUDASIM": "true", "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "tuner", *command], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (2, f"tuner {command[0]}: error: NUMBA_ENABLE_CUDASIM='true' is not a "
                                                 "whole number, which Numba takes for 0 (off): set it to 1 to run on "
                                                 "Numba's CUDA simulator, or unset it\n")
    assert not (tmp_path / "cache").exists()


def test_tuner_matmul_on_a_gpu_host_runs_on_the_simulator_that_numba_enable_cudasim_2_turns_on(tmp_path):
    """NUMBA_ENABLE_CUDASIM=2 turns Numba's simulator on: tuner.matmul runs there, rather than
    refusing Numba's simulator as if it stood in for the GPU (the driver's count faked)."""
    code = ("import numpy, tuner, tuner.runtime as runtime\n"
            "runtime.driver_device_count = lambda backend: 1\n"
            "print(tuner.matmul(numpy.ones((2, 3), numpy.float32), numpy.ones((3, 2), numpy.float32)).tolist())")
    environment = {**os.environ, "NUMBA_ENABLE_CUDASIM": "2", "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout == "[[3.0, 3.0], [3.0, 3.0]]\n", done.stderr


@pytest.mark.parametrize("backend", [CUDA, ROC], ids=["cuda", "roc"])
@pytest.mark.parametrize("init, said", [(100, "found no usable device"), (0, "reports no device")],
                         ids=["init fails", "no device counted"])
def test_no_device_where_the_visible_devices_variable_is_set_names_it(monkeypatch, backend, init, said):
    """CUDA_VISIBLE_DEVICES='' (or one naming no GPU here) leaves the driver none to show, which it
    says as cuInit's CUDA_ERROR_NO_DEVICE (100) or as a count of 0 (the driver's library faked):
    the line says which variable hid the GPUs, not only that there are none, which tuner search
    would take for a host without a GPU and run on the simulator."""
    from tuner.backends import base

    driver = types.SimpleNamespace(**{backend.driver_init: lambda flags: init, backend.driver_count: lambda count: 0})
    monkeypatch.setattr(base, "_load_first", lambda candidates: driver)
    monkeypatch.delenv(backend.visible_devices, raising=False)
    with pytest.raises(NoGPU, match=f"^the {backend.name} driver {said}$"):
        driver_device_count(backend)
    monkeypatch.setenv(backend.visible_devices, "")
    with pytest.raises(NoGPU, match=f"^the {backend.name} driver {said} among those {backend.visible_devices}='' "
                                    "lets this process see; unset it, or list devices that exist$"):
        driver_device_count(backend)


@pytest.mark.parametrize("backend, environment, named", [
    (ROC, {"ROCR_VISIBLE_DEVICES": ""}, "ROCR_VISIBLE_DEVICES='' lets this process see; unset it"),
    (ROC, {"GPU_DEVICE_ORDINAL": "5"}, "GPU_DEVICE_ORDINAL='5' lets this process see; unset it"),
    (ROC, {"CUDA_VISIBLE_DEVICES": "5"}, "CUDA_VISIBLE_DEVICES='5' lets this process see; unset it"),
    (ROC, {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"},
     "ROCR_VISIBLE_DEVICES='1' and HIP_VISIBLE_DEVICES='1' let this process see; unset them"),
    (CUDA, {"ROCR_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "7"},
     "CUDA_VISIBLE_DEVICES='7' lets this process see; unset it")],
    ids=["rocr", "ordinal", "cuda on roc", "rocr and hip", "cuda"])
def test_no_device_names_every_variable_set_that_hides_gpus_from_the_backends_driver(monkeypatch, backend, environment,
                                                                                    named):
    """ROCm's runtimes hide GPUs by ROCR_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, and HIP_VISIBLE_DEVICES
    or CUDA_VISIBLE_DEVICES (ROCm's HIP environment variables page): where one that was not named
    hid them all, the line blamed none or the wrong one. CUDA's driver reads CUDA_VISIBLE_DEVICES alone."""
    from tuner.backends import base

    driver = types.SimpleNamespace(**{backend.driver_init: lambda flags: 0, backend.driver_count: lambda count: 0})
    monkeypatch.setattr(base, "_load_first", lambda candidates: driver)
    for variable in ("ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(NoGPU) as refused:
        driver_device_count(backend)
    assert str(refused.value) == (f"the {backend.name} driver reports no device among those {named}, "
                                  "or list devices that exist")


@pytest.mark.parametrize("l2_bytes, flushed", [(50 << 20, FLUSH_BYTES), (4 << 20, FLUSH_BYTES), (256 << 20, 512 << 20)],
                         ids=["H100", "small", "large"])
def test_the_cache_flush_copies_twice_the_l2_and_at_least_256_mib(l2_bytes, flushed):
    """A flush smaller than AMD's Infinity Cache, which HIP leaves out of the L2's size, would leave
    the operands cached, and one shorter than the host's launch would time the launch."""
    from dataclasses import replace

    from records import H100

    made, copies = [], []

    class Array:
        def __init__(self, words, dtype):
            made.append(words * 4)

        def copy_to_device(self, source):
            copies.append(source)

    module = type("Module", (), {"device_array": staticmethod(Array)})
    runtime = Runtime(CUDA, module, replace(H100, l2_bytes=l2_bytes))
    runtime.flush_l2()
    runtime.flush_l2()
    assert made == [flushed, flushed] and len(copies) == 2  # the buffers are made once


def test_roc_prints_no_parameter_its_compiler_lacks_at_the_one_value_it_takes(tmp_path, capsys):
    """max_registers, vector_fragments and min_blocks are 0, false and 0 on ROC, always: its search
    summaries, `tuner show` and its kernels' docstrings printed them as if tuned."""
    from records import make_record

    from tuner import cache
    from tuner.cli import main
    from tuner.config import Config
    from tuner.problem import Problem
    from tuner.simulator import describe
    from tuner.source import render
    from tuner.space import Space

    lacked = ("max_registers", "vector_fragments", "min_blocks")
    assert set(ROC.fixed) == set(lacked) and CUDA.fixed == {}
    assert Config().describe(ROC) == ("block_m=64 block_n=64 block_k=16 thread_m=4 thread_n=4 unroll_k=4 pad=1 "
                                      "transpose_a=false prefetch=true double_buffer=false")
    assert all(name in Config().describe(CUDA) for name in lacked)
    assert "max_registers=64" in Config(max_registers=64).describe(ROC)  # a value ROC refuses is still named
    docstring = render(Space.of(ROC, "float32"), Config()).split('"""')[1]
    assert "block_m=64" in docstring and not any(name in docstring for name in lacked)
    device, problem = describe("roc"), Problem(16, 16, 16)
    cache.write_record(cache.record_path(tmp_path, device.slug, problem.key),
                       make_record(device, problem, [(Config(), 2.0), (Config(pad=0), 1.0)]))
    assert main(["show", "float32-16x16x16", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\n  block_m=64 " in out and "runner-up: 1 GFLOP/s  block_m=64 " in out
    assert not any(name in out for name in lacked)


def test_a_roc_grid_holds_the_column_tiles_whose_threads_fit_32_bits_and_a_cuda_grid_2_to_the_31_less_one():
    """HSA's dispatch packet counts a grid's threads along x in 32 bits; CUDA bounds its blocks alone."""
    assert ROC.grid_columns(1024) == (2**32 - 1) // 1024 and ROC.grid_columns(1) == 2**31 - 1
    assert CUDA.grid_columns(1024) == CUDA.grid_columns(32) == 2**31 - 1
