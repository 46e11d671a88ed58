"""The studies a search leaves, as `tuner report` and the end of `tuner search` read them: finding
one, sorting its trials by what became of them, and counting its failures by reason."""
import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .cache import Catalog
from .family import keyed_problem
from .formats import printable
from .journal import NotAJournal
from .record import Record
from .simulator import CLOCK as SIMULATED
from .space import SEED
from .storage import StorageError, open_storage, redacted
from .study_record import answers, say_unknown_kinds
from .trials import Kind, is_told, kind, measurement, passed


_NUMBER = r"(\d+(?:\.\d+)?)"


def _line(reason: str) -> str:
    """A reason's first line, as a terminal can show it (the journal's text may be anyone's)."""
    return printable(reason.strip().splitlines()[0]) if reason.strip() else "no reason given"


def _rule(line: str) -> str:
    """A reason's line with the numbers of what it found (before "; ", its advice) replaced by N, so
    that one rule broken with different sizes counts as one."""
    finding, advice = line.partition("; ")[::2]
    return re.sub(_NUMBER, "N", finding) + (f"; {advice}" if advice else "")


def _shown(lines: list[str]) -> str:
    """The reasons of one rule as one line: a number that differs between them is N, one they share
    is kept (the 4 of "multiples of 4"); cut to a line's length."""
    findings = [re.split(_NUMBER, line.partition("; ")[0]) for line in lines]
    if len({len(finding) for finding in findings}) > 1:  # a literal N in one of them: as the rule says it
        return _cut(_rule(lines[0]))
    parts = [part if index % 2 == 0 or all(other[index] == part for other in findings) else "N"
             for index, part in enumerate(findings[0])]
    advice = lines[0].partition("; ")[2]
    return _cut("".join(parts) + (f"; {advice}" if advice else ""))


def _cut(text: str) -> str:
    """A line cut to 90 characters."""
    return text if len(text) <= 90 else text[:87] + "..."


def _texts(said) -> list[str]:
    """The strings of a list that a trial's user attribute holds (a journal can hold anything)."""
    return [text for text in said if isinstance(text, str)] if isinstance(said, list) else []


def failure_reasons(trials) -> Counter:
    """Failed measurements by status and reason, and invalid suggestions by the rule broken or the
    heuristic that pruned them (one count per rule or heuristic, shown as _shown says)."""
    found = defaultdict(list)  # (what, rule) -> the reasons' lines
    for trial in trials:
        if kind(trial) == Kind.INVALID:
            for what in ("reasons", "pruned"):
                for line in map(_line, _texts(trial.user_attrs.get(what))):
                    found["invalid" if what == "reasons" else "pruned", _rule(line)].append(line)
        elif kind(trial) == Kind.MEASURED and not passed(trial):
            said = measurement(trial)
            line = _line(said["reason"])
            found[printable(said["status"]), _rule(line)].append(line)  # any string a journal holds
    reasons = Counter()
    for (what, _), lines in found.items():
        reasons[f"{what}: {_shown(lines)}"] += len(lines)  # two rules cut to one line count as one
    return reasons


def find_study(root: Path, storage: str | None, name: str | None) -> tuple[optuna.Study, str, list[str]]:
    """The study named `name` (the latest worked on, if several journals hold one of that name),
    else the one most recently worked on, from `storage` (an Optuna URL or a journal file) or every
    journal under the cache's studies/ (a file there that is not a journal is skipped with a
    warning, a damaged journal refused); with its storage's label (what optuna-dashboard opens)
    and the names of the other studies found."""
    if storage:
        if "://" not in storage and not Path(storage).is_file():
            raise StorageError(storage, " is not a file; pass a journal file or an Optuna storage URL")
        scheme, _, rest = storage.partition(":///")
        database = rest.partition("?")[0] if scheme.partition("+")[0] == "sqlite" else ""
        if database and database != ":memory:" and not Path(database).is_file():  # SQLite would create an empty one
            raise StorageError(storage, f": there is no database file {database}; pass the URL of the one the "
                               "search wrote")
        storages = {redacted(storage): open_storage(storage)}
        where = redacted(storage)
    else:
        storages, where = {}, str(root / "studies")
        for path in sorted((root / "studies").glob("*.journal")):
            try:
                storages[str(path)] = open_storage(str(path), default=True)
            except NotAJournal:  # a file of the user's that happens to end in .journal; a damaged journal stops
                warnings.warn(f"tuner: skipping {path}: it is not a study journal", stacklevel=2)
    found = [(label, summary.study_name) for label, opened in storages.items()
             for summary in optuna.get_all_study_summaries(opened, include_best_trial=False)]
    if not found:
        raise ValueError(f"no study in {where}: run `tuner search` first, or pass --cache-dir or --storage")
    candidates = found if name is None else [(label, study) for label, study in found if study == name]
    if not candidates:
        raise ValueError(f"no study named {name!r} in {where}; "
                         f"the studies there are: {', '.join(study for _, study in found)}")
    # The latest worked on, also of studies of one name in several journals (one per device).
    label, name = max(candidates, key=lambda pair: _last_activity(optuna.load_study(
        study_name=pair[1], storage=storages[pair[0]])))
    others = [study for _, study in found if study != name]
    return optuna.load_study(study_name=name, storage=storages[label]), label, others


def identity(study: optuna.Study) -> dict:
    """The device fingerprint and problem a study was created for (search.Search._mark); empty where
    the study holds none, or something else in its place."""
    held = study.user_attrs.get("identity")
    return held if isinstance(held, dict) else {}


def _last_activity(study: optuna.Study) -> datetime:
    moments = [trial.datetime_complete or trial.datetime_start for trial in study.get_trials(deepcopy=False)]
    return max((moment for moment in moments if moment), default=datetime.min)


@dataclass
class StudyTrials:
    """One study's trials sorted by what became of them, and the cache entry it wrote."""

    study: optuna.Study
    trials: list
    measured: list
    passed: list
    entry: Record | None  # the cache's record of the study's product and device, whichever study made it
    entry_path: Path | None
    own_entry: bool  # whether this study made that record: its best is a trial of this study
    seed: float | None  # GFLOP/s of the seed kernel's configuration, if the study measured it
    unit: str  # " (simulated CPU time)" for a simulated study, else empty

    @classmethod
    def of(cls, study: optuna.Study, catalog: Catalog) -> "StudyTrials":
        """`study`'s completed trials, and its record among the cache's. The study's product and its
        device (from any record of its fingerprint; unknown if none) tell the trials whose
        measurements the tuner cannot have made, which are left out with a warning, as from the
        record (study_record.answers)."""
        held = identity(study)
        fingerprint = held.get("fingerprint")
        devices = catalog.select(fingerprint=fingerprint) if isinstance(fingerprint, str) else []
        entry, path = next(((stored.record, stored.path) for stored in devices
                            if stored.record.problem.key == held.get("problem")), (None, None))
        problem = entry.problem if entry else keyed_problem(held.get("problem"))
        device = next((stored.record.device for stored in devices), None)
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        say_unknown_kinds(complete)
        if problem is None and any(kind(trial) == Kind.MEASURED for trial in complete):
            warnings.warn("tuner: the study names no product, so its measurements cannot be checked")
        trials = [trial for trial in complete if is_told(trial) and (
            not problem or kind(trial) != Kind.MEASURED or answers(trial, problem, device))]
        measured = [trial for trial in trials if kind(trial) == Kind.MEASURED]
        good = [trial for trial in measured if passed(trial)]
        simulated = any(measurement(trial).get("clock") == SIMULATED for trial in measured)
        seed = next((trial.value for trial in good if trial.params == SEED.as_dict()), None)
        own = entry is not None and entry.study.get("name") == study.study_name and any(
            trial.number == entry.best.trial and trial.params == entry.best.config.as_dict()
            and trial.value == entry.best.measurement.gflops for trial in good)
        return cls(study, trials, measured, good, entry, path, own, seed, f" ({SIMULATED})" if simulated else "")
