"""A search killed with SIGKILL at random moments, and resumed each time, loses nothing."""
import os
import random
import signal
import subprocess
import sys
import time

import optuna
import pytest

from tuner import cache

KILLS = 20
COMMAND = [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16"]


def _measured(root) -> dict[int, tuple[dict, float]]:
    """(params, value) of every trial the study holds as measured, by trial number; empty before the
    study exists. (A worker killed between labelling a trial and telling it leaves a running trial.)"""
    journals = list((root / "studies").glob("*.journal"))
    if not journals:
        return {}
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journals[0])))
    names = optuna.get_all_study_names(storage)
    if not names:
        return {}
    study = optuna.load_study(study_name=names[0], storage=storage)
    return {t.number: (t.params, t.value) for t in study.trials
            if t.state.name == "COMPLETE" and t.user_attrs.get("kind") == "measured"}


@pytest.mark.slow  # one kill: test_commands.py's test_a_killed_search_loses_no_completed_trial_and_resumes
def test_twenty_sigkills_at_random_moments_lose_nothing(tmp_path):
    moments = random.Random(8)
    seen: dict[int, tuple[dict, float]] = {}
    environment = {**os.environ, "TQDM_DISABLE": "1"}
    for _ in range(KILLS):
        process = subprocess.Popen([*COMMAND, "--trials", "1000", "--cache-dir", str(tmp_path)], env=environment,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(moments.uniform(0.3, 6.0))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        measured = _measured(tmp_path)  # the journal reads back after every kill
        assert seen.items() <= measured.items()
        seen = measured
        for path in cache.record_paths(tmp_path):
            assert cache.read_record(path).budget.measured <= len(measured)
    assert seen, "no kill came after a measurement"
    done = subprocess.run([*COMMAND, "--trials", str(len(seen) + 1), "--cache-dir", str(tmp_path)], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    final = _measured(tmp_path)
    assert seen.items() <= final.items() and len(final) == len(seen) + 1
    [path] = cache.record_paths(tmp_path)
    record = cache.read_record(path)
    assert record.budget.measured == len(final)
    assert record.best.measurement.gflops == max(value for _, value in final.values())
    assert not list(tmp_path.rglob("*.tmp"))
