"""Variants of the default sampler that were tried and dropped, replayed on seeds kept apart from
the experiment's (100-129), so that the choice was not made on the seeds it is judged by.

    python bench/sampler_variants.py > bench/results/search_efficiency/sampler_variants.json

Each variant changes one thing in the default sampler (an option of tuner/sampler.py, a constant
of tuner/preference.py, or the neighbours of tuner/grid.py) for the length of its runs; the line
gives the mean fraction of the optimum after 25, 50, 100 and 200 evaluations on each dataset in
../shared/data. The local moves it varies are those of the time (BASE); the committed
sampler_variants.json was made at commit 2a4b9e50, whose sampler differs from today's.
"""
import json
import statistics
import sys
from pathlib import Path

from provenance import provenance

from tuner import preference, recorded, replay
from tuner.sampler import Options
from tuner.grid import Grid

ROOT = Path(__file__).resolve().parent.parent
SEEDS = range(100, 130)
BUDGETS = (25, 50, 100, 200)


def two_parameter_moves(self, point: tuple, wide: bool, doubling: bool = False) -> list[tuple]:
    """One-step moves, and one-step moves of two parameters at once."""
    found = dict.fromkeys(original_neighbours(self, point, wide, doubling))
    for first in list(found):
        for second in original_neighbours(self, first, wide, doubling):
            if second != point:
                found.setdefault(second)
    return list(found)


def any_value_moves(self, point: tuple, wide: bool, doubling: bool = False) -> list[tuple]:
    """Any other value of one parameter, not only the next one along its order (what the wide
    moves now do)."""
    return original_neighbours(self, point, True)


original_neighbours = Grid.neighbours
# The default of the time, local moves only, which each variant changes.
BASE = {"tpe_first": 0, "doubling": False, "global_share": 0.0, "wide_share": 0.0, "tpe_share": 0.0,
        "gp_share": 0.0, "turn_gp_share": 0.0, "stalled_after": 0}
# Each variant: the sampler's options it changes, and the code it patches (module or class, name, value).
VARIANTS = {
    "default": ({}, []),
    "EXPANDED=1": ({"expanded": 1}, []),
    "EXPANDED=3": ({"expanded": 3}, []),
    "EXPANDED=5": ({"expanded": 5}, []),
    "STARTUP=5": ({"startup": 5}, []),
    "STARTUP=15": ({"startup": 15}, []),
    "GOOD_FRACTION=0.15": ({}, [(preference, "GOOD_FRACTION", 0.15)]),
    "GOOD_FRACTION=0.35": ({}, [(preference, "GOOD_FRACTION", 0.35)]),
    "NOISE=0": ({"noise": 0.0}, []),
    "NOISE=1": ({"noise": 1.0}, []),
    "two-parameter moves": ({}, [(Grid, "neighbours", two_parameter_moves)]),
    "any-value moves": ({}, [(Grid, "neighbours", any_value_moves)]),
}


def main() -> None:
    spaces = {path.name: recorded.load(path) for path in sorted((ROOT.parent / "shared" / "data").glob("*.json.gz"))}
    results = {}
    for name, (changes, patches) in VARIANTS.items():
        options = Options(**{**BASE, **changes})
        saved = [(home, key, getattr(home, key)) for home, key, _ in patches]
        for home, key, value in patches:
            setattr(home, key, value)
        try:
            results[name] = {}
            for dataset, space in spaces.items():
                runs = [replay.replay(space, max(BUDGETS), "local", seed, options=options) for seed in SEEDS]
                results[name][dataset] = {budget: statistics.fmean(run.fraction(space.optimum, budget) for run in runs)
                                          for budget in BUDGETS}
        finally:
            for home, key, value in saved:
                setattr(home, key, value)
        rounded = {dataset: [round(value, 3) for value in cells.values()] for dataset, cells in results[name].items()}
        print(name, rounded, file=sys.stderr, flush=True)
    print(json.dumps({**provenance("python bench/sampler_variants.py", "CPU (replay of recorded measurements)"),
                      "seeds": [SEEDS.start, SEEDS.stop - 1], "results": results}, indent=1))


if __name__ == "__main__":
    main()
