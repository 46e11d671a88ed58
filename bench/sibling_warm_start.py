"""What the cross-GPU warm start buys: leave-one-GPU-out on the recorded spaces of one kernel.

    python bench/sibling_warm_start.py [--seeds 100] [--budgets 25 50 100] [--top 1 3] [--verify 3]
                                       [--data ../shared/data] [--out FILE]

On a GPU, `tuner search` first measures the best configuration of every cached record of the same
product from any other GPU (study_record.warm_start_configs: `record.configs[0]` of each), and only
then asks the default sampler. The replays that chose the default (bench/replay_experiment.py)
start cold. Here, for each space of ../shared/data whose kernel was recorded on other GPUs too
(five GPUs of one 2-D convolution, four of one dedispersion, all sharing their kernel's parameter
space), the best configuration of each sibling space (`--top 1`, the product's; `--top 3` as a
variant, since a record holds several) is queued first, siblings in file-name order, their
bests before their second bests, each configuration once, through replay(..., starts=...), the
product's queue (Optuna's enqueue_trial); then the shipped default (`local`, default Options)
goes on. The queued configurations are measured and count as evaluations. Each space is scored
by the mean fraction of its optimum at each budget, seeds 0..seeds-1, against the cold default
on the same seeds: the committed runs of the candidate 'TPE first 50, wide share 0.1' (the
default that ships, equal to Options()) in search_efficiency/candidates-<space>.jsonl.gz, of
which the first `--verify` seeds per space are replayed again and must match today's code. The
GEMM space has no sibling, so the warm start gives it nothing and it is left out.

Writes (default) bench/results/search_efficiency/sibling_warm_start.json: per space, the queued
configurations (with each one's fraction of the held-out optimum), per variant, seed and budget
the raw fractions, and per budget the means, standard errors and the paired difference to cold;
with the command, date, commit, versions and machine ('CPU replay'). Prints a markdown table.
One process, one core: a replay of 100 evaluations takes about a second.
"""
import argparse
import gzip
import json
import re
import statistics
import sys
import time
from pathlib import Path

from provenance import provenance
from replay_experiment import CANDIDATES

from tuner import recorded
from tuner.replay import replay
from tuner.sampler import Options

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "search_efficiency"
DEFAULT = "TPE first 50, wide share 0.1"
NAME = re.compile(r"benchmark_hub_(?P<kernel>.+)_milo_(?P<gpu>[^_]+)$")


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


def ranked(space: recorded.RecordedSpace) -> list[tuple]:
    """The configurations that succeeded, fastest first (ties by configuration)."""
    return [key for _, key in sorted((result.seconds, key) for key, result in space.results.items()
                                     if result.seconds is not None)]


def queue(siblings: list[recorded.RecordedSpace], top: int) -> list[tuple]:
    """The warm start: each sibling's best first (in the order given), then each one's second
    best, ..., `top` per sibling, each configuration once."""
    bests = [ranked(sibling)[:top] for sibling in siblings]
    return list(dict.fromkeys(best[rank] for rank in range(top) for best in bests if rank < len(best)))


def fraction(optimum: float, best: list[float], budget: int) -> float:
    found = best[:budget]
    return optimum / found[-1] if found and found[-1] not in (0, float("inf"), None) else 0.0


def cell(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "se": statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1
            else 0.0, "runs": len(values)}


def cold_runs(stem: str, seeds: int) -> dict[int, list[float]]:
    """The committed cold runs of the shipped default, seed -> best seconds after each evaluation."""
    with gzip.open(RESULTS / f"candidates-{stem}.jsonl.gz", "rt") as file:
        rows = [json.loads(line) for line in file]
    runs = {row["seed"]: [ms / 1e3 if ms is not None else float("inf") for ms in row["best_ms"]]
            for row in rows if row["candidate"] == DEFAULT and row["seed"] < seeds}
    missing = sorted(set(range(seeds)) - set(runs))
    if missing:
        raise SystemExit(f"{stem}: no committed cold run of {DEFAULT!r} for seeds {missing[:5]}...")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budgets", type=int, nargs="+", default=[25, 50, 100])
    parser.add_argument("--top", type=int, nargs="+", default=[1, 3], help="configurations queued per sibling")
    parser.add_argument("--verify", type=int, default=3, help="cold seeds per space replayed again to check")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=RESULTS / "sibling_warm_start.json")
    args = parser.parse_args()
    if Options(**CANDIDATES[DEFAULT]) != Options():
        raise SystemExit(f"{DEFAULT!r} is no longer the default Options(): its committed runs are not the default's")
    paths = sorted(args.data.glob("benchmark_hub_*.json.gz"))
    kernels = {}
    for path in paths:
        if (match := NAME.match(_stem(path))):
            kernels.setdefault(match["kernel"], []).append(path)
    if not any(len(group) > 1 for group in kernels.values()):
        raise SystemExit(f"{args.data}: no kernel recorded on two GPUs or more (give --data)")
    budget = max(args.budgets)
    document = {**provenance(" ".join(["python", *sys.argv]), "CPU replay"),
                "data": str(args.data), "seeds": args.seeds, "budgets": args.budgets, "top": args.top,
                "sampler": "local, Options() (the shipped default: " + DEFAULT + ")",
                "no_sibling": [_stem(path) for path in paths if not NAME.match(_stem(path))
                               or len(kernels[NAME.match(_stem(path))["kernel"]]) < 2],
                "spaces": {}}
    started = time.monotonic()
    loaded, runs = {}, {}  # stem -> (space, siblings); stem -> variant -> seed -> best seconds
    for kernel, group in kernels.items():
        if len(group) < 2:
            continue
        spaces = {_stem(path): recorded.load(path) for path in group}
        for stem, space in spaces.items():
            siblings = [other for name, other in spaces.items() if name != stem]
            assert all(other.domains == space.domains for other in siblings), "siblings share the parameter space"
            cold = cold_runs(stem, args.seeds)
            verified = {}
            for seed in range(min(args.verify, args.seeds)):
                again = replay(space, budget, "local", seed).best_seconds
                verified[seed] = len(again) == len(cold[seed][:budget]) and all(
                    abs(a - b) <= 1e-12 * b for a, b in zip(again, cold[seed]))  # the file keeps milliseconds
                if not verified[seed]:
                    raise SystemExit(f"{stem} seed {seed}: today's cold replay differs from the committed run")
            loaded[stem] = (space, siblings)
            runs[stem] = {"cold": {seed: cold[seed] for seed in range(args.seeds)}}
            document["spaces"][stem] = {"kernel": kernel, "siblings": [other.name for other in siblings],
                                        "optimum_seconds": space.optimum, "cold_verified_seeds": verified,
                                        "variants": {}}
            _score(document, stem, runs[stem], args)
    for top in args.top:  # the product's variant (top 1) first, for every space, so that a cut-off run has it
        for stem, (space, siblings) in loaded.items():
            starts, name = queue(siblings, top), f"top {top}"
            document["spaces"][stem]["variants"][name] = {"queued": [
                {"config": dict(zip(space.domains, key)),
                 "fraction_here": fraction(space.optimum, [space.results[key].seconds or float("inf")], 1)
                 if key in space.results else None} for key in starts]}
            runs[stem][name] = {seed: replay(space, budget, "local", seed, starts=starts).best_seconds
                                for seed in range(args.seeds)}
            _score(document, stem, runs[stem], args)
            args.out.write_text(json.dumps(document, indent=1))  # after each, so a cut-off run keeps those done
            print(f"{stem} {name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    document["seconds"] = round(time.monotonic() - started)
    args.out.write_text(json.dumps(document, indent=1))
    print(table(document))


def _score(document: dict, stem: str, variants: dict, args) -> None:
    """The space's raw fractions (variant -> seed -> one per budget, in `budgets` order) and cells:
    mean, standard error, and for a warm start the paired difference to the cold run of each seed."""
    space = document["spaces"][stem]
    optimum = space["optimum_seconds"]
    raw = {name: {str(seed): [fraction(optimum, best, b) for b in args.budgets] for seed, best in by_seed.items()}
           for name, by_seed in variants.items()}
    space["raw_fractions"], space["cells"] = raw, {}
    for name in variants:
        space["cells"][name] = {}
        for index, b in enumerate(args.budgets):
            values = [raw[name][str(seed)][index] for seed in range(args.seeds)]
            found = cell(values)
            if name != "cold":
                found["minus_cold"] = cell([value - raw["cold"][str(seed)][index] for seed, value in enumerate(values)])
            space["cells"][name][str(b)] = found


def table(document: dict) -> str:
    budgets = document["budgets"]
    variants = ["cold"] + [f"top {top}" for top in document["top"]]
    lines = ["| held-out space | start | queued, best of them | " + " | ".join(map(str, budgets)) + " |",
             "| --- | --- | ---: |" + " ---: |" * len(budgets)]
    for stem, entry in document["spaces"].items():
        for name in (name for name in variants if name in entry["cells"]):
            queued = entry["variants"].get(name, {}).get("queued")
            alone = (f"{len(queued)}, {max((q['fraction_here'] or 0.0) for q in queued):.3f}" if queued else "-")
            cells = []
            for b in budgets:
                found = entry["cells"][name][str(b)]
                text = f"{found['mean']:.3f} ± {found['se']:.3f}"
                if "minus_cold" in found:
                    text += f" ({found['minus_cold']['mean']:+.3f} ± {found['minus_cold']['se']:.3f})"
                cells.append(text)
            label = stem.removeprefix("benchmark_hub_") if name == "cold" else ""
            lines.append(f"| {label} | {name} | {alone} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
