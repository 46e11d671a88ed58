"""Kernel Tuner's strategies on a recorded space, in its simulation mode: the other side of
bench/replay_experiment.py.

    python bench/kernel_tuner_strategies.py CACHE.json.gz OUT.jsonl [--strategies S ...]
                                            [--budgets 25 50 ...] [--seeds 20]

Each run is `kernel_tuner.tune_cache(..., strategy=S, strategy_options={"max_fevals": N})` with
Python's and NumPy's global generators seeded (Kernel Tuner's strategies draw from them); even so,
bayes_opt and dual_annealing do not repeat a seed's run exactly. An
evaluation is a distinct recorded configuration, failed ones included, in the order Kernel Tuner
evaluated them; the line records the best time after each (null before the first success).
Appends one JSON line per run, so an interrupted run keeps what it did and a rerun skips the runs
already written.
"""
import argparse
import functools
import gzip
import json
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

STRATEGIES = ("random_sample", "dual_annealing", "greedy_ils", "genetic_algorithm", "bayes_opt")
BUDGETS = (25, 50, 100, 200, 400)


def plain_copy(path: Path, directory: Path) -> Path:
    """Kernel Tuner opens cache files with a plain open(): an uncompressed, closed copy."""
    from tuner.recorded import _json, load

    load(path)  # refuses a file that is not a recorded space, in one line
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    target = directory / (path.name.removesuffix(".gz").removesuffix(".json") + ".json")
    target.write_text(json.dumps(_json(path, text)))
    return target


def run(cache: Path, strategy: str, budget: int, seed: int) -> dict:
    """One Kernel Tuner search: the best time (ms) after each distinct evaluation."""
    from kernel_tuner.interface import tune_cache

    random.seed(seed)
    np.random.seed(seed)
    start = time.perf_counter()
    results, _ = tune_cache(str(cache), strategy=strategy, strategy_options={"max_fevals": budget},
                            quiet=True, verbose=False)
    seen, best, curve = set(), float("inf"), []
    for result in results:
        key = tuple(result[name] for name in result if name in _names(cache))
        if key in seen or result["time"] == "InvalidConfig" or len(curve) == budget:
            continue
        seen.add(key)
        if not isinstance(result["time"], str):
            best = min(best, result["time"])
        curve.append(best if best != float("inf") else None)
    return {"strategy": strategy, "budget": budget, "seed": seed, "best_ms": curve,
            "wall_seconds": round(time.perf_counter() - start, 3)}


@functools.cache
def _names(cache: Path) -> frozenset:
    return frozenset(json.loads(cache.read_text())["tune_params_keys"])


def _memoized_reads() -> None:
    """Parse each cache file once per process, not once per run (a run reads it whole)."""
    import kernel_tuner.util as util

    util.read_cache = functools.cache(util.read_cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    parser.add_argument("--budgets", nargs="+", type=int, default=BUDGETS)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    _memoized_reads()
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            row = json.loads(line)
            done.add((row["strategy"], row["budget"], row["seed"]))
    with tempfile.TemporaryDirectory() as directory, args.out.open("a") as out:
        cache = plain_copy(args.cache, Path(directory))
        for strategy in args.strategies:
            for budget in args.budgets:
                for seed in range(args.seeds):
                    if (strategy, budget, seed) in done:
                        continue
                    row = {"dataset": args.cache.name, **run(cache, strategy, budget, seed)}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(f"{strategy} {budget} seed {seed}: {len(row['best_ms'])} evaluations, "
                          f"{row['wall_seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
