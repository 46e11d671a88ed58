"""Compiling ahead: worker processes compile the next variants (to PTX here, as there is no GPU)
while the search measures; a crashed, hung or failing worker fails its variant alone, and a
pooled search measures exactly its budget, each configuration once, losing no trial."""
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from processes import answers_ctrl_c, running_with

from tuner import cache, compile_ahead
from tuner.backends import CUDA
from tuner.compile_ahead import CompilePool
from tuner.config import Config
from tuner.launch import python_module
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.search import Search
from tuner.stopping import PARENT
from tuner.trials import config_key

SMALL = Config(block_m=32, block_n=32, thread_m=2, thread_n=2)


def _pool(tmp_path, workers=1, timeout=compile_ahead.TIMEOUT_SECONDS) -> CompilePool:
    return CompilePool("cuda", "float32", str(tmp_path / "kernels"), simulated=True, workers=workers, timeout=timeout)


def _worker_pids(pool: CompilePool) -> list[int]:
    return [worker.process.pid for worker in pool._busy]


def test_a_worker_compiles_to_ptx_and_runs_ptxas(tmp_path):
    with _pool(tmp_path) as pool:
        pool.submit("small", SMALL.as_dict())
        compiled = pool.result("small")
    assert compiled.error == "" and compiled.seconds > 0
    assert compiled.resources["registers"] > 0 and compiled.resources["spills"] is False


def test_a_variant_that_fails_to_compile_fails_alone(tmp_path):
    with _pool(tmp_path) as pool:
        pool.submit("bad", {**SMALL.as_dict(), "block_m": 24})
        pool.submit("good", SMALL.as_dict())
        assert "InvalidConfig: block_m=24" in pool.result("bad").error
        assert pool.result("good").error == ""


def test_a_worker_imports_this_tuner_not_one_planted_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "tuner").mkdir()
    (tmp_path / "tuner" / "__init__.py").write_text(f"open({str(tmp_path / 'planted-ran')!r}, 'w')\n")
    monkeypatch.chdir(tmp_path)
    with _pool(tmp_path) as pool:
        pool.submit("bad", {**SMALL.as_dict(), "block_m": 24})
        assert "InvalidConfig: block_m=24" in pool.result("bad").error
    assert not (tmp_path / "planted-ran").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers follow their parent through Linux's prctl")
def test_a_worker_whose_parent_died_before_it_could_follow_it_dies_of_sigterm_quietly(tmp_path):
    """As of the SIGTERM a parent's death sends it, which it leaves to the system (it raised
    Terminated instead: a traceback, exit status 1)."""
    # The value a parent gives its worker as it starts it, naming a process that is not its parent now.
    done = subprocess.run([*python_module("tuner.compile_ahead"), "cuda", "float32", str(tmp_path), "ptx", "matmul"],
                          env={**os.environ, PARENT: f"{os.getppid()}@{time.clock_gettime(time.CLOCK_BOOTTIME)}"},
                          stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr) == (-signal.SIGTERM, "")


@pytest.mark.parametrize("fault, reason", [(signal.SIGKILL, "the compile worker died (killed by SIGKILL, likely out "
                                                            "of memory)"),
                                           (signal.SIGSTOP, "compile timed out after 3 s")], ids=["crash", "hang"])
def test_a_crashed_or_hung_worker_fails_its_variant_and_is_replaced(tmp_path, fault, reason):
    with _pool(tmp_path, timeout=3) as pool:
        pool.submit("victim", SMALL.as_dict())
        [pid] = _worker_pids(pool)
        os.kill(pid, fault)
        assert pool.result("victim").error == reason
        pool.timeout = compile_ahead.TIMEOUT_SECONDS  # the replacement's start may take seconds on a loaded machine
        pool.submit("next", SMALL.as_dict())
        assert pool.result("next").error == "" and _worker_pids(pool) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the faulty worker is gone, not left stopped


def test_the_default_pool_shares_the_hosts_cores_between_devices(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(compile_ahead, "_memory_bytes", lambda: 128 << 30)
    assert compile_ahead.default_workers(1) == 15
    assert compile_ahead.default_workers(4) == 3  # 4 measuring processes and 12 compiling ones: 16 cores
    monkeypatch.setattr(compile_ahead, "_memory_bytes", lambda: 24 << 30)
    assert compile_ahead.default_workers(1) == 4  # half the memory, 3 GiB each
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert compile_ahead.default_workers(4) == 1


QUICK = [Config(block_m=m, block_n=n, thread_m=2, thread_n=2) for m, n in ((16, 16), (32, 16), (16, 32), (32, 32))]


def test_a_pooled_search_measures_its_budget_each_configuration_once(tmp_path):
    search = Search(open_runtime(CUDA, simulate=True), Problem(16, 16, 16), root=tmp_path)
    search.enqueue(QUICK)  # quick to compile, so that the test stays short; the sampler asks the rest
    outcome = search.run(trials=None, timeout=None, budget=4, compile_workers=2, warm=False)
    trials = search.study.trials
    measured = [t for t in trials if t.user_attrs.get("kind") == "measured"]
    assert outcome.spent and len(measured) == 4 and outcome.record.budget.measured == 4
    assert len({json.dumps(t.params, sort_keys=True) for t in measured}) == 4
    assert all(t.user_attrs["seconds"]["compile_ahead"] > 0 and "registers" in t.user_attrs["resources"]
               for t in measured)
    assert not [t for t in trials if t.state.name == "RUNNING"]  # asked ahead and unmeasured: failed, not lost
    assert len(outcome.intervals) == 4 and 0 < outcome.measuring_seconds < outcome.wall_seconds
    assert 0 < outcome.record.budget.measuring_seconds < outcome.wall_seconds  # not the time held ahead
    assert outcome.compile_workers == 2


def test_a_pooled_search_fails_the_variant_a_worker_could_not_compile_and_goes_on(tmp_path, monkeypatch):
    """A worker's error (here the one a worker killed mid-compile gives, faked) fails that variant as
    "compile" and costs one of the budget; the search measures the rest and loses no trial."""
    died = "the compile worker died (killed by SIGKILL, likely out of memory)"
    victim, result = config_key(QUICK[1].as_dict()), CompilePool.result
    monkeypatch.setattr(CompilePool, "result", lambda pool, key: compile_ahead.Compiled(seconds=0.5, error=died)
                        if key == victim else result(pool, key))
    search = Search(open_runtime(CUDA, simulate=True), Problem(16, 16, 16), root=tmp_path)
    search.enqueue(QUICK)
    outcome = search.run(trials=None, timeout=None, budget=4, compile_workers=2, warm=False)
    measured = [t for t in search.study.trials if t.user_attrs.get("kind") == "measured"]
    failed = [t.user_attrs["measurement"] for t in measured if t.user_attrs["measurement"]["status"] != "ok"]
    assert outcome.spent and len(measured) == 4 and outcome.failed == 1
    assert [(m["status"], m["reason"]) for m in failed] == [("compile", died)]
    assert not [t for t in search.study.trials if t.state.name == "RUNNING"]


def test_a_simulated_backend_that_cannot_compile_ahead_is_said_to_have_no_workers(tmp_path, capsys):
    """ROC source compiles only on an AMD GPU: the summary names no workers, and the first variant's
    wait (starting up) is told apart from the median of the others."""
    from tuner.cli import main

    assert main(["search", "--backend", "roc", "--simulate", "--shape", "16", "16", "16", "--trials", "2",
                 "--compile-workers", "2", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "throughput: 2 variants evaluated in" in out and ", the first after " in out
    assert ", then a median of " in out and "compile worker" not in out


def _compile_workers_of(root) -> list[int]:
    return running_with("tuner.compile_ahead", str(root / "kernels"))


def _pooled_search(root, trials: int, **popen) -> subprocess.Popen:
    """A `tuner search` process of `trials` with two compile workers, its cache and kernels under `root`."""
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16",
         "--trials", str(trials), "--compile-workers", "2", "--cache-dir", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "TUNER_KERNEL_DIR"}, **popen)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_a_pooled_search_and_its_workers(tmp_path):
    process = _pooled_search(tmp_path, 200, preexec_fn=answers_ctrl_c)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (list(cache.record_paths(tmp_path)) and _compile_workers_of(tmp_path)):
        time.sleep(0.1)
    assert _compile_workers_of(tmp_path)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert _compile_workers_of(tmp_path) == []
    trials = _study_trials(tmp_path)
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert [t for t in trials if t.user_attrs.get("kind") == "measured"]


def _study_trials(root) -> list:
    [journal] = (root / "studies").glob("*.journal")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    [name] = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage).trials


@pytest.mark.slow  # default run: test_a_crashed_or_hung_worker_fails_its_variant_and_is_replaced (the pool's side),
# test_a_pooled_search_fails_the_variant_a_worker_could_not_compile_and_goes_on (the search's)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_pooled_search_survives_a_killed_compile_worker(tmp_path):
    process = _pooled_search(tmp_path, 4)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(cache.record_paths(tmp_path)):
        time.sleep(0.05)
    os.kill(_compile_workers_of(tmp_path)[0], signal.SIGKILL)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    trials = _study_trials(tmp_path)
    measured = [t for t in trials if t.user_attrs.get("kind") == "measured"]
    assert len(measured) == 4 == len({json.dumps(t.params, sort_keys=True) for t in measured})
    assert not [t for t in trials if t.state.name == "RUNNING"]
    reasons = [t.user_attrs["measurement"]["reason"] for t in measured if t.user_attrs["measurement"]["status"] != "ok"]
    assert all(reason.startswith("the compile worker died") for reason in reasons)


def test_a_failure_that_is_not_the_variants_stops_the_search(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with CompilePool("cuda", "float32", str(blocker / "kernels"), simulated=True, workers=1) as pool:
        pool.submit("any", SMALL.as_dict())
        compiled = pool.result("any")
    assert compiled.fatal.startswith(f"cannot create the kernel directory {blocker / 'kernels'}") and not compiled.error
    with pytest.raises(KeyError, match="never submitted"):
        pool.result("other")


def test_a_ptxas_that_cannot_run_costs_a_worker_its_count_not_the_search(tmp_path, monkeypatch):
    """A ptxas file that is no program here (not executable, another machine's) is no ptxas: the
    worker makes the PTX alone, as without one, rather than failing the search as the disk would."""
    planted = tmp_path / "site" / "nvidia" / "cu99" / "bin" / "ptxas"  # newer than the wheel's: ptxas_path's pick
    planted.parent.mkdir(parents=True)
    planted.write_text("not a program")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"), prepend=os.pathsep)
    with _pool(tmp_path) as pool:
        pool.submit("small", SMALL.as_dict())
        compiled = pool.result("small")
    assert compiled.fatal == "" and compiled.error == "" and compiled.resources is None


def test_a_worker_killed_while_counting_leaves_no_folder_in_the_systems_temporary_folder(tmp_path, monkeypatch):
    """Not in the system's temporary folder, which nothing of tuner's cleans, but in the kernel
    directory's scratch/, where the next count removes it once stale (disk.scratch_folder)."""
    system_tmp, scratch = tmp_path / "tmp", tmp_path / "kernels" / "scratch"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    with _pool(tmp_path) as pool:
        pool.submit("small", SMALL.as_dict())
        deadline = time.monotonic() + 120
        while not (list(system_tmp.iterdir()) or scratch.is_dir() and list(scratch.iterdir())):
            assert time.monotonic() < deadline, "the worker never started counting"
            time.sleep(0.05)
    assert list(system_tmp.iterdir()) == [] and len(list(scratch.iterdir())) == 1


def test_a_pooled_search_refuses_an_unsafe_kernel_directory_before_measuring(tmp_path, monkeypatch):
    unsafe = tmp_path / "kernels"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    monkeypatch.setenv("TUNER_KERNEL_DIR", str(unsafe))
    search = Search(open_runtime(CUDA, simulate=True), Problem(16, 16, 16), root=tmp_path)
    with pytest.raises(OSError, match="can be written by other users"):
        search.run(trials=None, timeout=None, budget=2, compile_workers=1)
    assert not [t for t in search.study.trials if t.state.name == "RUNNING"]


def test_a_pooled_search_takes_each_ceiling_from_the_worker_that_compiled_it(tmp_path):
    """The static count is made beside the compile, in the worker, never in the measuring process."""
    from tuner.ceiling import Ceilings
    from tuner.resources import CountUnavailable, ptxas_path
    from tuner.sass import NoDisassembler, nvdisasm_beside

    try:
        nvdisasm_beside(ptxas_path())
    except (CountUnavailable, NoDisassembler) as missing:
        pytest.skip(f"no ptxas with nvdisasm beside it, so no ceiling can be counted: {missing}")
    counted_here = []
    search = Search(open_runtime(CUDA, simulate=True), Problem(16, 16, 16), root=tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", counted_here.append)
    search.enqueue(QUICK)
    search.run(trials=None, timeout=None, budget=2, compile_workers=2, warm=False)
    measured = [t for t in search.study.trials if t.user_attrs.get("kind") == "measured"]
    assert len(measured) == 2 and counted_here == []
    assert all(t.user_attrs["ceiling"] == t.user_attrs["resources"]["fma_fraction"] > 0 for t in measured)


def test_a_counting_worker_compiles_into_the_cache_then_counts_and_a_failed_count_fails_nothing(tmp_path, monkeypatch):
    """Mode "count" (a GPU host where the search prunes by ceilings): Numba's compile, then the
    static report of the kernel it compiled (from its IR); a count that fails leaves the variant to
    be measured, unpruned."""
    from types import SimpleNamespace

    from tuner import kernel, resources

    compiled = []
    monkeypatch.setattr(kernel, "load", lambda space, config, directory: SimpleNamespace(
        compile=lambda: compiled.append(config) or f"kernel {len(compiled)}"))
    counted = []
    monkeypatch.setattr(resources, "count", lambda space, config, directory, compiled: SimpleNamespace(
        as_dict=lambda: counted.append(compiled) or {"fma_fraction": 0.5}))

    def job(mode):
        return compile_ahead._compile("cuda", "float32", str(tmp_path), mode, "matmul", SMALL.as_dict())

    assert job("count") == {"seconds": pytest.approx(0, abs=5), "resources": {"fma_fraction": 0.5}}
    assert counted == ["kernel 1"]
    assert job("cache")["resources"] is None and compiled == [SMALL, SMALL]

    def fails(space, config, directory, compiled):
        raise subprocess.CalledProcessError(1, "nvdisasm")

    monkeypatch.setattr(resources, "count", fails)
    answer = job("count")
    assert answer["resources"] is None and "error" not in answer and len(compiled) == 3

    started = []
    monkeypatch.setattr(compile_ahead.subprocess, "Popen", lambda args, **options: started.append(args))
    CompilePool("cuda", "float32", str(tmp_path), simulated=False, workers=1, counts=True)._start()
    assert started[0][-2] == "count"


def test_with_no_compile_worker_the_search_counts_as_a_worker_does_in_its_kernel_directory(tmp_path, monkeypatch):
    """The measuring process compiles the kernel into the search's kernel directory and counts what
    Numba compiled (measuring it then takes it from memory): one compile, not a count's
    compile and the measurement's. A kernel that does not compile has no ceiling (none kept), so it
    is measured and fails with the reason, rather than stopping the search; the disk stops it."""
    from types import SimpleNamespace

    from tuner import kernel, resources, sass
    from tuner.ceiling import Ceilings
    from tuner.space import Space

    monkeypatch.delenv("TUNER_KERNEL_DIR", raising=False)
    monkeypatch.setattr(resources, "ptxas_path", lambda: "ptxas")
    monkeypatch.setattr(sass, "nvdisasm_beside", lambda ptxas: "nvdisasm")
    builds, counted = [], []
    outcomes = iter(["the kernel", RuntimeError("NVVM_ERROR_COMPILATION"), OSError(28, "No space left on device")])

    def compile_next():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(kernel, "load", lambda space, config, directory: builds.append(directory) or SimpleNamespace(
        compile=compile_next))
    monkeypatch.setattr(resources, "count", lambda space, config, directory, compiled: counted.append(
        (directory, compiled)) or SimpleNamespace(as_dict=lambda: {"fma_fraction": 0.5}))
    ceilings = Ceilings.where_countable(SimpleNamespace(simulated=False), Space.of(CUDA, "float32"), tmp_path)
    assert ceilings.of(QUICK[0]) == 0.5
    assert builds == [tmp_path / "kernels"] and counted == [(tmp_path / "kernels", "the kernel")]
    assert ceilings.of(QUICK[1]) is None and len(counted) == 1  # NVVM refused it: no ceiling, and none kept,
    assert config_key(QUICK[1].as_dict()) not in ceilings.known  # as the failure may pass
    with pytest.raises(OSError, match="No space left"):
        ceilings.of(QUICK[2])
