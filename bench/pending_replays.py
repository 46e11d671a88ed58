"""Search efficiency with suggestions asked ahead: replays of the recorded spaces in ../shared/data
with 0, 4, 8 and 16 trials pending, as `tuner search --compile-workers N` holds them.

    python bench/pending_replays.py OUT.json [--sampler local] [--seeds 30] [--budgets 100 400]
                                    [--pending 0 4 8 16] [--processes 2]

Each cell is the mean fraction of the optimum found over the seeds, with its standard error.
"""
import argparse
import json
import multiprocessing
import statistics
import sys
from pathlib import Path

from provenance import provenance

from tuner import recorded
from tuner.replay import replay

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _cell(job: tuple) -> dict:
    path, sampler, budget, pending, seeds = job
    space = recorded.load(path)
    fractions = [replay(space, budget, sampler, seed, pending).fraction(space.optimum) for seed in range(seeds)]
    return {"space": Path(path).name.removesuffix(".json.gz"), "sampler": sampler, "budget": budget,
            "pending": pending, "seeds": seeds, "mean": statistics.fmean(fractions),
            "standard_error": statistics.stdev(fractions) / len(fractions) ** 0.5, "fractions": fractions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sampler", default="local")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--pending", type=int, nargs="+", default=[0, 4, 8, 16])
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    jobs = [(str(path), args.sampler, budget, pending, args.seeds) for path in sorted(DATA.glob("*.json.gz"))
            for budget in args.budgets for pending in args.pending]
    with multiprocessing.Pool(args.processes) as pool:
        cells = pool.map(_cell, jobs)
    args.out.write_text(json.dumps({**provenance(" ".join([Path(sys.executable).name] + sys.argv), "none: replays"),
                                    "cells": cells}, indent=1) + "\n")
    print(f"| space | budget | {' | '.join(f'{p} pending' for p in args.pending)} |")
    print(f"| --- | ---: | {' | '.join('---:' for _ in args.pending)} |")
    for space in dict.fromkeys(cell["space"] for cell in cells):
        for budget in args.budgets:
            row = [cell for cell in cells if cell["space"] == space and cell["budget"] == budget]
            print(f"| {space} | {budget} | " + " | ".join(f"{cell['mean']:.3f} ± {cell['standard_error']:.3f}"
                                                       for cell in row) + " |")


if __name__ == "__main__":
    main()
