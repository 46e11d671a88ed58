"""The trial protocol: what each finished trial of a study is, and the decisions a worker takes on it.

Every suggestion is given its configuration (`suggest`) and becomes a finished trial, told once
(`answer`) as one Kind, so the sampler learns from all of them:
- invalid: never compiled; told 0 GFLOP/s with a constraint violation per hard rule it breaks
  (its `reasons`) or heuristic that prunes it (its `pruned`); a static ceiling below half of the
  best seen, where it can be counted (ceiling.py), is such a heuristic;
- duplicate: already measured in the study; answered from that trial, not measured again;
- measured: verified, then timed; a compile, launch or correctness failure, or a measurement a
  record would refuse (implausible), is infeasible (a constraint), not an ignored FAIL trial.
FAIL is left to a trial that was interrupted, whose worker died (it is queued again), or, as
surplus, that was asked for as the budget ran out or ahead of a run's end. Before asking and
before measuring, a worker asks the storage for a Decision (SharedStorage.claim): measure, answer
from an earlier trial of the same configuration, or stop, the budget spent. The search
(search.py) and its replay on recorded spaces (replay.py) follow this protocol.
"""
import contextlib
import json
from dataclasses import dataclass
from enum import Enum

import optuna
from optuna.trial import FrozenTrial, TrialState

# A run stops when this many suggestions in a row were invalid or already measured: the sampler has
# converged, or the valid space is exhausted.
MAX_UNMEASURED_IN_A_ROW = 500
# The user attribute of a trial queued from a record: measured before, it is measured again
# whatever its static ceiling.
RECORDED = "recorded"
# The states of a trial that was asked for (not merely queued).
STARTED = tuple(state for state in TrialState if state != TrialState.WAITING)


class Kind(str, Enum):
    """What a trial was told as, stored as its `kind` user attribute (the values are those of every
    journal written so far)."""

    MEASURED = "measured"  # verified and timed; a failure is infeasible
    INVALID = "invalid"  # broke a hard rule of the space, or a heuristic (its static ceiling, too) pruned it
    DUPLICATE = "duplicate"  # answered from the study's earlier measurement of its configuration
    SURPLUS = "surplus"  # asked for and not measured: the budget ran out, or the run ended first


_KINDS = frozenset(kind.value for kind in Kind)


@dataclass(frozen=True)
class Decision:
    """What a worker does with the trial whose turn has come: measure it (its claim is written) or,
    with no trial, ask for one; answer it from `earlier`, which measured its configuration; or stop,
    the study's budget `spent`."""

    earlier: FrozenTrial | None = None
    spent: bool = False


MEASURE, SPENT = Decision(), Decision(spent=True)


def config_key(params: dict) -> str:
    """A configuration's parameters as one string, the same for equal configurations."""
    return json.dumps(params, sort_keys=True)


def kind(trial) -> str:
    """The Kind `trial` was told as, or "" if it was not told one."""
    return trial.user_attrs.get("kind", "")


def is_told(trial) -> bool:
    """Whether the trial was told as one of the Kinds (a journal edited by hand may hold anything)."""
    said = trial.user_attrs.get("kind")
    return isinstance(said, str) and said in _KINDS


def is_measured(trial) -> bool:
    """A complete trial that measured its configuration (not invalid, duplicate or surplus)."""
    return trial.state == TrialState.COMPLETE and kind(trial) == Kind.MEASURED


def measurement(trial) -> dict:
    """What a measured trial's storage says of its measurement: a dict with a status and a reason
    (record.Measurement's fields), or, where a journal holds anything else, a "malformed" one."""
    said = trial.user_attrs.get("measurement")
    if isinstance(said, dict) and isinstance(said.get("status"), str) and isinstance(said.get("reason", ""), str):
        return {"reason": "", **said}
    return {"status": "malformed", "reason": "the study's storage holds no measurement tuner writes"}


def passed(trial) -> bool:
    """A measured trial whose variant was verified and timed."""
    return is_measured(trial) and measurement(trial)["status"] == "ok"


def suggest(trial, domains: dict[str, tuple]) -> dict:
    """The trial's configuration: one value per parameter, from its domain."""
    return {name: trial.suggest_categorical(name, list(domain)) for name, domain in domains.items()}


def answer(study: optuna.Study, trial, told: Kind, value: float, violation: float, **attrs) -> FrozenTrial:
    """Tell the study a suggestion's outcome, as Kind `told`; the finished trial. `violation` > 0
    marks it infeasible for the samplers that read constraints."""
    trial.set_user_attr("kind", Kind(told).value)
    for name, attr in attrs.items():
        trial.set_user_attr(name, attr)
    trial.set_constraint("feasible", violation)
    return study.tell(trial, value)


def give_back(study: optuna.Study, trial) -> None:
    """Tell the study that `trial`, asked for, will not be measured: FAIL, as surplus, unless
    another worker has ended it already (as dead: dead-trial recovery)."""
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        trial.set_user_attr("kind", Kind.SURPLUS.value)
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
