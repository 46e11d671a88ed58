"""Replaying searches on a recorded space: each evaluation is answered from the recording and
charged the recorded cost, so that strategies can be compared offline on the same data."""
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import optuna

from .recorded import RecordedSpace
from .sampler import Options, make_sampler
from .trials import MAX_UNMEASURED_IN_A_ROW, Kind, answer, suggest

NEAR = 1.05  # "near the optimum": within 5% of the best recorded time


@dataclass
class Run:
    """One replayed search: the best time after each evaluation, and the recorded seconds that
    those evaluations cost."""

    best_seconds: list[float]
    cost_seconds: float

    def fraction(self, optimum: float, evaluations: int | None = None) -> float:
        """Best recorded time over the best time found within `evaluations` (all by default)."""
        found = self.best_seconds[:evaluations]
        return optimum / found[-1] if found and found[-1] != float("inf") else 0.0

    def evaluations_to(self, target_seconds: float) -> int | None:
        """Evaluations needed to find a time at most `target_seconds`, or None."""
        return next((count for count, best in enumerate(self.best_seconds, 1) if best <= target_seconds), None)


def replay(space: RecordedSpace, trials: int, sampler: str = "local", seed: int = 0, pending: int = 0,
           options: Options = Options(), starts: Iterable[tuple] = ()) -> Run:
    """Search `space` for `trials` evaluations, as `tuner search` would with `sampler` (`local`
    with `options`, to compare settings other than the default's): invalid
    and repeated suggestions are answered without counting (as on the device, where they are
    never measured); failed configurations count and score zero. With `pending`, each new
    suggestion waits, running, until that many later ones were asked, as with
    `--compile-workers` (search.py), so the sampler suggests without knowing their outcomes; those
    still waiting when the sampler has nothing new left are measured in turn, up to `trials`. At
    most `trials` - 1 wait: a search measures the first of its budget's suggestions once those are
    held, and never the ones it holds past them (it gives them back), so more change nothing but
    ask on until the space runs out.
    `starts` (configurations, tuples of values in domain order) are queued before the first
    suggestion, as `tuner search`'s warm start queues the best configurations of cached records
    (Search.warm_start): each recorded one once, in order (one not recorded, which the space's
    rules would refuse, is left out, as warm_start_configs leaves out those that break them). The
    study takes them off its queue first (Optuna's enqueue_trial, as SharedStorage.enqueue), they
    are measured and count as evaluations, and the sampler sees them as the product's does (TPE's
    turn counts them as measured, its random start as complete trials)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pending = min(pending, trials - 1)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(
        sampler, seed, space.domains, lambda values: values in space.results, options))
    history, best, run = {}, float("inf"), Run([], 0.0)
    held = deque()  # (trial, key, result) asked ahead, not yet told
    asked = set()  # the keys of the configurations held or measured
    unmeasured_in_a_row = 0
    for key in dict.fromkeys(start for start in starts if start in space.results):
        study.enqueue_trial(dict(zip(space.domains, key)), user_attrs={"queued": repr(key)})

    def duplicate(trial, key):
        answer(study, trial, Kind.DUPLICATE, history[key], 0.0 if history[key] else 1.0)

    def tell_oldest():
        nonlocal best
        trial, key, result = held.popleft()
        if key in history:  # suggested again while the first was held
            duplicate(trial, key)
            return
        history[key] = 1.0 / result.seconds if result.seconds else 0.0
        answer(study, trial, Kind.MEASURED, history[key], 0.0 if result.seconds else 1.0)
        best = min(best, result.seconds or best)
        run.best_seconds.append(best)
        run.cost_seconds += result.cost

    while (len(run.best_seconds) < trials and len(history) < len(space.results)
           and unmeasured_in_a_row < MAX_UNMEASURED_IN_A_ROW):  # the space may run out first
        trial = study.ask()
        key = tuple(suggest(trial, space.domains).values())
        result = space.results.get(key)
        if result is None:
            answer(study, trial, Kind.INVALID, 0.0, 1.0)
            unmeasured_in_a_row += 1
        elif key in history:
            duplicate(trial, key)
            unmeasured_in_a_row += 1
        else:
            held.append((trial, key, result))  # one held already is answered from it in its turn
            unmeasured_in_a_row = 0 if key not in asked else unmeasured_in_a_row + 1
            asked.add(key)
        if len(held) > pending:
            tell_oldest()
    while held and len(run.best_seconds) < trials:
        tell_oldest()
    return run


@dataclass
class Summary:
    """R replayed searches of one strategy on one space."""

    sampler: str
    trials: int
    runs: list[Run]
    optimum: float

    def as_dict(self) -> dict:
        fractions = [run.fraction(self.optimum) for run in self.runs]
        needed = [run.evaluations_to(self.optimum * NEAR) for run in self.runs]
        reached = sorted(count for count in needed if count is not None)
        return {
            "sampler": self.sampler, "trials": self.trials, "repeats": len(self.runs),
            "mean_evaluations": statistics.fmean(len(run.best_seconds) for run in self.runs),
            "fraction_of_optimum": {"mean": statistics.fmean(fractions), "min": min(fractions),
                                    "max": max(fractions),
                                    "stdev": statistics.stdev(fractions) if len(fractions) > 1 else 0.0},
            "within_5_percent": {"runs": len(reached),
                                 "median_evaluations": statistics.median(reached) if reached else None},
            "mean_recorded_cost_seconds": statistics.fmean(run.cost_seconds for run in self.runs),
        }


def summarize(space: RecordedSpace, trials: int, repeats: int, sampler: str = "local", seed: int = 0,
              pending: int = 0) -> Summary:
    """`repeats` independent replays, seeded seed, seed + 1, ..."""
    return Summary(sampler, trials, [replay(space, trials, sampler, seed + repeat, pending)
                                     for repeat in range(repeats)], space.optimum)
