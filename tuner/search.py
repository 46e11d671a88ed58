"""The Optuna study: suggest configurations, measure the valid new ones, keep the best in the cache.

Every suggestion becomes a finished trial, told as trials.py says; a measurement that a record
would refuse is a failed variant ('implausible'), and a complete trial that does not count (one
left out as not the tuner's) steers neither the budget nor the local sampler. With compile workers,
suggestions are asked ahead and compiled while earlier ones are measured (compile_ahead.py). The
study lives in persistent storage, so the same command resumes it, and several workers can share
it (see storage.py); the cache record is rewritten after every measurement (another study's only once
its configurations are measured again here).
"""
import contextlib
import os
import time
import warnings
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from . import cache, disk, record
from .ceiling import Ceilings, why_not_measure
from .compile_ahead import CompileAheadFailed, Compiled, CompilePool
from .config import Tiling
from .formats import counted, rate
from .kernel import check_kernel_dir, kernel_dir
from .measure import GPU_PROTOCOL, SIMULATOR_PROTOCOL, Measured, Operands, measure
from .problem import Problem
from .runtime import Runtime
from .sampler import make_sampler
from .schema import MAX_TEXT
from .space import Space
from .stopping import Terminated, raise_if_stopping, shielded
from .storage import (HEARTBEAT_SECONDS, KILLS_ITS_WORKER, SharedStorage, check_database_file, killers, redacted,
                      worker_name)
from .study_record import answers, build_record, say_unknown_kinds, warm_start_configs
from .trials import (MAX_UNMEASURED_IN_A_ROW, RECORDED, STARTED, Kind, answer, config_key, give_back, is_measured,
                     is_told, passed, suggest)

# A CUDA fault leaves the context unusable, so every later launch in the process fails too.
MAX_LAUNCH_FAILURES_IN_A_ROW = 3


@dataclass
class Outcome:
    """What one run of the search did, for the summary line."""

    measured: int = 0
    failed: int = 0
    invalid: int = 0
    duplicates: int = 0
    unmeasured_in_a_row: int = 0
    launch_failures_in_a_row: int = 0
    interrupted: bool = False  # by Ctrl-C or SIGTERM
    terminated: bool = False  # by SIGTERM
    spent: bool = False  # the study holds its budget of measured variants
    stopped: str = ""  # why the run ended before its budget, if it did
    record: "record.Record | None" = None
    record_path: Path | None = None
    intervals: list = field(default_factory=list)  # wall seconds to the first evaluated variant, then between them
    measuring_seconds: float = 0.0  # of which verifying and timing on the device
    wall_seconds: float = 0.0
    compile_workers: int = 0  # those that compiled ahead (none for a simulated backend that cannot compile)


def study_name(runtime: Runtime, problem: Problem) -> str:
    """The default name of the study that tunes `problem` on the runtime's device."""
    return f"{problem.family}-{problem.key}-{runtime.device.fingerprint}"


def _study_place(study: dict) -> tuple[str, str]:
    """A record's study as its name and storage, where a journal reached by a symbolic link is the same."""
    storage = study["storage"]
    return study["name"], os.path.realpath(storage) if os.path.isabs(storage) else storage


class Search:
    """One tuning job: a study for (device, problem), its measurements, and its cache record."""

    def __init__(self, runtime: Runtime, problem: Problem, *, root: Path, seed: int = 0,
                 sampler: str = "local", storage: str | None = None, name: str | None = None,
                 heartbeat: int = HEARTBEAT_SECONDS):
        self.runtime, self.problem, self.root, self.seed = runtime, problem, root, seed
        self.space = Space.of(runtime.backend, problem.dtype, problem.family)
        label = redacted(storage) if storage else "journal file under the cache directory"
        self.storage_label = label if len(label) <= MAX_TEXT else "..." + label[3 - MAX_TEXT:]
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        visible = runtime.backend.visible_devices
        journal = root / "studies" / f"{runtime.device.slug}.journal"
        self.where = redacted(storage) if storage else str(journal)  # the storage, for messages
        if storage:
            check_database_file(storage)
        self.shared = SharedStorage(storage, journal, heartbeat,
                                    f"{visible}={os.environ[visible]}" if visible in os.environ else "")
        self.study = optuna.create_study(
            storage=self.shared.storage, study_name=name or study_name(runtime, problem),
            direction="maximize", load_if_exists=True)
        # A resumed run and a second worker draw new random numbers: seeding with the trial count and
        # the worker avoids replaying another run's suggestions, which would all be duplicates.
        domains = self.space.domains()

        def valid(values: tuple) -> bool:
            return not self.space.violations(self.space.config_type(**dict(zip(domains, values))))

        self.study.sampler = make_sampler(
            sampler, (seed + len(self.study.trials) + zlib.crc32(worker_name().encode())) % 2**32, domains, valid,
            counts=self._counts)
        identity = {"fingerprint": runtime.device.fingerprint, "problem": problem.key}
        self._mark(identity)
        self.shared.recover(self.study)
        self._asked = {}  # number -> trial, for every trial asked for and not yet told
        self._pending = deque()  # (trial, config, key) asked for, compiling ahead, not yet measured
        self._budget = None  # measured variants the study may hold, set by run
        self.protocol = SIMULATOR_PROTOCOL if runtime.simulated else GPU_PROTOCOL
        self.path = cache.record_path(root, runtime.device.slug, record.file_stem(problem))
        self._replacing_said = False  # whether this search said it replaces another study's record
        self._answered = {}  # trial number -> whether the complete trial answers for its configuration
        complete = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        say_unknown_kinds(complete)
        self.history = {config_key(trial.params): trial for trial in complete if self._answers(trial)}
        self.killers = killers(self.study)  # configurations never measured again: their worker died each time
        self.ceilings = Ceilings.where_countable(runtime, self.space, root)
        self._counted_seconds = 0.0  # the count _below_ceiling made here for the variant about to be measured

    def _mark(self, identity: dict) -> None:
        """Mark the study as this device's and problem's search; ValueError naming the study if it
        is another's: another device's or problem's, or not tuner's (trials without a mark, or
        another direction than tuner's one, maximized)."""
        held, name = self.study.user_attrs.get("identity"), self.study.study_name
        if held is None and (self.study.get_trials(deepcopy=False)
                             or self.study.directions != [optuna.study.StudyDirection.MAXIMIZE]):
            raise ValueError(f"study {name!r} in this storage is not a tuner search (it has trials or objectives "
                             "tuner did not make); choose another --study name")
        if held is not None and held != identity:
            holds = (f"{held.get('problem')} on device {held.get('fingerprint')}" if isinstance(held, dict)
                     else "another search")
            raise ValueError(f"study {name!r} holds {holds}, not {identity['problem']} on {identity['fingerprint']}; "
                             "choose another --study name")
        self.study.set_user_attr("identity", identity)

    def check_writable(self) -> None:
        """Stop before anything is measured where the record or the kernel files could not be
        written: the record's lock is taken (its folder made) and the kernel directory checked."""
        with disk.locked(self.path):
            pass
        check_kernel_dir(kernel_dir(self.root), self.runtime.backend.module)

    def enqueue(self, configs: list[Tiling], recorded: bool = False, running_too: bool = False) -> list[Tiling]:
        """Queue the configurations the study has neither measured, claimed nor queued (with
        `running_too`, those other workers are measuring as well); those queued
        (SharedStorage.enqueue). `recorded` ones come from a record, measured before, and are
        measured again whatever their static ceiling (_below_ceiling)."""
        queued = self.shared.enqueue(self.study, [config.as_dict() for config in configs], self._answers,
                                     {RECORDED: True} if recorded else {}, running_too)
        return [self.space.config_type(**params) for params in queued]

    def warm_start(self) -> list[Tiling]:
        """Queue the known-good configurations (see warm_start_configs)."""
        recorded, starts = warm_start_configs(self.space, self.root, self.runtime, self.problem)
        return self.enqueue(recorded, recorded=True) + self.enqueue(starts)

    def queued(self) -> int:
        """Trials waiting in the study's queue."""
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def queued_ahead(self, configs: list[Tiling]) -> int:
        """Queued trials of other configurations than `configs` taken off the queue (in the order
        queued) before the last of them; the whole queue if one of them is not queued, since a warm
        start appends it."""
        keys = {config_key(config.as_dict()) for config in configs}
        waiting = [trial.user_attrs.get("queued") for trial in
                   sorted(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)), key=lambda t: t.number)]
        end = max(index for index, key in enumerate(waiting) if key in keys) + 1 if keys <= set(waiting) else None
        return sum(key not in keys for key in waiting[:end])

    def kills(self, config: Tiling) -> bool:
        """Whether the worker died each time `config` was measured (storage.killers), so that it is
        never measured again."""
        return config_key(config.as_dict()) in self.killers

    def measured(self, config: Tiling):
        """The study's finished trial that measured `config`, if any: this worker's, or another's
        since this one opened the study."""
        key = config_key(config.as_dict())
        if key not in self.history:
            found = next((trial for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                          if config_key(trial.params) == key and self._answers(trial)), None)
            if found is not None:
                self.history[key] = found
        return self.history.get(key)

    def _answers(self, trial) -> bool:
        """Whether `trial` measured its configuration for the study (study_record.answers); kept for a
        complete trial, which cannot change, since each claim asks it of every trial."""
        known = self._answered.get(trial.number)
        if known is None:
            known = is_measured(trial) and answers(trial, self.problem, self.runtime.device)
            if trial.state == TrialState.COMPLETE:
                self._answered[trial.number] = known
        return known

    def measured_count(self) -> int:
        """Variants the study has measured, every worker's, as its budget counts them (_answers)."""
        return sum(map(self._answers, self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))

    def _counts(self, trial) -> bool:
        """Whether a complete trial counts: told as one of tuner's kinds and, if measured, answering
        for its configuration (one left out is warned of, as the report leaves it out)."""
        return is_told(trial) and (not is_measured(trial) or self._answers(trial))

    def counted_trials(self) -> list:
        """The study's complete trials that count (_counts)."""
        return [trial for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if self._counts(trial)]

    def trial_count(self) -> int:
        """Trials the study has started (queued ones are not counted)."""
        return len(self.study.get_trials(deepcopy=False, states=STARTED))

    def _fastest(self):
        """The study's fastest measured trial that passed, or None."""
        return max((trial for trial in self.history.values() if passed(trial)), key=lambda trial: trial.value,
                   default=None)

    def best_gflops(self) -> float | None:
        fastest = self._fastest()
        return fastest.value if fastest is not None else None

    def best_ceiling(self) -> float | None:
        """The static ceiling of the fastest variant measured in the study (this shape's winner,
        which for a thin product is a small tile with a low ceiling); None before one is known."""
        fastest = self._fastest()
        return fastest.user_attrs.get("ceiling") if fastest is not None else None

    def run(self, trials: int | None, timeout: float | None, progress=None, warm: bool = True,
            budget: int | None = None, compile_workers: int = 0, from_queue: list[Tiling] | None = None) -> Outcome:
        """Measure up to `trials` new variants within `timeout` seconds, starting with the queued
        ones (and, if `warm`, the known-good ones), and stop once the study holds `budget`
        measured variants, counting every worker's; Ctrl-C and SIGTERM stop cleanly. With
        `compile_workers`, as many suggestions are asked ahead and compiled in that many worker
        processes while this one measures (compile_ahead.py). With `from_queue`, the sampler is
        never asked: trials are taken from the queue while one of those configurations waits
        there, and the run ends once what was taken is measured."""
        self.check_writable()
        if warm:
            self.warm_start()
        outcome = Outcome()
        operands = Operands.fresh(self.runtime, self.space, self.problem, self.seed)
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        self._budget, self._last_evaluated = budget, started
        wanted = None if from_queue is None else {config_key(config.as_dict()) for config in from_queue}
        ahead = compile_workers if self.runtime.backend.compiles_without_gpu or not self.runtime.simulated else 0
        outcome.compile_workers = ahead
        pool = CompilePool(self.runtime.backend.name, self.problem.dtype, str(kernel_dir(self.root)),
                           self.runtime.simulated, ahead, family=self.problem.family,
                           counts=self.ceilings is not None) \
            if ahead else contextlib.nullcontext()
        try:
            with pool, self.shared.beating(lambda: list(self._asked.values())):
                asking = True  # until, `from_queue`, none of those configurations waits in the queue
                while trials is None or outcome.measured < trials:
                    # The oldest suggestion held is measured once `ahead` more are held, or none is asked for
                    # any more; else one more is asked for.
                    held = len(self._pending) > (ahead if asking else 0)
                    trial, config, key = self._pending[0] if held else (None, None, None)
                    raise_if_stopping()
                    if trial is None and not asking:
                        break
                    outcome.stopped = "" if trial is not None else self._reason_to_stop(outcome, deadline)
                    if outcome.stopped:
                        break
                    decision = self.shared.claim(self.study, self._budget, trial, key, self._answers)
                    if decision.spent:
                        outcome.spent = True
                        break
                    if trial is None:
                        asking = self._ask(outcome, pool if ahead else None, wanted)
                        continue
                    self._pending.popleft()
                    if decision.earlier is not None:
                        self._answer_from(trial, key, decision.earlier, outcome)
                        continue
                    raise_if_stopping()
                    compiled = pool.result(key) if ahead else None
                    if self._below_ceiling(trial, config, compiled, outcome):
                        continue
                    measurement = self._measure(trial, config, compiled, operands, outcome)
                    outcome.record, outcome.record_path = self.save()
                    if progress:
                        progress(outcome, measurement, self.best_gflops())
                raise_if_stopping()  # one swallowed in the last variant's measurement
        except KeyboardInterrupt as stop:
            outcome.interrupted, outcome.terminated = True, isinstance(stop, Terminated)
        finally:
            with shielded():
                for trial in list(self._asked.values()):  # in flight, or asked ahead and not measured
                    give_back(self.study, trial)
            self._asked.clear()
            self._pending.clear()
        outcome.wall_seconds = time.monotonic() - started
        outcome.record, outcome.record_path = self.save()
        return outcome

    @staticmethod
    def _reason_to_stop(outcome: Outcome, deadline: float | None) -> str:
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"
        if outcome.unmeasured_in_a_row >= MAX_UNMEASURED_IN_A_ROW:
            return (f"{MAX_UNMEASURED_IN_A_ROW} suggestions in a row were invalid or already measured: "
                    "the sampler has converged")
        if outcome.launch_failures_in_a_row >= MAX_LAUNCH_FAILURES_IN_A_ROW:
            return (f"{MAX_LAUNCH_FAILURES_IN_A_ROW} launches in a row failed: the device may be in an error "
                    "state; rerun the command to resume in a fresh process")
        return ""

    def _ask(self, outcome: Outcome, pool: CompilePool | None, wanted: set[str] | None = None) -> bool:
        """Ask for one suggestion: answer it at once if it is invalid or measured already, else
        hold it (while `pool` compiles it) until its turn to be measured. With `wanted`
        (configuration keys), only a queued trial, while one of those waits in the queue: False
        where none does."""
        if wanted is not None:
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if wanted.isdisjoint(trial.user_attrs.get("queued") for trial in waiting):
                return False
        with shielded():  # asking, signing and suggesting all write to the study: none is cut in half
            trial = self.study.ask()
            self._asked[trial.number] = trial
            if wanted is not None and "queued" not in trial.user_attrs:  # another worker emptied the queue meanwhile
                give_back(self.study, self._asked.pop(trial.number))  # at once: unsigned, it would pass for dead
                return False
            self.shared.sign(trial)
            params = suggest(trial, self.space.domains())
        config, key = self.space.config_type(**params), config_key(params)
        broken, pruned = self.space.reasons(config)
        if broken or pruned:
            self._tell_invalid(trial, len(broken) + len(pruned), outcome, broken, pruned)
        elif key in self.history:
            self._answer_from(trial, key, self.history[key], outcome)
        elif key in self.killers:
            self._tell_invalid(trial, 1.0, outcome, [], [KILLS_ITS_WORKER])
        else:
            self._pending.append((trial, config, key))
            if pool:
                pool.submit(key, params)
        return True

    def _measure(self, trial, config: Tiling, compiled: Compiled | None, operands: Operands,
                 outcome: Outcome) -> record.Measurement:
        """Measure the claimed `trial` (`compiled` ahead by a worker, if it was) and tell the study."""
        if compiled and compiled.fatal:
            raise CompileAheadFailed(compiled.fatal)
        if compiled and compiled.error:
            run = Measured(record.Measurement("compile", compiled.error, clock=self.runtime.clock))
        else:
            run = measure(self.runtime, self.space, self.problem, config, operands, self.protocol,
                          kernel_dir(self.root))
        measurement, now = run.measurement, time.monotonic()
        implausible = measurement.ok and measurement.doubt(self.problem, self.runtime.device)
        if implausible:  # one the record would refuse: a failed variant, so that it counts and is not measured again
            measurement = record.Measurement("implausible", implausible, clock=self.runtime.clock)
        outcome.intervals.append(now - self._last_evaluated)
        outcome.measuring_seconds += run.phases.get("verify", 0.0) + run.phases.get("time", 0.0)
        self._last_evaluated = now
        # With no compile worker, the count compiled the kernel here (compile_and_count): measure then took it from
        # memory, so its compile is the count's, which the measuring process spent on this variant.
        counted, self._counted_seconds = self._counted_seconds, 0.0
        seconds = {**({"compile_ahead": compiled.seconds} if compiled else {}),
                   **({"compile_and_count": counted} if counted else {}), **run.phases}
        resources = run.resources or (compiled.resources if compiled else None)
        self._tell(trial, Kind.MEASURED, measurement.gflops if measurement.ok else 0.0,
                   0.0 if measurement.ok else 1.0, measurement=measurement.as_dict(), seconds=seconds,
                   **{"resources": resources} if resources else {})
        outcome.measured += 1
        outcome.failed += not measurement.ok
        outcome.unmeasured_in_a_row = 0
        outcome.launch_failures_in_a_row = outcome.launch_failures_in_a_row + 1 if measurement.status == "launch" else 0
        return measurement

    def _answer_from(self, trial, key: str, earlier, outcome: Outcome) -> None:
        """Answer `trial` from `earlier`, the study's measurement of `key` (perhaps another
        worker's, which joins the history)."""
        self.history[key] = earlier
        self._tell(trial, Kind.DUPLICATE, earlier.value, 0.0 if passed(earlier) else 1.0, duplicate_of=earlier.number)
        outcome.duplicates += 1
        outcome.unmeasured_in_a_row += 1

    def _tell_invalid(self, trial, violation: float, outcome: Outcome, broken: list[str], pruned: list[str],
                      **seconds: float) -> None:
        """Tell `trial` invalid, never to be measured: for the hard rules it breaks (`reasons`), or
        the heuristics that prune it (`pruned`), with the `seconds` of each phase it cost, if any."""
        self._tell(trial, Kind.INVALID, 0.0, violation, reasons=broken, pruned=pruned,
                   **({"seconds": seconds} if seconds else {}))
        outcome.invalid += 1
        outcome.unmeasured_in_a_row += 1

    def _below_ceiling(self, trial, config: Tiling, compiled: Compiled | None, outcome: Outcome) -> bool:
        """Whether `config`'s static ceiling rules it out (ceiling.py), told as invalid with the
        reason; decided when its turn to be measured comes, from the count its compile worker
        made (`compiled`), else counted here, and never for a configuration queued from a record.
        Its ceiling joins the study's as a trial attribute."""
        self._counted_seconds = 0.0  # none left from a variant this search did not measure
        if self.ceilings is None or (compiled and (compiled.error or compiled.fatal)):
            return False
        if compiled:  # the worker's count is final, None included: counting again here would stall the search
            ceiling = self.ceilings.of(config, (compiled.resources or {}).get("fma_fraction"))
        else:
            counts = config_key(config.as_dict()) not in self.ceilings.known  # else read, nothing compiled
            start = time.perf_counter()
            ceiling = self.ceilings.of(config)
            self._counted_seconds = time.perf_counter() - start if counts else 0.0
        if ceiling is None:
            return False
        reason = "" if trial.user_attrs.get(RECORDED) else why_not_measure(ceiling, self.best_ceiling(),
                                                                            outcome.unmeasured_in_a_row)
        trial.set_user_attr("ceiling", ceiling)
        if reason:  # the seconds its count took, in a compile worker or here, go with it
            spent = {"compile_ahead": compiled.seconds} if compiled else \
                {"compile_and_count": self._counted_seconds} if self._counted_seconds else {}
            self._tell_invalid(trial, 1.0, outcome, [], [reason], **spent)
        return bool(reason)

    def _tell(self, trial, told: Kind, value: float, violation: float, **attrs) -> None:
        """Answer `trial` (trials.answer), unless the study took it for dead; a measurement joins the history."""
        with shielded():
            try:
                frozen = answer(self.study, trial, told, value, violation, **attrs)
            except optuna.exceptions.UpdateFinishedTrialError:
                return  # another worker took this one for dead (silent past the grace period) and queued it again
            finally:
                self._asked.pop(trial.number, None)
        if told == Kind.MEASURED:
            self.history[config_key(frozen.params)] = frozen

    def left_to_replace(self) -> tuple[record.Record | None, list[Tiling]]:
        """The cache record at this search's path if another study made it (a new --study or
        --storage for a product already tuned: the cache holds one record per product and device),
        and those of its configurations in the space that this study has not measured, each once (a
        record edited by hand may list one twice), but those its worker died measuring each time
        (kills), which it never measures; (None, []) if there is no such record."""
        try:
            held = cache.read_record(self.path)
        except (cache.CacheError, OSError):  # none yet, or one that cannot be read: nothing to re-measure
            return None, []
        if _study_place(held.study) == _study_place({"name": self.study.study_name, "storage": self.storage_label}):
            return None, []
        left = {config_key(config.as_dict()): config for config in held.configs
                if not self.space.violations(config) and self.measured(config) is None and not self.kills(config)}
        return held, list(left.values())

    def kept_record(self) -> tuple[record.Record | None, list[Tiling]]:
        """Another study's cache record that the cache keeps although this study has a variant that
        passed, and its configurations left to measure before this study's replaces it
        (left_to_replace); (None, []) where none is kept."""
        held, left = self.left_to_replace()
        if not left or not any(map(passed, self.counted_trials())):
            return None, []
        return held, left

    def save(self) -> tuple[record.Record | None, Path | None]:
        """Write the study's best so far to the cache: the record as stored and its path, or
        (None, None) while no variant has passed, or while another study's record there holds
        configurations this study has not measured (left_to_replace), which it replaces only then."""
        with shielded(), disk.locked(self.path):  # built under the lock: the last writer has every worker's trials
            built = build_record(self.study, self.runtime, self.problem, self.storage_label)
            if built is None:
                return None, None
            held, left = self.left_to_replace()
            if left:
                return None, None
            if held is not None and not self._replacing_said:
                self._replacing_said = True
                fatal = len({config_key(config.as_dict()) for config in held.configs if self.kills(config)})
                warnings.warn(f"tuner: this study's record of {self.problem.key} replaces the cache record made by "
                              f"study {held.study['name']!r} in {held.study['storage']} (best "
                              f"{rate(held.best.measurement.gflops)}), having measured its configurations again"
                              + (f", but {counted(fatal, 'configuration')} that this study's worker died "
                                 "measuring each time" if fatal else ""), stacklevel=2)
            cache.store(self.path, built)
        return cache.read_record(self.path), self.path
