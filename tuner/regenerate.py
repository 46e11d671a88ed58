"""`tuner regenerate`: bring the cache up to date with this GPU and the software installed.

Every product tuned before on a GPU of this backend, in the user's cache, or shipped for this GPU
model, is brought to the current device's fingerprint (a product tuned only on the simulator is
left to it; one shipped only for other GPU models is for `tuner search` to tune here):
- a record of this fingerprint is current and is left alone;
- a record of this GPU model under other software (driver, runtime, Numba, compilers, templates,
  verification code) has its configurations re-rendered from the installed templates, re-verified
  and re-timed, taken from the study's queue alone (no variant the sampler suggests);
- a product tuned only on other GPUs, or whose configurations all fail now, is re-tuned,
  warm-started from the other GPUs' best configurations;
- a product too large for the device, or of a precision it lacks, is skipped.
Both go through a study of the new fingerprint, measured by its Search.run as `tuner search`
measures (compile workers included), so a later `tuner search` continues from them.
That study is marked while its product is regenerated, so that a run stopped halfway (Ctrl-C, a
kill) is finished by the next one, although it may have written a record of this fingerprint.
The mark and that record are read again as each product comes up: a product that another
regenerate finished meanwhile is current, one it is regenerating is joined.
"""
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from . import cache
from .devices import software_changes
from .dtypes import PRECISIONS
from .formats import counted, rate
from .problem import Problem
from .record import Record, file_stem
from .runtime import Runtime
from .search import Search, study_name
from .stopping import Terminated
from .storage import KILLS_ITS_WORKER, open_storage
from .trials import measurement

REGENERATING = "regenerating"  # the study attribute that marks a regeneration under way
RETUNE_BUDGET = "re-tune budget"  # measured variants a re-tune under way stops at


@dataclass
class Change:
    """What regenerate did for one product: current, re-verified, re-tuned, kept (another study's record; _kept),
    skipped or failed."""

    problem: Problem
    action: str
    details: list[str] = field(default_factory=list)


def _gflops(value: float, simulated: bool) -> str:
    return f"{rate(value)}{' (simulated)' if simulated else ''}"


def regenerate(runtime: Runtime, root: Path, *, trials: int, seed: int = 0, compile_workers: int = 0, say=print,
               done=None) -> list[Change]:
    """Regenerate every product known to the cache for `runtime`'s device, compiling ahead in
    `compile_workers` processes as a search does; `say` is told of each step as it starts, and
    `done` (if given) of each product's Change as it ends, so that what was finished is said even
    if a later product is stopped. Ctrl-C stops after keeping what was measured."""
    device = runtime.device
    catalog = cache.Catalog.read(root)
    for error in catalog.skipped:
        say(f"skipping {error}")
    known: dict[Problem, list[cache.Stored]] = {}
    for stored in catalog.select(backend=runtime.backend.name):
        if stored.regenerated_on(device):
            known.setdefault(stored.record.problem, []).append(stored)
    changes, marked = [], _Marks(root / "studies" / f"{device.slug}.journal")
    for problem in sorted(known, key=lambda problem: problem.key):
        changes.append(_bring_up_to_date(runtime, root, problem, known[problem], marked, trials, seed,
                                         compile_workers, say))
        if done:
            done(changes[-1])
    return changes


def _bring_up_to_date(runtime: Runtime, root: Path, problem: Problem, stored: list[cache.Stored], marked: "_Marks",
                      trials: int, seed: int, workers: int, say) -> Change:
    """One product's regeneration, from its records: current, skipped, or regenerated."""
    regenerating = marked(study_name(runtime, problem))  # read first: a regenerate clears it after its last record
    records, current = _records_now(root, runtime, problem, stored)
    if _serves(current) and not regenerating:
        return Change(problem, "current")
    refusal = runtime.refuses(problem) or runtime.lacks(PRECISIONS[problem.dtype])
    if refusal:
        return Change(problem, "skipped", [refusal])
    search = Search(runtime, problem, root=root, seed=seed)
    if regenerating and not search.study.user_attrs.get(REGENERATING):  # finished by another while opened here
        records, current = _records_now(root, runtime, problem, stored)
        if _serves(current):
            return Change(problem, "current")
    search.study.set_user_attr(REGENERATING, True)
    change = _regenerate_one(search, records, current, trials, workers, say)
    search.study.set_user_attr(REGENERATING, False)
    return change


class _Marks:
    """Whether a study of this device is marked as regenerating now (stopped halfway, or under way in
    another process), read from one storage of the device's journal, opened once the journal exists,
    which reads at each question only what was appended since."""

    def __init__(self, journal: Path):
        self.journal, self.storage = journal, None

    def __call__(self, name: str) -> bool:
        if not self.journal.is_file():
            return False
        try:
            return self._read(name)
        except ValueError:  # a line torn since it was opened (a writer killed mid-append): opening repairs it
            self.storage = None
            return self._read(name)

    def _read(self, name: str) -> bool:
        if self.storage is None:
            self.storage = open_storage(str(self.journal), default=True)
        try:
            study = self.storage.get_study_id_from_name(name)
        except KeyError:
            return False
        return bool(self.storage.get_study_user_attrs(study).get(REGENERATING))


def _records_now(root: Path, runtime: Runtime, problem: Problem,
                 stored: list[cache.Stored]) -> tuple[list[Record], list[Record]]:
    """The product's records, with this device's in the cache read again (another process, a
    regenerate or a search, may have written it since the catalog was read), and those of them of
    this device's fingerprint."""
    path = cache.record_path(root, runtime.device.slug, file_stem(problem))
    records = [found.record for found in stored if found.path != path]
    with contextlib.suppress(cache.CacheError):
        records.append(cache.read_record(path))
    return records, [found for found in records if found.fingerprint == runtime.device.fingerprint]


def _serves(current: list[Record]) -> bool:
    """Whether a record of this fingerprint holds a configuration valid in this version's space."""
    return any(found.valid_configs() for found in current)


def _regenerate_one(search: Search, records: list[Record], current: list[Record], trials: int, workers: int,
                    say) -> Change:
    """Re-verify what was tuned on this GPU model, else (or if none passes) re-tune."""
    problem, device = search.problem, search.runtime.device
    same_gpu = [found for found in records if found.device.model == device.model and found not in current]
    details = []
    if same_gpu:
        newest = max(same_gpu, key=lambda found: found.finished_at)
        changed = f"software: {', '.join(software_changes(newest.device, device)) or 'other versions'}"
        say(f"{file_stem(problem)}: re-verifying what was tuned on this GPU; {changed}")
        passed, details = _reverify(search, newest, workers)
        details.insert(0, changed)
        if passed:
            kept = _kept(search)
            return Change(problem, "kept", [kept, *details]) if kept else Change(problem, "re-verified", details)
        details.append("none passes now")
    if current and not _serves(current):
        details.append("the configurations recorded for this device are no longer valid in this version of tuner")
    before = [found for found in records if found not in current]  # a stopped re-tune's own record is no "before"
    tuned_on = ", ".join(sorted({found.device.name for found in before})) or "this device"
    say(f"{file_stem(problem)}: re-tuning ({counted(trials, 'variant')}), tuned before on {tuned_on}")
    return _retune(search, before, trials, workers, details)


def _reverify(search: Search, old: Record, workers: int) -> tuple[bool, list[str]]:
    """Measure the old record's configurations under the current software: whether any passes,
    and a line per configuration."""
    simulated = search.runtime.simulated
    space = search.space
    details, valid = [], []
    for entry in old.ranked:
        reasons = space.violations(entry.config)
        if reasons:
            details.append(f"{entry.config.describe(space.backend)}: no longer valid: {reasons[0]}")
        else:
            valid.append(entry)
    _measure_all(search, [entry.config for entry in valid], workers)
    search.save()  # also when the study had measured them all already
    passed = 0
    for entry in valid:
        config = entry.config
        trial = search.measured(config)
        was = _gflops(entry.measurement.gflops, simulated)
        if trial is None:
            details.append(f"{config.describe(space.backend)}: was {was}, not measured"
                           + (f": {KILLS_ITS_WORKER}" if search.kills(config) else ""))
            continue
        said = measurement(trial)
        if said["status"] == "ok":
            passed += 1
            details.append(f"{config.describe(space.backend)}: {was} -> {_gflops(said['gflops'], simulated)}")
        else:
            details.append(f"{config.describe(space.backend)}: was {was}, fails now "
                           f"({said['status']}: {said['reason']})")
    return passed > 0, details


def _kept(search: Search) -> str:
    """Why the cache keeps another study's record of this device although this study has a variant
    that passed (Search.kept_record); "" where it does not."""
    held, left = search.kept_record()
    if not left:
        return ""
    return (f"another study's record ({held.study['name']!r} in {held.study['storage']}) serves this device; this "
            f"study replaces it once it has measured its {counted(len(left), 'configuration')} not measured here")


def _stop_if_stopped(outcome) -> None:
    """Stop the regeneration as the search stopped: on Ctrl-C, or on SIGTERM (exit status 143)."""
    if outcome.interrupted:
        raise Terminated if outcome.terminated else KeyboardInterrupt


def _measure_all(search: Search, configs: list, workers: int) -> None:
    """Measure every one of `configs` the study has not measured, compiling ahead in `workers`
    processes, from the queue alone: no variant the sampler suggests. One that another process
    (a search, a regenerate) is measuring is queued too, to be answered from its measurement.
    Trials queued before them (by an interrupted run, a search's warm start) are served first,
    so this goes on until none of `configs` is left, but those that their worker died measuring each
    time (Search.kills), which are never measured again."""
    for _ in range(len(configs) + search.queued()):
        pending = [config for config in configs if search.measured(config) is None and not search.kills(config)]
        if not pending:
            return
        search.enqueue(pending, recorded=True, running_too=True)
        outcome = search.run(len(pending), None, warm=False, compile_workers=workers, from_queue=pending)
        _stop_if_stopped(outcome)  # a run that measured nothing (another process took the queue) goes round again


def _retune(search: Search, records: list[Record], trials: int, workers: int, details: list[str]) -> Change:
    """Tune afresh, warm-started from the best configurations of every other GPU, compiling ahead
    in `workers` processes: `trials` more measured variants, kept as the study's budget so that a
    re-tune stopped halfway is finished by the next run rather than started again."""
    budget = search.study.user_attrs.get(RETUNE_BUDGET)
    if not isinstance(budget, int):
        budget = search.measured_count() + trials
        search.study.set_user_attr(RETUNE_BUDGET, budget)
    outcome = search.run(None, None, budget=budget, compile_workers=workers)
    _stop_if_stopped(outcome)
    search.study.set_user_attr(RETUNE_BUDGET, None)
    simulated = search.runtime.simulated
    before = [f"{_gflops(found.best.measurement.gflops, found.device.simulated)} on {found.device.name}"
              for found in records]
    if outcome.record is None:
        kept = _kept(search)
        if kept:
            return Change(search.problem, "kept", [*details, kept])
        return Change(search.problem, "failed",
                      [*details, f"no variant passed verification in {outcome.measured} measured"])
    best = outcome.record.best
    return Change(search.problem, "re-tuned", [
        *details, f"best {_gflops(best.measurement.gflops, simulated)} after "
        f"{counted(outcome.record.budget.measured, 'variant')}" + (f" (before: {'; '.join(before)})" if before else ""),
        best.config.describe(search.space.backend)])
