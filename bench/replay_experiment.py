"""The default search chosen by leave-one-space-out, and compared with Optuna's samplers and
Kernel Tuner's strategies on every recorded space (docs/search.md).

    python bench/replay_experiment.py [OUTDIR] [--seeds 100] [--long-seeds 100] [--kt-seeds 100]
                                      [--workers 2]

Every file in ../shared/data is a space. Raw runs are appended to OUTDIR (default
bench/results/search_efficiency), and runs already there are skipped, so an interrupted
experiment continues:
- candidates-<space>.jsonl.gz: each candidate default (the `local` sampler with the options in
  CANDIDATES: the shares of global moves, wide local moves, TPE's proposals and Gaussian-process
  moves, after TPE's turn (and after a stall) and in it, doubling moves on or off, how many
  configurations offer their neighbours, and how many measured configurations Optuna's TPE
  chooses before the local search takes over), seeds 0..seeds-1, 400 evaluations each (a search
  does not plan by its budget, so its first N evaluations are the search of budget N);
- tuner-<space>.jsonl: Optuna's TPE (400 evaluations for seeds below --long-seeds, 100 for the
  rest: a run of 400 costs seconds) and random search (400), with `evaluations` per line (lines
  without it are 400-evaluation runs of an earlier experiment); a seed run again for longer keeps
  both lines, and the summary reads the longer, whose start is the shorter;
- kernel_tuner-<space>.jsonl: Kernel Tuner's strategies, through bench/kernel_tuner_strategies.py,
  --kt-seeds each at every budget (a run takes a tenth of a second, bayes_opt's of 400 1.5 to
  6 seconds).
The selection: for each space held out, the candidate whose worst score over the other nine is
best, a space's score being its mean fraction of the optimum averaged over the budgets; then the
same rule on all ten picks the default that ships. summary.json (with versions, command and
commit) and table.md are written from the raw runs, and the tables are printed.
"""
import argparse
import concurrent.futures
import functools
import gzip
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
from pathlib import Path

from kernel_tuner_strategies import STRATEGIES
from provenance import provenance

from tuner import recorded
from tuner.replay import replay
from tuner.sampler import Options

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = (25, 50, 100, 200, 400)
PLAIN = {"wide_share": 0.0, "tpe_share": 0.0, "doubling": False, "expanded": 2, "tpe_first": 0, "gp_share": 0.0,
         "turn_gp_share": 0.0, "stalled_after": 0}
CANDIDATES = {**{f"global share {share}": {**PLAIN, "global_share": share} for share in (0.1, 0.25, 0.5, 0.75)},
              **{f"global share 0.25, wide share {wide}": {**PLAIN, "global_share": 0.25, "wide_share": wide}
                 for wide in (0.05, 0.1, 0.25)},
              "doubling": {**PLAIN, "global_share": 0.25, "doubling": True},
              "doubling, wide share 0.1": {**PLAIN, "global_share": 0.25, "doubling": True, "wide_share": 0.1},
              "doubling, TPE share 0.5": {**PLAIN, "global_share": 0.25, "doubling": True, "tpe_share": 0.5},
              "doubling, one expanded": {**PLAIN, "global_share": 0.25, "doubling": True, "expanded": 1},
              **{f"TPE first {first}, doubling": {**PLAIN, "global_share": 0.25, "doubling": True, "tpe_first": first}
                 for first in (25, 50)},
              "TPE first 50": {**PLAIN, "global_share": 0.25, "tpe_first": 50},
              **{f"TPE first 50, wide share {wide}":
                 {**PLAIN, "global_share": 0.25, "tpe_first": 50, "wide_share": wide} for wide in (0.05, 0.1)},
              **{f"TPE first 50, wide share 0.1, GP share {share}":
                 {**PLAIN, "global_share": 0.25, "tpe_first": 50, "wide_share": 0.1, "gp_share": share}
                 for share in (0.1, 0.25, 0.5)},
              "TPE first 50, wide share 0.1, GP share 0.25, turn GP share 0.25":
              {**PLAIN, "global_share": 0.25, "tpe_first": 50, "wide_share": 0.1, "gp_share": 0.25,
               "turn_gp_share": 0.25},
              "TPE first 50, doubling, wide share 0.1, GP share 0.25, turn GP share 0.25":
              {**PLAIN, "global_share": 0.25, "tpe_first": 50, "doubling": True, "wide_share": 0.1, "gp_share": 0.25,
               "turn_gp_share": 0.25},
              "TPE first 50, wide share 0.1, stalled 20 GP share 0.5, turn GP share 0.25":
              {**PLAIN, "global_share": 0.25, "tpe_first": 50, "wide_share": 0.1, "turn_gp_share": 0.25,
               "stalled_after": 20, "stalled_gp_share": 0.5},
              "TPE first 50, wide share 0.1, stalled 20 GP share 0.5":
              {**PLAIN, "global_share": 0.25, "tpe_first": 50, "wide_share": 0.1, "stalled_after": 20,
               "stalled_gp_share": 0.5}}
BASELINES = ("tpe", "random")


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


@functools.cache
def _space(path: str) -> recorded.RecordedSpace:
    return recorded.load(path)


def _run(path: str, kind: str, name: str, seed: int, evaluations: int) -> dict:
    """One replay: a candidate (the local sampler with its options) or an Optuna sampler."""
    if kind == "candidate":
        run = replay(_space(path), evaluations, "local", seed, options=Options(**CANDIDATES[name]))
    else:
        run = replay(_space(path), evaluations, name, seed)
    key = "candidate" if kind == "candidate" else "sampler"
    return {key: name, "seed": seed, "evaluations": evaluations,
            "best_ms": [seconds * 1e3 if seconds != float("inf") else None for seconds in run.best_seconds]}


def _asked(row: dict) -> int:
    """The evaluations a run asked for (lines without the field are 400-evaluation runs of an earlier
    experiment); it may have made fewer, where the space ran out."""
    return row.get("evaluations", max(BUDGETS))


def longest_runs(rows: list[dict]) -> list[dict]:
    """Each (sampler, seed)'s longest run among Optuna samplers' `rows`: a shorter run of a seed
    run again for longer is the longer one's start."""
    longest = {}
    for row in rows:
        key = (row["sampler"], row["seed"])
        if key not in longest or _asked(row) > _asked(longest[key]):
            longest[key] = row
    return list(longest.values())


def _open(path: Path, mode: str):
    """Text lines of a results file; the candidates' files are gzipped (each is megabytes)."""
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else path.open(mode)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with _open(path, "r") as file:
        return [json.loads(line) for line in file]


def _out(outdir: Path, path: Path, kind: str) -> Path:
    if kind == "candidate":
        return outdir / f"candidates-{_stem(path)}.jsonl.gz"
    return outdir / f"tuner-{_stem(path)}.jsonl"


def _pool(workers: int) -> concurrent.futures.Executor:
    """Fresh worker processes with one BLAS thread each: the workers fill the cores, and a Gaussian
    process's sums come out the same whatever the machine's core count."""
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def run_replays(spaces: list[Path], outdir: Path, seeds: int, long_seeds: int, workers: int) -> None:
    """Every missing replay: the candidates, TPE's long runs, its short ones, then random search
    seed by seed over the spaces (so that a run cut short leaves each space as many seeds)."""
    phases = [[(path, "candidate", name, seed) for path in spaces for name in CANDIDATES for seed in range(seeds)],
              [(path, "sampler", "tpe", seed) for path in spaces for seed in range(min(seeds, long_seeds))],
              [(path, "sampler", "tpe", seed) for path in spaces for seed in range(long_seeds, seeds)],
              [(path, "sampler", "random", seed) for seed in range(seeds) for path in spaces]]
    done = {}  # (path, kind, name, seed) -> the most evaluations a run of it asked for
    for path in spaces:
        for kind in ("candidate", "sampler"):
            for row in _rows(_out(outdir, path, kind)):
                key = (path, kind, row.get(kind), row["seed"])
                done[key] = max(done.get(key, 0), _asked(row))

    def evaluations(name: str, seed: int) -> int:
        return 100 if name == "tpe" and seed >= long_seeds else max(BUDGETS)

    todo = [(path, kind, name, seed) for phase in phases for path, kind, name, seed in phase
            if done.get((path, kind, name, seed), 0) < evaluations(name, seed)]
    with _pool(workers) as pool:
        futures = {pool.submit(_run, str(path), kind, name, seed, evaluations(name, seed)): (path, kind)
                   for path, kind, name, seed in todo}
        for future in concurrent.futures.as_completed(futures):
            path, kind = futures[future]
            row = future.result()
            with _open(_out(outdir, path, kind), "a") as file:
                file.write(json.dumps(row) + "\n")
            print(f"{_stem(path)} {row[kind]} seed {row['seed']}", file=sys.stderr, flush=True)


def run_kernel_tuner(spaces: list[Path], outdir: Path, seeds: int, workers: int) -> None:
    """Kernel Tuner's strategies on every space, `workers` spaces at a time (each has its own file)."""
    script = str(ROOT / "bench" / "kernel_tuner_strategies.py")

    def strategies(path: Path) -> None:
        out = str(outdir / f"kernel_tuner-{_stem(path)}.jsonl")
        subprocess.run([sys.executable, script, str(path), out, "--seeds", str(seeds), "--strategies", *STRATEGIES],
                       check=True)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(strategies, spaces))


def _fraction(optimum_ms: float, best_ms: list, budget: int) -> float:
    """The fraction of the optimum found within `budget` evaluations of a run (all of them if
    it stopped sooner: the space ran out, or the sampler converged); 0 before any success."""
    found = best_ms[:budget]
    return optimum_ms / found[-1] if found and found[-1] else 0.0


def _cell(fractions: list[float]) -> dict:
    stdev = statistics.stdev(fractions) if len(fractions) > 1 else 0.0
    return {"mean": statistics.fmean(fractions), "se": stdev / len(fractions) ** 0.5, "min": min(fractions),
            "runs": len(fractions)}


def summarize(spaces: list[Path], outdir: Path) -> dict:
    """Per space, strategy and budget: the mean fraction of the optimum, its standard error,
    the worst run and the number of runs."""
    summary = {}
    for path in spaces:
        optimum_ms = _space(str(path)).optimum * 1e3
        runs = {}
        for row in _rows(_out(outdir, path, "candidate")):
            for budget in BUDGETS:
                runs.setdefault(f"candidate {row['candidate']}", {}).setdefault(budget, []).append(
                    _fraction(optimum_ms, row["best_ms"], budget))
        for row in longest_runs(_rows(outdir / f"tuner-{_stem(path)}.jsonl")):
            if row["sampler"] in BASELINES:
                for budget in BUDGETS:
                    if budget <= _asked(row):
                        runs.setdefault(f"tuner {row['sampler']}", {}).setdefault(budget, []).append(
                            _fraction(optimum_ms, row["best_ms"], budget))
        for row in _rows(outdir / f"kernel_tuner-{_stem(path)}.jsonl"):
            runs.setdefault(f"kernel_tuner {row['strategy']}", {}).setdefault(row["budget"], []).append(
                _fraction(optimum_ms, row["best_ms"], row["budget"]))
        summary[_stem(path)] = {strategy: {str(budget): _cell(cells) for budget, cells in sorted(by_budget.items())}
                                for strategy, by_budget in runs.items()}
    return summary


def _score(summary: dict, candidate: str, spaces: list[str]) -> float:
    """The candidate's worst space among `spaces`, by its mean fraction averaged over the budgets."""
    return min(statistics.fmean(summary[space][f"candidate {candidate}"][str(budget)]["mean"] for budget in BUDGETS)
               for space in spaces)


def pick(summary: dict, spaces: list[str]) -> str:
    """The selection procedure: the candidate with the best worst-space score on `spaces`."""
    return max(CANDIDATES, key=lambda candidate: _score(summary, candidate, spaces))


def leave_one_space_out(summary: dict) -> dict:
    """For each space, the candidate picked on the other nine and its scores on the held-out one."""
    spaces = list(summary)
    held_out = {}
    for space in spaces:
        chosen = pick(summary, [other for other in spaces if other != space])
        held_out[space] = {"picked": chosen, "cells": summary[space][f"candidate {chosen}"]}
    return {"held_out": held_out, "shipped": pick(summary, spaces)}


def _best_rival(strategies: dict, budget: int) -> tuple[str, dict]:
    """The best of TPE and Kernel Tuner's strategies at `budget`, by mean."""
    rivals = {name: cells[str(budget)] for name, cells in strategies.items()
              if (name == "tuner tpe" or name.startswith("kernel_tuner")) and str(budget) in cells}
    name = max(rivals, key=lambda name: rivals[name]["mean"])
    return name, rivals[name]


def _text(cell: dict) -> str:
    return f"{cell['mean']:.3f} ± {cell['se']:.3f}"


def tables(summary: dict, selection: dict) -> str:
    header = "| " + " | ".join(str(budget) for budget in BUDGETS) + " |"
    lines = ["**Held out.** The default picked on the other nine spaces, scored on the one held out: mean "
             "fraction of the optimum ± its standard error; below it, the best of TPE and Kernel Tuner's "
             "strategies at that budget (`*`: the default is behind it by more than two standard errors)", "",
             "| space | picked |" + header[1:], "| --- | --- |" + " ---: |" * len(BUDGETS)]
    for space, held in selection["held_out"].items():
        cells, rivals = [], []
        for budget in BUDGETS:
            cell = held["cells"][str(budget)]
            name, rival = _best_rival(summary[space], budget)
            behind = rival["mean"] - cell["mean"] > 2 * (cell["se"] ** 2 + rival["se"] ** 2) ** 0.5
            cells.append(_text(cell) + (" *" if behind else ""))
            rivals.append(f"{_text(rival)} ({name.split()[-1]})")
        lines.append(f"| {space.removeprefix('benchmark_hub_')} | {held['picked']} | " + " | ".join(cells) + " |")
        lines.append("| | best rival | " + " | ".join(rivals) + " |")

    def worst(cell_of) -> str:
        cells = []
        for budget in BUDGETS:
            found = {space: cell_of(space, budget) for space in summary}
            space = min((space for space in found if found[space]), key=lambda space: found[space]["mean"])
            cells.append(f"{_text(found[space])} ({space.removeprefix('benchmark_hub_')})")
        return " | ".join(cells)

    def best_kernel_tuner(space: str, budget: int) -> dict | None:
        cells = [cells[str(budget)] for name, cells in summary[space].items()
                 if name.startswith("kernel_tuner") and str(budget) in cells]
        return max(cells, key=lambda cell: cell["mean"]) if cells else None

    lines += ["", "| worst space |" + header[1:], "| --- |" + " ---: |" * len(BUDGETS),
              "| the default, held out (leave-one-space-out) | "
              + worst(lambda space, budget: selection["held_out"][space]["cells"][str(budget)]) + " |",
              "| Optuna's TPE | "
              + worst(lambda space, budget: summary[space].get("tuner tpe", {}).get(str(budget))) + " |",
              "| the best Kernel Tuner strategy of each space | " + worst(best_kernel_tuner) + " |", "",
              f"Picked on all ten spaces, the default that ships: **{selection['shipped']}**.", ""]
    for space, strategies in summary.items():
        runs = sorted({cell["runs"] for cells in strategies.values() for cell in cells.values()})
        lines += [f"**{space}**: mean fraction of the optimum ± its standard error "
                  f"({'/'.join(map(str, runs))} runs per cell: see summary.json)", "",
                  "| strategy |" + header[1:], "| --- |" + " ---: |" * len(BUDGETS)]
        for strategy, cells in strategies.items():
            lines.append(f"| {strategy} | " + " | ".join(_text(cells[str(budget)]) if str(budget) in cells else "-"
                                                       for budget in BUDGETS) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?", default=ROOT / "bench" / "results" / "search_efficiency")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--long-seeds", type=int, default=100, help="TPE seeds that run 400 evaluations, not 100")
    parser.add_argument("--kt-seeds", type=int, default=100, help="seeds of each Kernel Tuner strategy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--summarize-only", action="store_true", help="only summarize the raw runs already there")
    args = parser.parse_args()
    spaces = sorted((ROOT.parent / "shared" / "data").glob("*.json.gz"))
    args.outdir.mkdir(parents=True, exist_ok=True)
    if not args.summarize_only:
        run_replays(spaces, args.outdir, args.seeds, args.long_seeds, args.workers)
        run_kernel_tuner(spaces, args.outdir, args.kt_seeds, args.workers)
    summary = summarize(spaces, args.outdir)
    selection = leave_one_space_out(summary)
    document = {**provenance(" ".join(["python", *sys.argv]), "CPU (replay of recorded measurements)"),
                "spaces": [os.path.relpath(path, ROOT) for path in spaces], "candidates": CANDIDATES,
                "selection": selection, "summary": summary}
    (args.outdir / "summary.json").write_text(json.dumps(document, indent=1))
    (args.outdir / "table.md").write_text(tables(summary, selection))
    print(tables(summary, selection))


if __name__ == "__main__":
    main()
