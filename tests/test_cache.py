"""Device fingerprints and cache records: distinct keys, atomic locked writes, clear read errors."""
import dataclasses
import functools
import hashlib
import itertools
import json
import contextlib
import io
import multiprocessing
import os
import sys

import numpy as np
import pytest
from processes import run_at_once, where_permissions_bind
from records import H100, make_record

import tuner
from tuner import cache
from tuner.record import RUNNERS_UP
from tuner.backends import CUDA
from tuner.config import Config
from tuner import devices
from tuner.devices import templates_hash
from tuner.formats import counted
from tuner.simulator import describe as describe_simulator
from tuner.problem import Problem
from tuner.space import Space

@pytest.mark.parametrize("change", [
    {"name": "NVIDIA H200"}, {"arch": "sm_100"}, {"multiprocessors": 114}, {"memory_bytes": 1},
    {"driver": "575.1 (CUDA 12.9)"}, {"runtime": "NVRTC 12.9"}, {"backend": "roc"},
    {"software": {**H100.software, "numba-cuda": "0.31.0"}},
    {"software": {**H100.software, "templates": "4567"}},
])
def test_any_change_of_device_or_software_changes_the_fingerprint(change):
    assert dataclasses.replace(H100, **change).fingerprint != H100.fingerprint


def test_the_memory_size_the_driver_reports_is_no_part_of_the_gpu_model():
    """It changes on one card (ECC on a GDDR card, the driver's reservation): its records are then
    verified on first use, as under other software, not taken for another model's."""
    smaller = dataclasses.replace(H100, memory_bytes=H100.memory_bytes * 15 // 16)
    assert smaller.model == H100.model and smaller.fingerprint != H100.fingerprint
    assert dataclasses.replace(H100, name="NVIDIA H100 PCIe").model != H100.model


def test_fingerprint_is_stable_and_names_a_directory():
    assert dataclasses.replace(H100).fingerprint == H100.fingerprint
    assert H100.slug == f"cuda-nvidia-h100-80gb-hbm3-{H100.fingerprint}"


def test_simulator_fingerprints_carry_the_templates_and_backend():
    cuda, roc = describe_simulator("cuda"), describe_simulator("roc")
    assert cuda.simulated and cuda.software["templates"] == templates_hash()
    assert cuda.fingerprint != roc.fingerprint and not cuda.peak_gflops


@pytest.mark.parametrize("edited", [name for _, name in devices.generator_files()])
def test_an_edit_of_a_template_or_of_the_code_that_renders_or_launches_it_changes_the_templates_hash(
        monkeypatch, edited):
    """A tuner whose kernels differ, by a template or by the Python that fills one in, compiles or
    launches it, has another fingerprint, so its records are verified again rather than trusted."""
    before, read = templates_hash(), devices._read
    monkeypatch.setattr(devices, "_read", lambda package, name: read(package, name) + (b"#" if name == edited else b""))
    assert templates_hash() != before


def test_the_templates_hash_covers_the_templates_the_renderer_the_signatures_and_the_limits():
    names = {name for _, name in devices.generator_files()}
    assert {"matmul.py.j2", "batched_matmul.py.j2", "mma.cu", "source.py", "config.py", "family.py",
            "families/batched.py", "families/matmul.py", "backends/cuda.py", "backends/hip.py"} <= names
    assert "report.html.j2" not in names and "cli/search.py" not in names


def test_an_edit_of_a_partial_a_template_includes_or_imports_changes_the_templates_hash(monkeypatch):
    """A family names only the template it renders: those it extends, includes or imports, at any depth,
    are found from it, so a partial added to the templates is in the fingerprint without being listed."""
    import jinja2

    from tuner import source

    templates = {"matmul.py.j2": '{% include "tiles.j2" %}', "batched_matmul.py.j2": '{% extends "matmul.py.j2" %}',
                 "tiles.j2": '{% import "macros.j2" as macros %}', "macros.j2": "{% macro tile() %}{% endmacro %}",
                 "mma.cu": ""}
    environment = jinja2.Environment(loader=jinja2.DictLoader(templates))
    monkeypatch.setattr(source, "_environment", lambda: environment)
    monkeypatch.setattr(source, "_references", functools.cache(source._references.__wrapped__))  # none read yet
    read = devices._read
    monkeypatch.setattr(devices, "_read", lambda package, name: templates[name].encode()
                        if package == "tuner.templates" else read(package, name))
    assert {"tiles.j2", "macros.j2"} <= {name for _, name in devices.generator_files()}
    before = templates_hash()
    templates["macros.j2"] += "#"
    assert templates_hash() != before


def test_each_template_is_parsed_once_however_many_fingerprints_are_made(monkeypatch):
    """Finding the templates a family's extends or includes parses them, which costs far more than
    hashing them: once per process, not at each device described (tuner devices on a host of many
    GPUs, each product of a regenerate)."""
    from tuner import source

    environment, parsed = source._environment(), []
    parse = environment.parse
    monkeypatch.setattr(environment, "parse", lambda text, *rest: parsed.append(text) or parse(text, *rest))
    for _ in range(3):
        describe_simulator("cuda")
    assert len(parsed) == len(set(parsed)) <= 2, len(parsed)


def test_the_cuda_c_the_kernels_link_includes_no_header():
    """So where the headers are found (NUMBA_CUDA_INCLUDE_PATH, a toolkit's include folder) changes no
    kernel, and is no part of the fingerprint; a wrapper that included one would need it there."""
    from tuner.family import families

    linked = {name for family in families().values() for name in family.linked}
    assert linked and not [name for name in linked if "#include" in devices._read("tuner.templates", name).decode()]


def test_an_edit_of_the_verification_protocol_changes_the_fingerprint(monkeypatch):
    """A record made under another (maybe weaker) check of correctness is verified again, not trusted."""
    before, read = describe_simulator("cuda"), devices._read
    monkeypatch.setattr(devices, "_read",
                        lambda package, name: read(package, name) + (b"#" if name == "measure.py" else b""))
    after = describe_simulator("cuda")
    assert after.fingerprint != before.fingerprint and after.software["templates"] == before.software["templates"]
    assert devices.software_changes(before, after) == [
        f"verification {before.software['verification']} -> {after.software['verification']}"]


def _describe_gpu(monkeypatch, versions: dict):
    """CUDA.describe of an H100 with these distributions' versions (numba-cuda's driver faked)."""
    from types import SimpleNamespace

    from numba.cuda.cudadrv import driver, runtime

    monkeypatch.setattr(driver, "get_version", lambda: (13, 0), raising=False)
    monkeypatch.setattr(runtime, "get_version", lambda: (13, 0), raising=False)
    monkeypatch.setattr(devices.metadata, "version", lambda name: versions.get(name, "1.0"))
    gpu = SimpleNamespace(name=b"NVIDIA H100 80GB HBM3", compute_capability=(9, 0), MULTIPROCESSOR_COUNT=132,
                          CLOCK_RATE=1_980_000, L2_CACHE_SIZE=52_428_800)
    memory = SimpleNamespace(get_memory_info=lambda: SimpleNamespace(total=85_000_000_000))
    return CUDA.describe(SimpleNamespace(get_current_device=lambda: gpu, current_context=lambda: memory))


@pytest.mark.parametrize("wheel", ["nvidia-nvvm", "nvidia-nvjitlink", "nvidia-cuda-nvrtc", "nvidia-cuda-nvcc-cu12",
                                   "nvidia-nvjitlink-cu12", "nvidia-cuda-nvrtc-cu12"])
def test_another_build_of_the_compilers_numba_cuda_loads_changes_the_fingerprint(monkeypatch, wheel):
    """NVVM reports version 2.0 under CUDA 12 and 13 alike: the wheels' versions tell its builds apart."""
    before = _describe_gpu(monkeypatch, {})
    after = _describe_gpu(monkeypatch, {wheel: "13.0.88"})
    assert after.model == before.model and after.fingerprint != before.fingerprint
    assert devices.software_changes(before, after) == [f"{wheel} 1.0 -> 13.0.88"]


@pytest.mark.parametrize("variable, value, change", [("NUMBA_OPT", "0", "NUMBA_OPT 3 -> 0"),
                                                     ("NUMBA_CUDA_DEBUGINFO", "1", "NUMBA_CUDA_DEBUGINFO 0 -> 1")])
def test_a_setting_that_changes_numba_cudas_kernels_changes_the_fingerprint(monkeypatch, numba_env, variable, value,
                                                                             change):
    """They change no version: a record tuned under another is verified again, the setting named."""
    for name in ("NUMBA_OPT", "NUMBA_CUDA_DEBUGINFO"):
        numba_env.delenv(name, raising=False)
    before = _describe_gpu(monkeypatch, {})
    numba_env.setenv(variable, value)
    after = _describe_gpu(monkeypatch, {})
    assert after.model == before.model and devices.software_changes(before, after) == [change]


def test_numba_cudas_settings_are_kept_at_the_values_its_kernels_are_compiled_under(monkeypatch, numba_env):
    """Any NUMBA_OPT but 0 is NVVM's -opt=3; NUMBA_CUDA_ENABLE_NRT is read once, into the config."""
    from numba.cuda.core import config

    numba_env.delenv("NUMBA_OPT", raising=False)
    before = _describe_gpu(monkeypatch, {})
    numba_env.setenv("NUMBA_OPT", "2")
    assert _describe_gpu(monkeypatch, {}).fingerprint == before.fingerprint
    monkeypatch.setattr(config, "CUDA_ENABLE_NRT", True)
    assert devices.software_changes(before, _describe_gpu(monkeypatch, {})) == ["NUMBA_CUDA_ENABLE_NRT 0 -> 1"]


def test_numba_cudas_settings_are_read_under_numbas_built_in_numba_cuda_too(monkeypatch, numba_env):
    """Numba's built-in numba.cuda has no numba.cuda.core: its settings are numba's own config."""
    monkeypatch.setitem(sys.modules, "numba.cuda.core", None)  # an import of it fails
    numba_env.setenv("NUMBA_OPT", "0")
    assert CUDA.compile_settings()["NUMBA_OPT"] == "0"


def test_a_record_made_before_the_settings_were_recorded_says_them_unrecorded(monkeypatch):
    """As for a wheel an older tuner did not record: such a record is verified again before it serves."""
    now = _describe_gpu(monkeypatch, {})
    older = dataclasses.replace(now, software={name: version for name, version in now.software.items()
                                               if not name.startswith("NUMBA_")})
    assert devices.software_changes(older, now) == [f"{name} unrecorded -> {now.software[name]}"
                                                    for name in sorted(CUDA.compile_settings())]


def test_what_an_older_record_did_not_record_is_said_so_not_said_missing():
    """A wheel neither recorded then nor installed now is no change to name."""
    newer = dataclasses.replace(H100, software={**H100.software, "nvidia-nvvm": "13.0.88", "verification": "abcd",
                                                "nvidia-nvjitlink-cu12": "missing"})
    assert devices.software_changes(H100, newer) == ["nvidia-nvvm unrecorded -> 13.0.88",
                                                     "verification unrecorded -> abcd"]


CONFIGS = list(itertools.islice(Space.of(CUDA, "float32"), 8))


def _ranked(index, gflops):
    return [(CONFIGS[(index + step) % 8], gflops / (step + 1)) for step in range(RUNNERS_UP + 1)]


def _write(path, gflops, index):
    cache.write_record(path, make_record(H100, Problem(8, 8, 8), _ranked(index, gflops)))


def test_concurrent_writers_leave_one_whole_record(tmp_path):
    path = cache.record_path(tmp_path, H100.slug, Problem(8, 8, 8).key)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.starmap(_write, [(path, 100.0 + i, i) for i in range(8)])
    record = cache.read_record(path)
    assert record in [make_record(H100, Problem(8, 8, 8), _ranked(i, 100.0 + i)) for i in range(8)]
    assert not list(path.parent.glob("*.tmp"))


def test_a_record_is_read_only_where_its_device_and_problem_put_it(tmp_path):
    home = cache.record_path(tmp_path, H100.slug, Problem(8, 8, 8).key)
    _write(home, 100.0, 0)
    other_device = cache.record_path(tmp_path, describe_simulator("cuda").slug, Problem(8, 8, 8).key)
    other_shape = cache.record_path(tmp_path, H100.slug, Problem(16, 16, 16).key)
    for misfiled in (other_device, other_shape):
        misfiled.parent.mkdir(parents=True, exist_ok=True)
        misfiled.write_text(home.read_text())
        with pytest.raises(cache.CacheError, match=f"{misfiled}: holds the record of {H100.slug}/"
                                                   "float32-8x8x8.json, so it was moved or copied here by hand"):
            cache.read_record(misfiled)
        with pytest.raises(AssertionError, match="refusing to write"):
            cache.write_record(misfiled, cache.read_record(home))


@pytest.mark.parametrize("text, message", [
    ("{ half a rec", "unreadable"),
    (json.dumps({"format": 99}), "not a tuner record of a known format"),
    (json.dumps({"format": 1, "best": {}}), "record lacks .fingerprint."),
])
def test_a_bad_record_is_reported_with_its_path(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(cache.CacheError, match=message) as error:
        cache.read_record(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("driver", ["none\x1b[31m\nFAKE LINE\x07", "580.65\u202e (CUDA 13.0)", "580.65\u2028",
                                    "580.65\ud800"])
def test_a_record_with_a_non_printing_character_is_skipped_and_none_reaches_the_terminal(tmp_path, capsys, driver):
    """Its fingerprint agrees, as a forger can make it: printed, an escape sequence, a line break or a
    bidi override would forge what another user of a shared cache sees (a lone surrogate would stop
    the printing)."""
    from tuner.cli import main

    data = make_record(H100, Problem(64, 64, 64), [(CONFIGS[0], 100.0)]).as_dict()
    description = {**data["device"], "driver": driver}
    del description["fingerprint"]
    fingerprint = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:16]  # Device's
    data.update(device={**description, "fingerprint": fingerprint}, fingerprint=fingerprint)
    path = cache.record_path(tmp_path, H100.slug.replace(H100.fingerprint, fingerprint), "float32-64x64x64")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    for command in (["list"], ["show", "64x64x64"]):
        main([*command, "--cache-dir", str(tmp_path)])
        out, err = capsys.readouterr()
        [skipped] = [line for line in err.splitlines() if "skipping" in line]
        assert skipped.startswith(f"tuner: skipping {path}: record.device.driver holds a non-printing character (U+")
        assert (out + err).replace("\n", "").isprintable()
    assert path.exists()


def test_a_non_printing_character_a_driver_reports_is_kept_as_a_replacement_character(tmp_path):
    """What the driver, a system file or a package's metadata says is not the user's doing: the
    search's record is written all the same."""
    device = dataclasses.replace(H100, name="NVIDIA\tH100", driver="580.65\n",
                                 software={**H100.software, "numba\x1b": "0.68.1\x00"})
    assert (device.name, device.driver) == ("NVIDIA\ufffdH100", "580.65\ufffd")
    assert device.software["numba\ufffd"] == "0.68.1\ufffd"
    problem = Problem(8, 8, 8)
    path = cache.record_path(tmp_path, device.slug, problem.key)
    cache.write_record(path, make_record(device, problem, [(CONFIGS[0], 100.0)]))
    assert cache.read_record(path).device == device


def test_the_cache_directory_follows_flag_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "env"))
    assert cache.cache_dir(tmp_path / "flag") == tmp_path / "flag"
    assert cache.cache_dir() == tmp_path / "env"
    monkeypatch.delenv("TUNER_CACHE_DIR")
    assert cache.cache_dir().name == "tuner"


def test_a_leading_tilde_that_no_shell_expanded_is_the_home_directory(tmp_path, monkeypatch):
    from tuner.kernel import kernel_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TUNER_CACHE_DIR", "~/env")
    monkeypatch.setenv("TUNER_KERNEL_DIR", "~/kernels")
    assert cache.cache_dir("~/flag") == tmp_path / "flag" and cache.cache_dir() == tmp_path / "env"
    assert kernel_dir() == tmp_path / "kernels"


@pytest.mark.parametrize("value, said", [(" ", "is blank: give a path"), ("\t", "is blank: give a path"),
                                         (" {}", "starts or ends with whitespace"), ("{} ", "starts or ends with "
                                         "whitespace"), ("{}\n", "starts or ends with whitespace")])
@pytest.mark.parametrize("setting", ["TUNER_CACHE_DIR", "TUNER_KERNEL_DIR"])
def test_a_directory_variable_blank_or_padded_with_whitespace_is_refused_not_made_in_another_folder(
        tmp_path, monkeypatch, capsys, setting, value, said):
    """An environment file's stray space (TUNER_CACHE_DIR= , or a path with a space after it) would
    name a folder ' ' in the current directory, or '<path> ': each command and tuner.matmul refuse
    it in one line naming the variable, and create nothing."""
    from tuner.cli import main
    from tuner.kernel import kernel_dir

    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(setting, value.format(tmp_path / "meant"))
    with pytest.raises(ValueError, match=f"^{setting}=.* {said}.*, or unset {setting}$"):
        cache.cache_dir() if setting == "TUNER_CACHE_DIR" else kernel_dir()
    for command in ([["list"]] if setting == "TUNER_CACHE_DIR" else []) + [
            ["search", "--backend", "cuda", "--simulate", "--shape", "8", "8", "8", "--trials", "1"]]:
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tuner {command[0]}: error: {setting}=") and said in err and err.count("\n") == 1, err
    with pytest.raises(ValueError, match=f"^{setting}="):
        tuner.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    assert list((tmp_path / "here").iterdir()) == []
    assert not [path for path in tmp_path.iterdir() if "meant" in path.name]


def test_relative_cache_and_kernel_directories_stay_where_first_used_when_the_program_changes_directory(
        tmp_path, monkeypatch):
    """A relative TUNER_CACHE_DIR or TUNER_KERNEL_DIR is taken from the working directory where tuner
    first uses it: a program's later os.chdir neither moves its records (which would re-tune) nor
    its kernel files; a relative cache_dir= argument is taken from the directory of its call."""
    from tuner import disk
    from tuner.kernel import kernel_dir

    monkeypatch.setattr(disk, "_settings", {}, raising=False)  # as in a new process
    for folder in ("first", "later"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "first")
    monkeypatch.setenv("TUNER_CACHE_DIR", "cache")
    monkeypatch.delenv("TUNER_KERNEL_DIR", raising=False)
    tuner.reload()
    ones = np.ones((2, 2), np.float32)
    with pytest.warns(tuner.UntunedWarning):
        tuner.matmul(ones, ones)
        monkeypatch.chdir(tmp_path / "later")
        tuner.reload()
        tuner.matmul(ones.astype(np.float64), ones.astype(np.float64))
    assert len(list((tmp_path / "first" / "cache" / "kernels").glob("*.py"))) == 2
    assert cache.cache_dir() == tmp_path / "first" / "cache"
    monkeypatch.setenv("TUNER_KERNEL_DIR", "kernels")
    assert kernel_dir() == tmp_path / "later" / "kernels"
    monkeypatch.chdir(tmp_path)
    assert kernel_dir() == tmp_path / "later" / "kernels"
    assert cache.cache_dir("mine") == tmp_path / "mine"
    assert not list((tmp_path / "later").iterdir())
    tuner.reload()


@pytest.fixture
def homeless(monkeypatch):
    """As in a container run under a user id the password database lacks, with HOME unset: no home
    directory to be found (platformdirs then raises RuntimeError)."""
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("HOME", "XDG_CACHE_HOME", "TUNER_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    cache._user_cache_dir.cache_clear()
    yield
    cache._user_cache_dir.cache_clear()


@pytest.mark.parametrize("platformdirs_version", ["current", "older"])
def test_without_a_home_directory_the_cache_asks_for_one_in_one_line(homeless, tmp_path, monkeypatch, capsys,
                                                                      platformdirs_version):
    """The user cache directory cannot be found: every command that uses the cache says to set
    TUNER_CACHE_DIR or HOME in one line, and tuner.matmul raises that ValueError, not platformdirs'
    RuntimeError with its traceback, nor, with an older platformdirs that leaves the ~ it could not
    expand, a cache in a folder '~' of the current directory; a TUNER_CACHE_DIR is used without any home."""
    import platformdirs

    from tuner.cli import main

    if platformdirs_version == "older":  # os.path.expanduser, which leaves ~ where no home is found
        monkeypatch.setattr(platformdirs, "user_cache_dir", lambda name: os.path.expanduser(f"~/.cache/{name}"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="^no home directory to hold the cache .*: set TUNER_CACHE_DIR"):
        cache.cache_dir()
    tuner.reload()
    with pytest.raises(ValueError, match="^no home directory to hold the cache "):
        tuner.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    for command in (["list"], ["report"], ["search", "--backend", "cuda", "--simulate", "--trials", "1"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tuner {command[0]}: error: no home directory to hold the cache (") and \
            err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    assert cache.cache_dir() == tmp_path


@pytest.mark.parametrize("platformdirs_version", ["current", "older"])
def test_a_relative_xdg_cache_home_is_ignored_whatever_platformdirs_version(tmp_path, monkeypatch,
                                                                           platformdirs_version):
    """The XDG specification says to ignore a relative $XDG_CACHE_HOME, as platformdirs does since
    4.11.8; with an older one, which takes it, the cache is still ~/.cache/tuner, not a refusal
    saying there is no home directory, nor a folder of the current directory."""
    import platformdirs

    def older(name):  # platformdirs before 4.11.8, on Linux
        return os.path.join(os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache"), name)

    if platformdirs_version == "older":
        monkeypatch.setattr(platformdirs, "user_cache_dir", older)
    monkeypatch.delenv("TUNER_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    cache._user_cache_dir.cache_clear()
    try:
        assert cache.cache_dir() == tmp_path / "home" / ".cache" / "tuner"
    finally:
        cache._user_cache_dir.cache_clear()


WRITERS, ENTRIES = 8, 50
SHARED = Problem(7, 7, 7)  # a record every writer writes into


def _write_many(root, writer: int, start) -> None:
    """Write ENTRIES records of their own, and each also over one record they all share."""
    start.wait()
    shared = cache.record_path(root, H100.slug, SHARED.key)
    for entry in range(ENTRIES):
        problem = Problem(8 + writer, 8 + entry, 8)
        gflops = 1.0 + writer * ENTRIES + entry
        cache.write_record(cache.record_path(root, H100.slug, problem.key),
                           make_record(H100, problem, [(CONFIGS[entry % 8], gflops)]))
        cache.write_record(shared, make_record(H100, SHARED, [(CONFIGS[writer], gflops)]))


def test_eight_processes_writing_at_once_lose_no_record(tmp_path):
    run_at_once(_write_many, [(tmp_path, writer) for writer in range(WRITERS)])
    records = {path.name: cache.read_record(path) for path in cache.record_paths(tmp_path)}
    assert len(records) == WRITERS * ENTRIES + 1
    for writer in range(WRITERS):
        for entry in range(ENTRIES):
            record = records[f"{Problem(8 + writer, 8 + entry, 8).key}.json"]
            assert record.best.measurement.gflops == 1.0 + writer * ENTRIES + entry
    shared = records[f"{SHARED.key}.json"]  # one writer's whole record, the last one's
    assert shared in [make_record(H100, SHARED, [(CONFIGS[writer], 1.0 + writer * ENTRIES + ENTRIES - 1)])
                      for writer in range(WRITERS)]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_cache_directory_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    from tuner.cli import main

    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["list", "--cache-dir", str(a_file)]) == 2
    assert f"--cache-dir {a_file} is not a directory" in capsys.readouterr().err
    monkeypatch.setenv("TUNER_CACHE_DIR", str(a_file))
    with pytest.raises(ValueError, match=f"TUNER_CACHE_DIR={a_file} is not a directory"):
        cache.cache_dir()


def test_the_shipped_records_are_readable_measured_on_a_gpu_and_filed_under_their_device():
    from importlib.resources import files
    from pathlib import Path

    from tuner.record import file_stem

    shipped = Path(str(files("tuner.shipped_cache")))  # the real folder: the test process hides it elsewhere
    paths = list(cache.record_paths(shipped))
    assert paths, "cache/records ships no record"
    for path in paths:
        found = cache.read_record(path)
        assert not found.device.simulated and path.parent.name == found.device.slug
        assert path.stem == file_stem(found.problem)


def test_a_gpus_rate_is_printed_in_whole_gflops_not_in_exponent_form(tmp_path, capsys):
    from tuner.cli import main

    problem = Problem(4096, 4096, 4096)
    cache.write_record(cache.record_path(tmp_path, H100.slug, problem.key),
                       make_record(H100, problem, [(CONFIGS[0], 30912.4), (CONFIGS[1], 950.5), (CONFIGS[2], 12.345)]))
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert f"{H100.slug}/float32-4096x4096x4096  30,912 GFLOP/s" in capsys.readouterr().out
    assert main(["show", f"{H100.slug}/float32-4096x4096x4096", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "best: 30,912 GFLOP/s, 46.2% of peak" in out
    assert "runner-up: 950 GFLOP/s" in out and "runner-up: 12.3 GFLOP/s" in out
    assert "\nmatmul float32-4096x4096x4096; times are " in out and "{" not in out  # no Python dicts
    assert "\nbudget: 3 trials, 3 measured (0 failed), 0 invalid, 0 repeated suggestions, " in out


def test_list_and_show_say_which_configuration_tuner_matmul_runs_where_the_best_breaks_a_rule(tmp_path, capsys):
    """As by a hand edit, or a rule added since: list gave the best's rate and show the best without remark."""
    from tuner.cli import main

    too_many_threads = Config(block_m=128, block_n=128, thread_m=1, thread_n=1)
    rule = Space.of(CUDA, "float32").broken_rules(too_many_threads)[0]
    problem, none_valid = Problem(64, 64, 64), Problem(32, 32, 32)
    for shape, ranked in ((problem, [(too_many_threads, 3000.0), (CONFIGS[0], 2000.0)]),
                          (none_valid, [(too_many_threads, 3000.0)])):
        cache.write_record(cache.record_path(tmp_path, H100.slug, shape.key), make_record(H100, shape, ranked))
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    unusable, served = capsys.readouterr().out.splitlines()
    assert served.startswith(f"{H100.slug}/float32-64x64x64  2,000 GFLOP/s  2 measured  ")
    assert served.endswith(f"  [user]  newest, runner-up 1 serves (its best breaks a rule: {rule})")
    assert unusable.endswith(f"  [user]  unusable: every configuration breaks a rule (its best: {rule}); "
                             "tuner regenerate re-tunes it")
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    unusable, served = json.loads(capsys.readouterr().out)
    assert (served["status"], served["best_breaks"], served["serves"]) == (
        "newest", rule, {"rank": 1, "config": CONFIGS[0].as_dict(), "gflops": 2000.0})
    assert (unusable["status"], unusable["serves"]) == ("unusable", None)
    assert main(["show", f"{H100.slug}/float32-64x64x64", "--cache-dir", str(tmp_path)]) == 0
    assert f"\n  not run: it breaks a rule of this version's space ({rule}); tuner.matmul runs runner-up 1\n" in (
        capsys.readouterr().out)


def test_show_names_the_precision_whose_peak_is_unknown(tmp_path, capsys):
    from tuner.cli import main

    problem = Problem(64, 64, 64, "tf32")
    cache.write_record(cache.record_path(tmp_path, H100.slug, problem.key),
                       make_record(H100, problem, [(Space.of(CUDA, "tf32").default(), 1000.0)]))
    assert main(["show", f"{H100.slug}/{problem.key}", "--cache-dir", str(tmp_path)]) == 0
    assert "best: 1,000 GFLOP/s, no tf32 peak known for this device, median" in capsys.readouterr().out


@pytest.mark.parametrize("device, shape, gflops, shown", [
    (H100, 64, 1000.0, "0.0005243 ms"),  # a GPU's microseconds, not 0.001 ms
    (H100, 4096, 30912.4, "4.446 ms"),
    (describe_simulator("cuda"), 32, 5e-6, "13,107 ms"),  # simulated seconds, not 13107.200 ms or 1.311e+04 ms
])
def test_a_time_is_printed_in_ms_to_four_significant_digits(tmp_path, capsys, device, shape, gflops, shown):
    from tuner.cli import main

    problem = Problem(shape, shape, shape)
    cache.write_record(cache.record_path(tmp_path, device.slug, problem.key),
                       make_record(device, problem, [(CONFIGS[0], gflops)]))
    assert main(["show", f"{device.slug}/{problem.key}", "--cache-dir", str(tmp_path)]) == 0
    assert f", median {shown} over 10 runs" in capsys.readouterr().out


def test_show_says_one_multiprocessor_and_one_run_in_the_singular(tmp_path, capsys):
    from tuner.cli import main

    problem, device = Problem(64, 64, 64), dataclasses.replace(H100, multiprocessors=1)
    made = make_record(device, problem, [(CONFIGS[0], 1000.0)])
    [best] = made.ranked
    made = dataclasses.replace(made, ranked=(dataclasses.replace(
        best, measurement=dataclasses.replace(best.measurement, reps=1)),))
    cache.write_record(cache.record_path(tmp_path, device.slug, problem.key), made)
    assert main(["show", f"{device.slug}/{problem.key}", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(sm_90, 1 multiprocessor)," in out and " over 1 run\n" in out


def test_show_counts_the_simulators_host_cores_as_such(tmp_path, capsys):
    from tuner.cli import main

    problem, device = Problem(16, 16, 16), describe_simulator("cuda")
    cache.write_record(cache.record_path(tmp_path, device.slug, problem.key),
                       make_record(device, problem, [(CONFIGS[0], 1.0)]))
    assert main(["show", f"{device.slug}/{problem.key}", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"(simulator, {counted(device.multiprocessors, 'host core')})," in out
    assert " s compiling (or loading), counting, verifying and timing; searched " in out


def test_show_says_that_a_shipped_records_study_is_on_the_machine_that_measured_it(tmp_path, capsys, monkeypatch):
    from tuner.cli import main

    problem = Problem(64, 64, 64)
    for root in (tmp_path / "shipped", tmp_path / "user"):
        cache.write_record(cache.record_path(root, H100.slug, problem.key),
                           make_record(H100, problem, [(CONFIGS[0], 1000.0)]))
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: tmp_path / "shipped")
    assert main(["show", f"{H100.slug}/float32-64x64x64", "--cache-dir", str(tmp_path / "empty")]) == 0
    assert "in test on the machine that measured it (this record ships with tuner" in capsys.readouterr().out
    assert main(["show", f"{H100.slug}/float32-64x64x64", "--cache-dir", str(tmp_path / "user")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("study: test in test")


def test_show_given_a_part_that_a_shipped_record_and_one_of_yours_share_shows_yours(tmp_path, capsys, monkeypatch):
    from tuner.cli import main

    problem, yours = Problem(64, 64, 64), dataclasses.replace(H100, name="NVIDIA A100-SXM4-80GB", arch="sm_80")
    cache.write_record(cache.record_path(tmp_path / "shipped", H100.slug, problem.key),
                       make_record(H100, problem, [(CONFIGS[0], 1000.0)]))
    cache.write_record(cache.record_path(tmp_path / "user", yours.slug, problem.key),
                       make_record(yours, problem, [(CONFIGS[0], 500.0)]))
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: tmp_path / "shipped")
    assert main(["show", "float32-64x64x64", "--cache-dir", str(tmp_path / "user")]) == 0
    assert capsys.readouterr().out.startswith("NVIDIA A100-SXM4-80GB")


def test_list_and_show_take_the_users_record_before_a_newer_shipped_one_of_its_fingerprint(tmp_path, capsys,
                                                                                            monkeypatch):
    """Only a record of another fingerprint supersedes one: the user's was 'superseded by' its own fingerprint."""
    from tuner.cli import main

    device, problem = describe_simulator("cuda"), Problem(16, 16, 16)
    for root, month in ((tmp_path / "user", 1), (tmp_path / "shipped", 2)):
        cache.write_record(cache.record_path(root, device.slug, problem.key), make_record(
            device, problem, [(CONFIGS[0], 1.0)], finished=f"2026-0{month}-01T00:00:00+00:00"))
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: tmp_path / "shipped")
    assert main(["list", "--cache-dir", str(tmp_path / "user")]) == 0
    assert [line.split("]  ")[1] for line in capsys.readouterr().out.splitlines()] == [
        "newest", "shadowed by your record of the same id"]
    assert main(["show", f"{device.slug}/{problem.key}", "--cache-dir", str(tmp_path / "user")]) == 0
    out, err = capsys.readouterr()
    assert " to 2026-01-01T00:00:00+00:00\n" in out and err == ""


def test_list_and_show_take_the_latest_moment_as_the_newest_not_the_greatest_string(tmp_path, capsys):
    """Times with another offset, or none (taken as UTC), as a hand edit may leave them."""
    from tuner.cli import main

    problem, newest = Problem(16, 16, 16), dataclasses.replace(H100, driver="newer")
    for device, finished in ((H100, "2026-03-01T01:00:00+05:00"), (newest, "2026-02-28T22:00:00")):
        cache.write_record(cache.record_path(tmp_path, device.slug, problem.key), dataclasses.replace(
            make_record(device, problem, [(CONFIGS[0], 1.0)]), finished=finished))
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    assert {row["fingerprint"]: row["status"] for row in json.loads(capsys.readouterr().out)} == {
        newest.fingerprint: "newest", H100.fingerprint: "superseded"}
    assert main(["show", problem.key, "--cache-dir", str(tmp_path)]) == 0
    assert f"fingerprint {newest.fingerprint};" in capsys.readouterr().out


def test_list_calls_a_record_newest_not_current_since_what_tuner_matmul_takes_depends_on_the_machine(
        cache_dir, capsys):
    """tuner list opens no device. Here (the simulator) tuner.matmul takes, for 32x32x32, this
    fingerprint's older record of 16x16x16 over the newer one of 32x32x32 made under other software;
    list called both "current"."""
    from tuner.cli import main

    here = describe_simulator("cuda")
    elsewhere, small, large = dataclasses.replace(here, driver="newer"), Problem(16, 16, 16), Problem(32, 32, 32)
    config = Config(block_m=16, block_n=16, thread_m=4, thread_n=2)
    ours = cache.record_path(cache_dir, here.slug, small.key)
    cache.write_record(ours, make_record(here, small, [(config, 1.0)], finished="2026-01-01T00:00:00+00:00"))
    cache.write_record(cache.record_path(cache_dir, elsewhere.slug, large.key),
                       make_record(elsewhere, large, [(config, 1.0)], finished="2026-02-01T00:00:00+00:00"))
    assert tuner.get_kernel(32, 32, 32).record == ours
    assert main(["list"]) == 0
    assert [line.split("]  ")[1] for line in capsys.readouterr().out.splitlines()] == ["newest", "newest"]
    assert main(["list", "--json"]) == 0
    assert {row["problem"]["m"]: row["status"] for row in json.loads(capsys.readouterr().out)} == {
        16: "newest", 32: "newest"}


def test_a_record_file_whose_name_holds_a_non_printing_character_is_named_without_it(tmp_path, capsys):
    """Another user of a shared cache picks the file's name too: skipped, it is named as a terminal
    can show it (here by tuner list; tuner report and regenerate name it the same way)."""
    from tuner.cli import main

    path = tmp_path / "records" / "cuda-x-0123456789abcdef" / "x\x1b[2Jall good\n.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    main(["list", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert f"tuner: skipping {path.parent}/x\ufffd[2Jall good\ufffd.json: " in err and "\x1b" not in err, err


def test_a_rewritten_record_keeps_the_mode_its_owner_gave_it(tmp_path):
    """A record its owner let others read (chmod a+r, in a shared cache) stays readable to them when a
    search rewrites it, and to its owner whatever its mode was; a new record is its writer's alone."""
    path = cache.record_path(tmp_path, H100.slug, Problem(8, 8, 8).key)
    _write(path, 100.0, 0)
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    _write(path, 200.0, 1)
    assert path.stat().st_mode & 0o777 == 0o644 and cache.read_record(path).best.measurement.gflops == 200.0
    path.chmod(0o240)  # one its owner may not read: the rewrite gives it back to them
    _write(path, 300.0, 2)
    assert path.stat().st_mode & 0o777 == 0o640 and cache.read_record(path).best.measurement.gflops == 300.0


def _listed(root) -> tuple[list[str], int, str]:
    """Catalog.read's skipped reasons, and tuner list's exit status and stderr, in this process."""
    from tuner.cli import main

    skipped = [str(error) for error in cache.Catalog.read(root).skipped]
    with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
        status = main(["list", "--cache-dir", str(root)])
    return skipped, status, err.getvalue()


@pytest.mark.parametrize("unreadable", ["file", "device folder", "device folder it may list", "records folder",
                                        "cache folder"])
def test_records_another_user_may_not_read_are_named_with_who_can_open_them_not_passed_over_or_to_be_deleted(
        reachable, unreadable):
    """In a shared cache a record, or a folder of them, may be another user's (mode 600, 700): it
    is skipped in one line naming it and what to do (its owner's chmod, or a cache of one's own),
    never passed over in silence, nor called damaged with the advice to delete it; tuner list
    still lists the rest. Run where modes bind (processes.where_permissions_bind)."""
    root = reachable / "cache"
    path = cache.record_path(root, H100.slug, Problem(8, 8, 8).key)
    _write(path, 100.0, 0)
    for folder in (root, root / "records", path.parent):
        folder.chmod(0o755)
    assert _listed(root) == ([], 0, "")  # readable: and what the child runs is imported
    blocked = {"file": path, "device folder": path.parent, "device folder it may list": path.parent,
               "records folder": root / "records", "cache folder": root}[unreadable]
    blocked.chmod(0o744 if unreadable == "device folder it may list" else 0)
    skipped, status, err = where_permissions_bind(_listed, root)
    named = {"file": f"{path}: you may not read it", "device folder": f"{path.parent}/*.json: you may not read "
             f"the folder {path.parent}", "device folder it may list": f"{path}: you may not read the folder "
             f"{path.parent}", "records folder": f"{root / 'records'}/*/*.json: you may not read the "
             f"folder {root / 'records'}", "cache folder": f"{root / 'records'}/*/*.json: you may not read the "
             f"folder {root}"}[unreadable]
    assert [reason.split(" (")[0] for reason in skipped] == [named], skipped
    assert f"its owner can let you (chmod {'a+r' if unreadable == 'file' else 'a+rX'})" in skipped[0]
    assert "delete" not in skipped[0]
    assert status == 0 and err == f"tuner: skipping {skipped[0]}\n"


def test_hidden_names_in_the_records_folder_are_not_records(tmp_path):
    """As a glob leaves them: an editor's or a file manager's hidden files (macOS's ._name.json)
    and hidden folders there are not read as records, nor skipped with a line each."""
    path = cache.record_path(tmp_path, H100.slug, Problem(8, 8, 8).key)
    _write(path, 100.0, 0)
    (path.parent / f"._{path.name}").write_bytes(b"\x00\x05\x16\x07")
    (tmp_path / "records" / ".trash").mkdir()
    (tmp_path / "records" / ".trash" / path.name).write_text("{}")
    assert cache.record_paths(tmp_path) == [path]


def test_a_folder_of_records_that_cannot_be_listed_for_another_reason_is_not_blamed_on_permissions(tmp_path):
    """A loop of symbolic links where a device's folder should be is unreadable, said in one line,
    not a folder its owner should chmod."""
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "loop").symlink_to("loop")
    [skipped] = [str(error) for error in cache.Catalog.read(tmp_path).skipped]
    assert skipped.startswith(f"{tmp_path / 'records' / 'loop' / '*.json'}: unreadable (OSError: ") and \
        "chmod" not in skipped, skipped
