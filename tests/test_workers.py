"""Several workers on one study, on the simulator: through a real PostgreSQL server and through the
default journal file; a worker killed mid-trial; the shared budget, claims and the one cache record."""
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest

from tuner import cache

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
    measured = [t for t in trials if t.user_attrs.get("kind") == "measured"]
    # Within budget, completed, none measured twice, none left running.
    assert len(measured) == BUDGET
    assert len({json.dumps(t.params, sort_keys=True) for t in measured}) == BUDGET
    assert not [t for t in trials if t.state.name == "RUNNING"]
    # The killed worker's trial failed, was queued again with its configuration, and answered.
    dead = trials[trial_number]
    assert dead.state.name == "FAIL"
    [retried] = [t for t in trials if t.system_attrs.get("failed_trial") == trial_number]
    assert retried.params == dead.params and retried.state.name == "COMPLETE"
    assert retried.user_attrs["kind"] in ("measured", "duplicate")
    # Every worker that finished wrote the same record: one file, the study's best.
    [path] = cache.record_paths(tmp_path)
    record = cache.read_record(path)
    best = max((t for t in measured if t.user_attrs["measurement"]["status"] == "ok"), key=lambda t: t.value)
    assert record["best"]["trial"] == best.number and record["best"]["config"] == best.params
    assert record["budget"]["measured"] == BUDGET
    assert not list(path.parent.glob("*.tmp"))


def test_a_rerun_of_a_finished_study_measures_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL,
                           "--trials", "1", "--cache-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    again = subprocess.run(done.args, capture_output=True, text=True)
    assert again.returncode == 0 and "this run: measured 0" in again.stdout
    assert "1 measured (its budget: 1)" in again.stdout
