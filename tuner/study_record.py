"""What a study and the cache give each other: the record of a study's best so far, and the
configurations a new search of a problem starts from."""
import math
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from . import cache, record
from .config import Tiling, config_type
from .devices import Device
from .formats import rate
from .problem import Problem
from .runtime import Runtime
from .schema import check
from .space import Space
from .trials import STARTED, Kind, config_key, is_measured, is_told, passed


def doubt(trial, problem: Problem, device: Device | None) -> str:
    """Why a passing trial's measurement, as the study's storage holds it, cannot be one the tuner
    made of `problem` on `device` (record.Measurement.doubt, None if unknown; or its value is not
    its rate), or "".
    A journal is a file anyone with access could have appended to."""
    measurement = trial.user_attrs["measurement"]
    values = trial.values
    if not (isinstance(values, list) and len(values) == 1 and isinstance(values[0], (int, float))
            and not isinstance(values[0], bool)):
        return f"its value {values!r} is not one number"
    names = config_type(problem.dtype).names()
    wrong = ("its parameters are not a configuration's" if set(trial.params) != set(names) else
             check({"trial": trial.number, "config": trial.params, "measurement": measurement}, record.ENTRY, "trial"))
    if wrong:
        return wrong
    if not math.isclose(trial.value, measurement["gflops"], rel_tol=1e-9):
        return f"its value {trial.value} is not its rate {rate(measurement['gflops'])}"
    return record.Measurement(**measurement).doubt(problem, device)


def say_unknown_kinds(trials) -> None:
    """Name in a warning, as left out, each complete trial whose kind is none tuner tells (a journal
    edited by hand): it counts as nothing, and its configuration is measured again."""
    for trial in trials:
        if trial.state == TrialState.COMPLETE and not is_told(trial):
            warnings.warn(f"tuner: trial {trial.number} of the study is left out: its kind "
                          f"{trial.user_attrs.get('kind')!r:.40} is not one tuner tells")


def answers(trial, problem: Problem, device: Device | None) -> bool:
    """Whether a measured trial may answer for its configuration: it failed, or it passed with a
    measurement the tuner made (doubt); a passing one that may not is named in a warning, as left
    out, and its configuration is measured again."""
    why = passed(trial) and doubt(trial, problem, device)
    if why:
        warnings.warn(f"tuner: trial {trial.number} of the study is left out: its measurement is not one the "
                      f"tuner made ({why})")
    return not why


def _measuring_seconds(trial) -> float:
    """The measuring process's seconds on a trial (load or compile, with no compile worker the count,
    verify, time; for one its static ceiling ruled out, that count), not those a worker spent
    compiling it ahead."""
    return sum(seconds for phase, seconds in trial.user_attrs.get("seconds", {}).items() if phase != "compile_ahead")


def build_record(study: optuna.Study, runtime: Runtime, problem: Problem, storage_label: str) -> record.Record | None:
    """The cache record of the study so far: best and runners-up, budget, dates; None if no
    variant has passed yet. A trial left out (answers) is neither a measured nor a failed variant."""
    trials = study.get_trials(deepcopy=False, states=STARTED)
    done = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    measured = [trial for trial in done if is_measured(trial) and answers(trial, problem, runtime.device)]
    # Ranked by the measured rate, which the record's own check compares (a value may differ by 1e-9).
    good = sorted((trial for trial in measured if passed(trial)),
                  key=lambda trial: -trial.user_attrs["measurement"]["gflops"])
    if not good:
        return None
    kinds = [trial.user_attrs.get("kind") for trial in done]
    budget = record.Budget(
        trials=len(trials), measured=len(measured), failed=len(measured) - len(good),
        invalid=kinds.count(Kind.INVALID), duplicates=kinds.count(Kind.DUPLICATE),
        measuring_seconds=round(sum(_measuring_seconds(trial) for trial in
                                    measured + [trial for trial in done if not is_measured(trial)]), 3))
    searched = (min(trial.datetime_start for trial in trials if trial.datetime_start),
                max(trial.datetime_complete for trial in done))
    ranked = [record.parse_entry({"trial": trial.number, "config": trial.params,
                                  "measurement": trial.user_attrs["measurement"]}, problem.dtype) for trial in good]
    return record.make(runtime.device, problem, runtime.clock, ranked, budget,
                       searched, {"name": study.study_name, "storage": storage_label})


def warm_start_configs(space: Space, root: Path, runtime: Runtime,
                       problem: Problem) -> tuple[list[Tiling], list[Tiling]]:
    """Known-good starting points, likeliest first, valid and each once: those from records (every
    configuration of the record this search will replace, so that it re-measures them rather than
    trusting them, then the best configurations cached for this backend and dtype, this shape's
    first, from any GPU), and the space's starts that are not among them."""
    found = []
    for stored in cache.Catalog.read(root).select(backend=runtime.backend.name, family=problem.family,
                                                  dtype=problem.dtype):
        if stored.record.device.simulated and not runtime.simulated:  # simulated CPU time ranks nothing on a GPU
            continue
        same_problem = stored.record.problem == problem
        if same_problem and stored.record.fingerprint == runtime.device.fingerprint:
            found += [(0, config) for config in stored.record.configs]
        else:
            found.append((1 if same_problem else 2, stored.record.configs[0]))
    recorded, starts = {}, {}
    for kept, configs in ((recorded, [config for _, config in sorted(found, key=lambda pair: pair[0])]),
                          (starts, space.starts(runtime.simulated))):
        for config in configs:
            key = config_key(config.as_dict())
            if not space.violations(config) and key not in recorded:
                kept.setdefault(key, config)
    return list(recorded.values()), list(starts.values())
