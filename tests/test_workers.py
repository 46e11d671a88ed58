"""Several workers on one study, on the simulator: through a real PostgreSQL server and through the
default journal file; a worker killed mid-trial; the shared budget, claims and the one cache record;
`--devices`, its pinning, its Ctrl-C and its mistakes."""
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

import optuna
import pytest
from processes import answers_ctrl_c, running_with

from tuner import cache
from tuner.backends import CUDA, ROC
from tuner.cli import build_parser, main
from tuner.cli import search as search_command
from tuner.cli.search import worker_command
from tuner.launch import python_module
from tuner.runtime import NoGPU
from tuner.stopping import PARENT, Terminated, shielded
from tuner.workers import pinned_environment, run_workers

SMALL = ["--shape", "16", "16", "16"]
BUDGET = 8
HEARTBEAT = 2  # seconds; a killed worker's trial is retried after 4 silent intervals


def _worker(root, seed: int, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL, "--trials", str(BUDGET),
         "--seed", str(seed), "--heartbeat", str(HEARTBEAT), "--cache-dir", str(root), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "TQDM_DISABLE": "1"})


def _study(root, url: str | None) -> optuna.Study | None:
    """The workers' study, once one of them has created it."""
    if url:
        storage = optuna.storages.RDBStorage(url)
    else:
        journals = list((root / "studies").glob("*.journal"))
        if not journals:
            return None
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journals[0])))
    names = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=names[0], storage=storage) if names else None


def _kill_one_mid_trial(root, url, workers) -> tuple[subprocess.Popen, int]:
    """SIGKILL the first worker seen measuring (a running trial holding a claim): it and its trial."""
    pids = {str(worker.pid): worker for worker in workers}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        study = _study(root, url)
        for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)) if study else []:
            pid = trial.user_attrs.get("worker", "").partition(":")[2]
            if "claim" in trial.user_attrs and pid in pids:
                os.kill(int(pid), signal.SIGKILL)
                pids[pid].communicate(timeout=60)
                return pids[pid], trial.number
        time.sleep(0.05)
    raise AssertionError("no worker was seen measuring: " + str([w.communicate(timeout=60) for w in workers]))


@pytest.mark.parametrize("storage", ["postgresql", "journal"])
def test_three_workers_share_one_study_and_survive_a_killed_one(tmp_path, request, storage):
    url = request.getfixturevalue("postgres_url") if storage == "postgresql" else None
    options = ["--storage", url, "--study", "shared"] if url else []
    workers = [_worker(tmp_path, seed, *options) for seed in range(3)]
    killed, trial_number = _kill_one_mid_trial(tmp_path, url, workers)
    for worker in workers:
        if worker is not killed:
            out, err = worker.communicate(timeout=600)
            assert worker.returncode == 0 and "Traceback" not in err, err

    study = _study(tmp_path, url)
    trials = study.get_trials()
    measured = [t for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("kind") == "measured"]
    # Within budget, completed, none measured twice, none left running.
    assert len(measured) == BUDGET
    assert len({json.dumps(t.params, sort_keys=True) for t in measured}) == BUDGET
    assert not [t for t in trials if t.state.name == "RUNNING"]
    # The killed worker's trial failed and was queued again with its configuration: answered, or left
    # queued for the study's next run where the others' trials filled the budget while it was being
    # found dead (a heartbeat's grace of 8 s, in which a loaded machine's workers may measure the rest).
    dead = trials[trial_number]
    assert dead.state.name == "FAIL"
    [retried] = [t for t in trials if t.system_attrs.get("failed_trial") == trial_number]
    assert retried.params == dead.params and retried.state.name in ("COMPLETE", "WAITING")
    assert retried.state.name == "WAITING" or retried.user_attrs["kind"] in ("measured", "duplicate")
    # Every worker that finished wrote the same record: one file, the study's best.
    [path] = cache.record_paths(tmp_path)
    record = cache.read_record(path)
    best = max((t for t in measured if t.user_attrs["measurement"]["status"] == "ok"), key=lambda t: t.value)
    assert record.best.trial == best.number and record.best.config.as_dict() == best.params
    assert record.budget.measured == BUDGET
    assert not list(path.parent.glob("*.tmp"))


def test_a_rerun_of_a_finished_study_measures_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                           "--trials", "1", "--cache-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    again = subprocess.run(done.args, capture_output=True, text=True)
    assert again.returncode == 0 and "this run: measured 0" in again.stdout
    assert "1 measured (its budget: 1)" in again.stdout


def test_devices_runs_one_pinned_worker_per_device_on_one_study(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                           "--trials", "6", "--devices", "0,1,2", "--cache-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert all(f"[cuda {device}] this run: measured" in done.stdout for device in range(3)), done.stdout
    measured = [t for t in _study(tmp_path, None).trials if t.user_attrs.get("kind") == "measured"]
    assert len(measured) == 6 and len({json.dumps(t.params, sort_keys=True) for t in measured}) == 6
    pinned = {t.user_attrs["pinned"] for t in _study(tmp_path, None).trials if "pinned" in t.user_attrs}
    assert pinned <= {f"CUDA_VISIBLE_DEVICES={device}" for device in range(3)} and len(pinned) >= 2
    assert len(list(cache.record_paths(tmp_path))) == 1


def test_devices_workers_import_this_tuner_not_one_planted_in_the_current_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "tuner").mkdir()
    (tmp_path / "tuner" / "__init__.py").write_text(f"open({str(tmp_path / 'planted-ran')!r}, 'w')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--devices", "0",
                 "--cache-dir", str(tmp_path / "cache")]) == 0, capsys.readouterr().err
    assert not (tmp_path / "planted-ran").exists()


def _closed_stdout() -> None:
    os.close(1)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("stdout, status, said", [
    ("full", 2, ["tuner search: error: cannot write the output to stdout: No space left on device; send it to a file "
                 "or pipe that can take it"]),
    ("closed", 0, []),
    ("reader left", 141, []),
])
def test_devices_workers_output_that_cannot_be_written_is_said_as_elsewhere(tmp_path, stdout, status, said):
    """The workers' lines are written by relay threads: a full stdout is one line and status 2, a
    closed one takes nothing, a reader that left is a quiet 141, as for any command; no thread's
    traceback."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "2",
                 "--devices", "0,1", "--cache-dir", str(tmp_path)], text=True, stderr=subprocess.PIPE, timeout=600,
                stdout={"full": full, "closed": None, "reader left": writer}[stdout],
                preexec_fn=_closed_stdout if stdout == "closed" else None)
    finally:
        os.close(writer)
    own = [line for line in done.stderr.splitlines() if not line.startswith("[cuda ")]  # not a worker's
    assert done.returncode == status, done.stderr
    assert own == ["tuner search: 2 workers started, pinned with CUDA_VISIBLE_DEVICES; Ctrl-C stops them all",
                   *said], done.stderr


@pytest.mark.parametrize("stop, stdout", [(signal.SIGINT, subprocess.PIPE), (signal.SIGTERM, subprocess.PIPE),
                                          (signal.SIGINT, "/dev/full")],
                         ids=["ctrl-c", "sigterm", "ctrl-c with the workers' summaries unwritable"])
def test_ctrl_c_stops_every_device_worker_cleanly(tmp_path, stop, stdout):
    parent = subprocess.Popen([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                               "--trials", "200", "--devices", "0,1", "--cache-dir", str(tmp_path)],
                              stdout=open(stdout, "w") if stdout == "/dev/full" else stdout, stderr=subprocess.PIPE,
                              text=True, preexec_fn=answers_ctrl_c)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        study = _study(tmp_path, None)
        if study and len({t.user_attrs.get("worker") for t in study.trials if t.user_attrs.get("kind")}) == 2:
            break  # both workers have told a trial
        time.sleep(0.1)
    parent.send_signal(stop)
    out, err = parent.communicate(timeout=120)
    expected = (130, "interrupted") if stop == signal.SIGINT else (143, "terminated (SIGTERM)")
    assert (parent.returncode, expected[1] in err, "Traceback" in err) == (expected[0], True, False), err
    trials = _study(tmp_path, None).trials
    assert not [t for t in trials if t.state.name == "RUNNING"]
    workers = {t.user_attrs["worker"].partition(":")[2] for t in trials if "worker" in t.user_attrs}
    assert len(workers) == 2 and not [pid for pid in workers if os.path.exists(f"/proc/{pid}")]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_as_the_workers_start_stops_each_of_them_cleanly(tmp_path, stop):
    # The parent's SIGINT reaches a worker still loading Python: it waits until the worker can stop
    # cleanly, not a traceback in the bootstrap or a KeyboardInterrupt the worker's main never sees.
    parent = subprocess.Popen([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                               "--trials", "200", "--devices", "0,1", "--cache-dir", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=answers_ctrl_c)
    deadline = time.monotonic() + 60
    while len(_workers_of(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.002)
    parent.send_signal(stop)
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == (130 if stop == signal.SIGINT else 143) and "Traceback" not in err, err
    assert all(f"[cuda {device}] tuner search: interrupted" in err for device in (0, 1)), err
    assert _workers_of(tmp_path) == []


@pytest.mark.parametrize("stop, status", [(KeyboardInterrupt, 130), (Terminated, 143)], ids=["ctrl-c", "sigterm"])
def test_a_stop_before_the_workers_start_starts_none(tmp_path, monkeypatch, stop, status):
    """One taken before the start is shielded: the next pass of the wait loop started them all."""
    def stopped_once():
        monkeypatch.setattr("tuner.workers.shielded", shielded)
        raise stop

    monkeypatch.setattr("tuner.workers.shielded", stopped_once)
    started = tmp_path / "started"
    command = [sys.executable, "-c", f"open({str(started)!r}, 'a').write('a worker ran\\n')"]
    assert run_workers(command, CUDA, [0, 1]) == status
    assert not started.exists()


@pytest.mark.parametrize("fails", ["process", "relay"])
def test_a_worker_that_cannot_start_stops_those_started_and_says_what_to_do(tmp_path, monkeypatch, capsys, fails):
    """The second worker's process (no room for one: EMFILE, EAGAIN) or its output's thread cannot
    start: each worker started is stopped as at Ctrl-C, and the parent says so in one line, status 2."""
    popen, start = subprocess.Popen, threading.Thread.start
    calls = []

    def failing_popen(*args, **kwargs):
        calls.append("process")
        if calls.count("process") == 2:
            raise OSError(errno.EMFILE, "Too many open files")
        return popen(*args, **kwargs)

    def failing_start(relay):
        calls.append("relay")
        if calls.count("relay") == 3:  # the second worker's first relay
            raise RuntimeError("can't start new thread")
        start(relay)

    if fails == "process":
        monkeypatch.setattr("tuner.workers.subprocess.Popen", failing_popen)
    else:
        monkeypatch.setattr("tuner.workers._Relay.start", failing_start)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        status = main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "50", "--devices", "0,1,2",
                       "--cache-dir", str(tmp_path)])
        out, err = capsys.readouterr()
        own = [line for line in err.splitlines() if not line.startswith("[cuda ")]
        error = "[Errno 24] Too many open files" if fails == "process" else "can't start new thread"
        assert (status, own) == (2, [f"tuner search: error: cannot start the worker on cuda 1 ({error}); stopped the "
                                     "1 started, completed trials are kept: run the same command again, or "
                                     "with fewer --devices"]), err
        assert "[cuda 0] tuner search: interrupted" in err and "Traceback" not in err, err
        assert _workers_of(tmp_path) == []
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        for pid in _workers_of(tmp_path):  # left running by a start that fails
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("devices, message", [
    ("x", "--devices takes GPU indices separated by commas, such as 0,1,2,3, not 'x'"),
    ("0,1,0", "--devices lists device 0 twice; give each GPU once"),
    ("0,-1", "not '0,-1'"),
    ("0,5", "there is no cuda GPU 5 here; this process sees 2 (0 to 1"),
])
def test_bad_devices_get_one_line(tmp_path, capsys, monkeypatch, devices, message):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")  # as on a GPU host
    monkeypatch.setattr("tuner.workers.driver_device_count", lambda backend: 2)
    status = main(["search", "--backend", "cuda", *SMALL, "--devices", devices, "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1, err


def test_devices_without_a_gpu_say_what_to_do(tmp_path, capsys, monkeypatch):
    def no_gpu(backend):
        raise NoGPU("no cuda driver found")

    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    monkeypatch.setattr("tuner.workers.driver_device_count", no_gpu)
    assert main(["search", "--backend", "cuda", "--devices", "0,1", "--cache-dir", str(tmp_path)]) == 2
    assert "no cuda GPU here (no cuda driver found); add --simulate" in capsys.readouterr().err


def test_simulated_devices_past_the_visible_list_get_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    status = main(["search", "--backend", "cuda", *SMALL, "--simulate", "--devices", "0,3",
                   "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "CUDA_VISIBLE_DEVICES=0 lists 1 device, numbered 0 to 0" in err and err.count("\n") == 1, err


def test_a_worker_is_pinned_within_the_devices_this_process_sees():
    assert pinned_environment(CUDA, 1, {})["CUDA_VISIBLE_DEVICES"] == "1"
    assert pinned_environment(CUDA, 1, {"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "6"
    assert pinned_environment(ROC, 0, {"HIP_VISIBLE_DEVICES": "3"})["HIP_VISIBLE_DEVICES"] == "3"


def test_a_worker_command_keeps_every_option_but_devices_and_hands_the_storage_over_unseen(monkeypatch):
    url = "postgresql://tuner:s3cret@db.example/tuner"
    argv = ["search", "--backend", "roc", "--dtype", "float64", "--shape", "8", "16", "32", "--trials", "5",
            "--timeout", "9.5", "--seed", "3", "--sampler", "random", "--storage", url, "--study", "s",
            "--heartbeat", "7", "--cache-dir", "/tmp/c", "--devices", "0,1"]
    args = build_parser().parse_args(argv)
    command = worker_command(args, simulated=True)
    assert "s3cret" not in " ".join(command)
    monkeypatch.setenv("TUNER_STORAGE", url)  # as _search_on_devices hands it to the workers
    again = build_parser().parse_args(command[len(python_module("tuner")):])
    assert {**vars(args), "devices": None, "simulate": True} == vars(again)


def test_an_option_added_to_search_reaches_the_workers(monkeypatch):
    options = search_command._options

    def with_new_options():
        parser = options()
        parser.add_argument("--new-count", type=int)
        parser.add_argument("--new-flag", action="store_true")
        return parser

    monkeypatch.setattr(search_command, "_options", with_new_options)
    args = build_parser().parse_args(["search", "--backend", "cuda", "--new-count", "3", "--new-flag",
                                      "--devices", "0"])
    command = worker_command(args, simulated=False)
    assert command[command.index("--new-count") + 1] == "3" and "--new-flag" in command
    assert "--devices" not in command and "--simulate" not in command
    assert vars(build_parser().parse_args(command[len(python_module("tuner")):])) == {**vars(args), "devices": None}


def test_without_postgresql_or_root_the_server_says_why(monkeypatch):
    import postgres_server

    monkeypatch.setattr(postgres_server, "_binaries", lambda: None)
    monkeypatch.setattr(postgres_server.os, "geteuid", lambda: 1000)
    with pytest.raises(postgres_server.Unavailable, match="installing it needs apt-get as root"):
        postgres_server.Server()


def test_workers_opening_a_new_postgresql_database_at_once_all_get_the_study(postgres_url, tmp_path):
    # Each worker's first connection creates Optuna's schema if it is missing: started together
    # on a new database, as the README's distributed section has them, they race to create it.
    script = ("import sys; from pathlib import Path; from tuner.storage import SharedStorage; "
              "SharedStorage(sys.argv[1], Path(sys.argv[2]))")
    openers = [subprocess.Popen([sys.executable, "-c", script, postgres_url, str(tmp_path / "unused.journal")],
                                stderr=subprocess.PIPE, text=True) for _ in range(6)]
    errors = [opener.communicate(timeout=120)[1] for opener in openers]
    assert [opener.returncode for opener in openers] == [0] * 6, "\n".join(errors)


def test_a_worker_that_loses_the_race_to_create_a_new_sqlite_database_tries_again(tmp_path, monkeypatch):
    # Another worker creates Optuna's tables between this one's look for them and its CREATE TABLE,
    # which SQLite refuses (table ... already exists), as two searches started together on a new file do.
    from optuna.storages._rdb import models

    from tuner.storage import SharedStorage

    create_all, raced = models.BaseModel.metadata.create_all, []

    def racing(engine, **options):
        if not raced:
            raced.append(engine)
            create_all(engine)  # the other worker's
            create_all(engine, checkfirst=False)  # this one's, having looked before
        create_all(engine, **options)

    monkeypatch.setattr(models.BaseModel.metadata, "create_all", racing)
    shared = SharedStorage(f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "unused.journal")
    assert raced and optuna.create_study(storage=shared.storage, study_name="s").study_name == "s"


def _workers_of(root) -> list[int]:
    """The pids of the `tuner search` processes working on the cache `root`, --devices parents aside."""
    return running_with(str(root), "search", without="--devices")


# Runs the command in argv, says its pid, then waits for it and for the orphans it leaves (Linux's
# PR_SET_CHILD_SUBREAPER makes them this process's children) and says their exit statuses.
SUBREAPER = """
import ctypes, json, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1)
print(subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid, flush=True)
statuses = {}
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    statuses[pid] = os.waitstatus_to_exitcode(status)
print(json.dumps(statuses))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers follow their parent through Linux's prctl")
def test_workers_stop_when_their_parent_is_killed(tmp_path):
    # Both workers stop, and cleanly: no trial left RUNNING, and each exits 143 as at a SIGTERM (not
    # 141: its output, which only the parent read, fails as it stops). The parent's threads exit one
    # by one and Linux sends a worker its parent-death SIGTERM for each, so it gets several in a row;
    # three attempts, since how many land during the stop varies.
    for attempt in range(3):
        root = tmp_path / str(attempt)
        reaper = subprocess.Popen([sys.executable, "-c", SUBREAPER, sys.executable, "-m", "tuner", "search",
                                   "--backend", "cuda", "--simulate", *SMALL, "--trials", "200", "--devices", "0,1",
                                   "--cache-dir", str(root)], stdout=subprocess.PIPE, text=True)
        parent = int(reaper.stdout.readline())
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(cache.record_paths(root)):
            time.sleep(0.1)
        assert len(_workers_of(root)) == 2
        os.kill(parent, signal.SIGKILL)
        statuses = json.loads(reaper.communicate(timeout=120)[0])
        assert sorted(statuses.values()) == [-signal.SIGKILL, 143, 143], statuses
        assert [t.number for t in _study(root, None).trials if t.state.name == "RUNNING"] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers follow their parent through Linux's prctl")
def test_a_worker_whose_parent_died_before_it_could_follow_it_stops_as_at_its_sigterm(tmp_path):
    # The value a parent gives its worker as it starts it, naming a process that is not its parent now.
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                           "--trials", "1", "--cache-dir", str(tmp_path)],
                          env={**os.environ, PARENT: f"{os.getppid()}@{time.clock_gettime(time.CLOCK_BOOTTIME)}"},
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (143, "", "tuner search: terminated (SIGTERM)\n")


@pytest.mark.parametrize("left", ["a bare pid", "a worker's of an hour ago"])
def test_a_search_whose_shell_holds_a_stale_tuner_parent_pid_runs(tmp_path, left):
    """TUNER_PARENT_PID exported in a shell (copied from a worker's environment) named a process that
    is not this one's parent, so the search took itself for a worker whose parent had died and
    ended at once, "terminated (SIGTERM)" and nothing measured. Only the value a parent gave its
    worker as it started it counts."""
    hour_ago = time.clock_gettime(time.CLOCK_BOOTTIME) - 3600
    stale = str(os.getppid()) if left == "a bare pid" else f"{os.getppid()}@{hour_ago}"
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                           "--trials", "1", "--cache-dir", str(tmp_path)],
                          env={**os.environ, PARENT: stale}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "terminated" not in done.stderr, done.stderr
    assert len(list(cache.record_paths(tmp_path))) == 1


@pytest.mark.parametrize("given", ["--storage", "TUNER_STORAGE"])
def test_devices_workers_say_where_their_storage_came_from(tmp_path, capsys, monkeypatch, given):
    """The parent hands --storage to its workers through $TUNER_STORAGE: they do not say it came from there, and
    their figures line names it."""
    storage = tmp_path / "given.journal"
    monkeypatch.setenv("TUNER_STORAGE", str(storage) if given == "TUNER_STORAGE" else "")
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--devices", "0",
                 "--cache-dir", str(tmp_path / "cache"), *(["--storage", str(storage)] if given == "--storage" else [])
                 ]) == 0
    out, err = capsys.readouterr()
    from_environment = given == "TUNER_STORAGE"
    assert f" in {storage}{' (from $TUNER_STORAGE)' if from_environment else ''} has 0 trials" in err, err
    assert (f" --storage {storage}" in out) != from_environment, out
