"""TPE's turn on sparse recordings: a Kernel Tuner cache from a run with a search strategy holds a
few configurations of a large product, and TPE's proposals there are nearly all invalid. Two parts:

1. On sparse samples (ROWS random configurations) of recorded spaces, the default sampler against
   the same with its turn never ending early (turn_waste infinite): seconds per search, trials
   asked, and the fraction of the sample's optimum found in TRIALS evaluations.
2. On each full recorded space, and on the project's float32 space (answered with random values,
   as it has no recording), the largest ratio, during TPE's turn, of its invalid suggestions to
   the valid configurations measured (startup at least), with the turn never ending early: the
   ratio the early end compares with turn_waste. Below it everywhere, the early end never happens
   there, and replays are unchanged.

    python bench/sparse_recording.py > bench/results/search_efficiency/sparse_recording.json
"""
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np
import optuna
from provenance import provenance

from tuner import recorded, replay as replaying
from tuner.backends import CUDA
from tuner.sampler import LocalSearchSampler, Options
from tuner.space import Space
from tuner.trials import answer, suggest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SPARSE = ("benchmark_hub_gemm_clblast_RTX_3090", "benchmark_hub_dedispersion_milo_A100")
ROWS, TRIALS, SPARSE_SEEDS, RATIO_SEEDS, PROJECT_SEEDS = 150, 100, 10, 100, 40
NEVER = Options(turn_waste=float("inf"))


def sparse(space: recorded.RecordedSpace, name: str, rows: int, seed: int) -> recorded.RecordedSpace:
    """`rows` of the space's recorded configurations, drawn at random, over the same domains."""
    keys = list(space.results)
    chosen = np.random.default_rng(seed).choice(len(keys), rows, replace=False)
    return recorded.RecordedSpace(f"{name}, {rows} rows", space.domains,
                                  {keys[index]: space.results[keys[index]] for index in chosen})


def told_kinds(run) -> tuple[replaying.Run, list[str]]:
    """The kinds that a replay told, in order, with the replay's Run."""
    kinds, answering = [], replaying.answer
    replaying.answer = lambda study, trial, kind, *rest: kinds.append(kind) or answering(study, trial, kind, *rest)
    try:
        return run(), kinds
    finally:
        replaying.answer = answering


def sparse_rows() -> list[dict]:
    rows = []
    for name in SPARSE:
        space = sparse(recorded.load(DATA / f"{name}.json.gz"), name, ROWS, 0)
        for label, options in (("default", Options()), ("turn never ends early", NEVER)):
            fractions, seconds, asked = [], 0.0, 0
            for seed in range(SPARSE_SEEDS):
                start = time.perf_counter()
                run, kinds = told_kinds(lambda: replaying.replay(space, TRIALS, "local", seed, options=options))
                seconds += time.perf_counter() - start
                fractions.append(space.optimum / run.best_seconds[-1])
                asked += len(kinds)
            rows.append({"space": space.name, "sampler": label, "seeds": SPARSE_SEEDS,
                         "seconds_per_search": round(seconds / SPARSE_SEEDS, 2),
                         "trials_per_search": asked / SPARSE_SEEDS,
                         "mean_fraction": round(float(np.mean(fractions)), 4),
                         "standard_error": round(float(np.std(fractions, ddof=1) / np.sqrt(SPARSE_SEEDS)), 4)})
            print(rows[-1], file=sys.stderr)
    return rows


def largest_ratio(kinds: list[str], tpe_first: int, startup: int) -> float:
    """The largest invalid / max(measured, startup) before the tpe_first-th measured trial."""
    measured = invalid = 0
    largest = 0.0
    for kind in kinds:
        if measured >= tpe_first:
            break
        measured += kind == "measured"
        invalid += kind == "invalid"
        largest = max(largest, invalid / max(measured, startup))
    return largest


def recorded_ratios() -> list[dict]:
    rows = []
    for path in sorted(glob.glob(str(DATA / "*.json.gz"))):
        space = recorded.load(path)
        ratios = [largest_ratio(told_kinds(lambda: replaying.replay(space, NEVER.tpe_first, "local", seed,
                                                                    options=NEVER))[1], NEVER.tpe_first, NEVER.startup)
                  for seed in range(RATIO_SEEDS)]
        rows.append({"space": Path(path).name, "seeds": RATIO_SEEDS, "largest": round(max(ratios), 2),
                     "mean": round(float(np.mean(ratios)), 2)})
        print(rows[-1], file=sys.stderr)
    return rows


def project_ratio() -> dict:
    """The float32 space of the project, each new valid configuration answered with a random value."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = Space.of(CUDA, "float32")
    domains = space.domains()

    def valid(values: tuple) -> bool:
        return not space.violations(space.config_type(**dict(zip(domains, values))))

    random_values, ratios = np.random.default_rng(0), []
    for seed in range(PROJECT_SEEDS):
        study = optuna.create_study(direction="maximize", sampler=LocalSearchSampler(domains, valid, seed, NEVER))
        measured, kinds = {}, []
        while len(measured) < NEVER.tpe_first:
            trial = study.ask()
            key = tuple(suggest(trial, domains).values())
            if valid(key) and key not in measured:
                measured[key] = float(random_values.random())
                kinds.append("measured")
                answer(study, trial, "measured", measured[key], 0.0)
            else:
                told = ("duplicate", measured[key], 0.0) if key in measured else ("invalid", 0.0, 1.0)
                kinds.append(told[0])
                answer(study, trial, *told)
        ratios.append(largest_ratio(kinds, NEVER.tpe_first, NEVER.startup))
    return {"space": "the project's float32 space (cuda), random values", "seeds": PROJECT_SEEDS,
            "largest": round(max(ratios), 2), "mean": round(float(np.mean(ratios)), 2)}


def main() -> None:
    document = {**provenance("python bench/sparse_recording.py", "CPU (replays of recorded spaces)"),
                "default_turn_waste": Options().turn_waste, "rows": ROWS, "trials": TRIALS,
                "sparse": sparse_rows(), "turn_ratios": [*recorded_ratios(), project_ratio()]}
    print(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
