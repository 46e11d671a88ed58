"""The trial protocol: kinds as every journal so far stored them, and the decision a claim returns
(measure, answer from an earlier trial, budget spent), with two workers racing for one study."""
import re
import threading
import time

import optuna
import pytest
from processes import died_measuring

from tuner.backends import CUDA
from tuner.config import Config
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.search import Search
from tuner.storage import KILLS_ITS_WORKER, MAX_RETRIES, SharedStorage, killers, worker_name
from tuner.trials import MEASURE, SPENT, Kind, answer, config_key, give_back, is_measured, passed

A, B = {"block_m": 32}, {"block_m": 64}


@pytest.fixture
def workers(tmp_path):
    """Two workers' storages on one journal, and the study as the first one opened it."""
    path = tmp_path / "study.journal"
    first, second = SharedStorage(None, path), SharedStorage(None, path)
    study = optuna.create_study(storage=first.storage, study_name="s", direction="maximize")
    return first, second, study, optuna.load_study(storage=second.storage, study_name="s")


def _asked(shared: SharedStorage, study: optuna.Study, params: dict):
    study.enqueue_trial(params)
    trial = study.ask()
    trial.suggest_categorical("block_m", [32, 64])
    shared.sign(trial)
    return trial


def _measure(study, trial, status="ok"):
    return answer(study, trial, Kind.MEASURED, 1.0, 0.0, measurement={"status": status})


def test_a_claim_with_room_measures_and_writes_the_claim(workers):
    first, _, study, _ = workers
    trial = _asked(first, study, A)
    assert first.claim(study, 2, trial, config_key(A)) == MEASURE
    assert study.trials[trial.number].user_attrs["claim"] == config_key(A)


def test_a_configuration_measured_already_is_answered_from_that_trial(workers):
    first, second, study, other = workers
    earlier = _measure(study, _asked(first, study, A))
    decision = second.claim(other, None, _asked(second, other, A), config_key(A))
    assert decision.earlier.number == earlier.number and not decision.spent


def test_a_spent_budget_is_told_with_or_without_a_trial(workers):
    first, _, study, _ = workers
    _measure(study, _asked(first, study, A))
    assert first.claim(study, 1) == SPENT
    assert first.claim(study, 1, _asked(first, study, B), config_key(B)) == SPENT
    assert first.claim(study, None) == first.claim(study, 2) == MEASURE


def _racing(claim) -> tuple[threading.Thread, list]:
    decided = []
    thread = threading.Thread(target=lambda: decided.append(claim()))
    thread.start()
    time.sleep(1.5)  # three polls
    return thread, decided


def test_a_second_worker_waits_for_a_claim_on_its_configuration_then_answers_from_it(workers):
    first, second, study, other = workers
    trial = _asked(first, study, A)
    assert first.claim(study, None, trial, config_key(A)) == MEASURE
    thread, decided = _racing(lambda: second.claim(other, None, _asked(second, other, A), config_key(A)))
    assert not decided
    measured = _measure(study, trial)
    thread.join(timeout=30)
    assert decided[0].earlier.number == measured.number


def test_a_second_worker_waits_while_claims_fill_the_budget_then_is_told_it_is_spent(workers):
    first, second, study, other = workers
    trial = _asked(first, study, A)
    assert first.claim(study, 1, trial, config_key(A)) == MEASURE
    thread, decided = _racing(lambda: second.claim(other, 1))
    assert not decided
    _measure(study, trial, status="wrong")  # a failed variant counts against the budget too
    thread.join(timeout=30)
    assert decided == [SPENT]


def test_a_worker_waiting_long_on_a_claim_it_cannot_check_says_whose(workers, monkeypatch):
    """A worker on another host (or in a container since gone) cannot be seen to die: the wait on
    its claim says so, and names it, instead of going on silently."""
    first, second, study, other = workers
    monkeypatch.setattr("tuner.storage.WAIT_NOTICE_SECONDS", 0.2)
    trial = _asked(first, study, A)
    trial.set_user_attr("worker", "elsewhere:1")
    assert first.claim(study, 1, trial, config_key(A)) == MEASURE
    later = threading.Timer(1.0, lambda: _measure(study, trial))
    later.start()
    with pytest.warns(UserWarning, match="waiting 0.2 s so far for the trials claimed by elsewhere:1; a worker on"):
        assert second.claim(other, 1) == SPENT
    later.join()


@pytest.mark.parametrize("same_start", [True, False], ids=["its worker", "another process with its pid"])
def test_a_running_trial_is_taken_for_dead_when_its_pid_now_belongs_to_another_process(workers, same_start):
    """A restarted container gives its search the pid the killed one had: that pid is alive, but
    started later than the trial's worker, whose trial would otherwise hold its claim for good."""
    first, second, study, other = workers
    trial = _asked(first, study, A)
    assert first.claim(study, 1, trial, config_key(A)) == MEASURE  # the budget's one slot, claimed
    if not same_start:
        trial.set_user_attr("worker_started", "1")  # a start before this process's
    with second.lock.held("s"):
        second._recover(other)
    state = other.trials[trial.number].state
    assert state == (optuna.trial.TrialState.RUNNING if same_start else optuna.trial.TrialState.FAIL)


def test_the_kinds_of_an_earlier_journal_still_count(tmp_path):
    """Earlier releases stored each kind as a plain string: those trials still count as measured,
    passed and spent budget."""
    path = tmp_path / "old.journal"
    runtime, problem = open_runtime(CUDA, simulate=True), Problem(16, 16, 16)
    study = optuna.create_study(storage=SharedStorage(None, path).storage, study_name="old", direction="maximize")
    study.set_user_attr("identity", {"fingerprint": runtime.device.fingerprint, "problem": problem.key})
    ok = {"status": "ok", "reason": "", "relative_error": 0.0, "seconds": problem.flops / 1e9, "spread": 0.0,
          "reps": 1, "gflops": 1.0, "fraction_of_peak": None, "clock": runtime.clock}
    for kind, measurement, block_m in (("measured", ok, 32), ("measured", {"status": "wrong"}, 64),
                                       ("invalid", None, 16), ("duplicate", None, 32)):
        params = {**Config().as_dict(), "block_m": block_m}
        study.enqueue_trial(params)
        choices = {name: [16, 32, 64] if name == "block_m" else [value] for name, value in params.items()}
        trial = study.ask({name: optuna.distributions.CategoricalDistribution(domain)
                           for name, domain in choices.items()})
        trial.set_user_attr("kind", kind)
        if measurement:
            trial.set_user_attr("measurement", measurement)
        study.tell(trial, 1.0)
    trials = optuna.load_study(storage=SharedStorage(None, path).storage, study_name="old").trials
    assert [is_measured(t) for t in trials] == [True, True, False, False]
    assert [passed(t) for t in trials] == [True, False, False, False]
    assert [Kind(t.user_attrs["kind"]) for t in trials] == [Kind.MEASURED, Kind.MEASURED, Kind.INVALID,
                                                             Kind.DUPLICATE]
    search = Search(runtime, problem, root=tmp_path, storage=str(path), name="old")
    assert search.measured_count() == 2 and search.best_gflops() == 1.0
    assert search.shared.claim(search.study, 2) == SPENT


@pytest.fixture
def time_zone(monkeypatch):
    """Set this process's time zone, as another host's worker would have it; restored after the test."""
    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def test_a_trial_just_asked_by_a_worker_in_another_time_zone_is_not_taken_for_dead(tmp_path, time_zone):
    """A worker 26 hours ahead must not read a trial just asked in a database, not yet signed, as
    silent for a day: Optuna (5 and later) keeps the moment in UTC and gives it in local time."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    time_zone("Etc/GMT+12")  # UTC-12
    study = optuna.create_study(storage=SharedStorage(url, tmp_path / "unused.journal").storage, study_name="s",
                                direction="maximize")
    trial = study.ask()
    time_zone("Etc/GMT-14")  # UTC+14
    recovering = SharedStorage(url, tmp_path / "unused.journal", heartbeat=1)
    other = optuna.load_study(storage=recovering.storage, study_name="s")
    recovering.recover(other)
    assert other.trials[trial.number].state == optuna.trial.TrialState.RUNNING


def test_a_configuration_whose_measurement_killed_its_worker_each_time_is_not_queued_again(workers):
    """A variant that kills the measuring process (a driver fault, a hang the user kills) is retried
    MAX_RETRIES times; the warm start, which queues its configurations afresh in every run, must not
    start that over, or every run would die on it. A variant given back on Ctrl-C is no death."""
    first, _, study, _ = workers

    def measuring():
        trial = study.ask()  # the oldest waiting trial: A, or its retry
        assert trial.suggest_categorical("block_m", [32, 64]) == A["block_m"]
        first.sign(trial)
        assert first.claim(study, None, trial, config_key(A)) == MEASURE
        return trial

    for _ in range(MAX_RETRIES + 1):
        assert first.enqueue(study, [A]) == [A]
        give_back(study, measuring())  # Ctrl-C
    assert not killers(study)
    assert first.enqueue(study, [A]) == [A]
    for _ in range(MAX_RETRIES + 1):
        measuring().set_user_attr("worker_started", "1")  # its process died: this pid is another's now
        first.recover(study)
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))  # no retry left
    # What killed them is not known; which workers died is, named for the user to look up.
    dead = ", ".join([re.escape(worker_name())] * (MAX_RETRIES + 1))
    with pytest.warns(UserWarning, match=rf'configuration \{{"block_m": 32\}} is not queued again: its worker died '
                                         rf'while measuring it 3 times or more .*; the workers that died: {dead} '
                                         r'\(the kernel\'s log, dmesg, names a process the OOM killer ended'):
        assert first.enqueue(study, [A, B]) == [B]


def test_a_configuration_that_killed_its_worker_each_time_is_not_measured_when_the_sampler_suggests_it(
        tmp_path, monkeypatch):
    """The sampler knows nothing of failed trials and may suggest such a variant again, which would
    start its retries over and kill as many runs: it is told invalid, with why, and not measured."""
    runtime, problem, path = open_runtime(CUDA, simulate=True), Problem(16, 16, 16), tmp_path / "study.journal"
    first = Search(runtime, problem, root=tmp_path, storage=str(path), name="s")
    killer = Config(block_m=16, block_n=16, thread_m=2, thread_n=2)
    died_measuring(first, killer, MAX_RETRIES + 1)  # the variant and its retries each killed the measuring process
    killer = killer.as_dict()
    second = Search(runtime, problem, root=tmp_path, storage=str(path), name="s")
    second.study.sampler = _FirstSuggesting(killer)
    assert second.run(trials=1, timeout=None, warm=False).measured == 1
    told = [trial for trial in second.study.trials if trial.state == optuna.trial.TrialState.COMPLETE]
    assert told[0].params == killer and told[0].user_attrs["pruned"] == [KILLS_ITS_WORKER]
    assert [trial.params != killer for trial in told if is_measured(trial)] == [True]


class _FirstSuggesting(optuna.samplers.RandomSampler):
    """Suggests `config` for the first trial it is asked for, then draws at random."""

    def __init__(self, config: dict):
        super().__init__(seed=0)
        self.config, self.first = config, None

    def sample_independent(self, study, trial, name, distribution):
        if self.first in (None, trial.number):
            self.first = trial.number
            return self.config[name]
        return super().sample_independent(study, trial, name, distribution)
