"""Search efficiency on recorded spaces: the project's default search against Optuna's other
samplers, random search and Kernel Tuner's strategies, on the same data (docs/search.md).

    python bench/replay_experiment.py OUTDIR [DATASET ...] [--seeds 20] [--workers 2]

DATASET defaults to every file in ../shared/data and every export in bench/data. For each, the
project's samplers run 400 evaluations per seed (they do not depend on the budget, so the first N
evaluations are the search of budget N), and Kernel Tuner's strategies run once per budget through
bench/kernel_tuner_strategies.py (some of them plan by the budget). Raw runs go to
OUTDIR/tuner-<dataset>.jsonl and OUTDIR/kernel_tuner-<dataset>.jsonl (appended, and skipped when
present, so an interrupted experiment continues); then OUTDIR/summary.json, OUTDIR/table.md and
OUTDIR/fraction_vs_evaluations.png are written from them, and the table is printed.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from kernel_tuner_strategies import BUDGETS, STRATEGIES
from provenance import provenance

from tuner import recorded
from tuner.replay import replay

ROOT = Path(__file__).resolve().parent.parent
SAMPLERS = ("local", "tpe", "nsga2", "random")


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


def _tuner_run(path: str, sampler: str, seed: int, budget: int) -> dict:
    run = replay(recorded.load(path), budget, sampler, seed)
    return {"sampler": sampler, "seed": seed, "recorded_cost_seconds": run.cost_seconds,
            "best_ms": [seconds * 1e3 if seconds != float("inf") else None for seconds in run.best_seconds]}


def run_tuner(path: Path, out: Path, seeds: int, workers: int) -> None:
    """The project's samplers, `seeds` runs each of max(BUDGETS) evaluations, appended to `out`."""
    done = {(row["sampler"], row["seed"]) for row in _rows(out)}
    todo = [(sampler, seed) for sampler in SAMPLERS for seed in range(seeds) if (sampler, seed) not in done]
    with concurrent.futures.ProcessPoolExecutor(workers) as pool, out.open("a") as file:
        futures = [pool.submit(_tuner_run, str(path), sampler, seed, max(BUDGETS)) for sampler, seed in todo]
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            file.write(json.dumps(row) + "\n")
            file.flush()
            print(f"{path.name} {row['sampler']} seed {row['seed']}: {len(row['best_ms'])} evaluations",
                  file=sys.stderr)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _fraction(optimum_ms: float, best_ms: list, budget: int) -> float:
    """The fraction of the optimum found within `budget` evaluations of a run (all of them if
    it stopped sooner: the space ran out, or the sampler converged); 0 before any success."""
    found = best_ms[:budget]
    return optimum_ms / found[-1] if found and found[-1] else 0.0


def _cell(runs: list[tuple[float, int]]) -> dict:
    fractions = [fraction for fraction, _ in runs]
    return {"mean": statistics.fmean(fractions), "min": min(fractions),
            "stdev": statistics.stdev(fractions) if len(fractions) > 1 else 0.0, "runs": len(runs),
            "mean_evaluations": statistics.fmean(count for _, count in runs)}


def summarize(datasets: list[Path], outdir: Path) -> dict:
    """Per strategy and budget: the mean, min and standard deviation of the fraction of the
    optimum, and the mean number of distinct configurations evaluated."""
    summary = {}
    for path in datasets:
        optimum_ms = recorded.load(path).optimum * 1e3
        runs = {}
        for row in _rows(outdir / f"tuner-{_stem(path)}.jsonl"):
            for budget in BUDGETS:
                runs.setdefault(f"tuner {row['sampler']}", {}).setdefault(budget, []).append(
                    (_fraction(optimum_ms, row["best_ms"], budget), min(budget, len(row["best_ms"]))))
        for row in _rows(outdir / f"kernel_tuner-{_stem(path)}.jsonl"):
            runs.setdefault(f"kernel_tuner {row['strategy']}", {}).setdefault(row["budget"], []).append(
                (_fraction(optimum_ms, row["best_ms"], row["budget"]), len(row["best_ms"])))
        summary[_stem(path)] = {strategy: {str(budget): _cell(cells) for budget, cells in sorted(by_budget.items())}
                                for strategy, by_budget in runs.items()}
    return summary


def table(summary: dict) -> str:
    lines = []
    for dataset, strategies in summary.items():
        runs = {cell["runs"] for cells in strategies.values() for cell in cells.values()}
        lines += [f"**{dataset}**: mean fraction of the optimum found over {'/'.join(map(str, sorted(runs)))} "
                  "runs, and in brackets the mean number of distinct configurations evaluated", "",
                  "| strategy | " + " | ".join(str(budget) for budget in BUDGETS) + " |",
                  "| --- |" + " ---: |" * len(BUDGETS)]
        for strategy, cells in strategies.items():
            lines.append(f"| {strategy} | " + " | ".join(
                f"{cells[str(budget)]['mean']:.3f} ({cells[str(budget)]['mean_evaluations']:.0f})"
                if str(budget) in cells else "-" for budget in BUDGETS) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(summary: dict, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(summary), figsize=(6.5 * len(summary), 4.8), squeeze=False)
    for axis, (dataset, strategies) in zip(axes[0], summary.items()):
        for strategy, cells in strategies.items():
            budgets = [budget for budget in BUDGETS if str(budget) in cells]
            style = {"linewidth": 2.5, "color": "black"} if strategy == "tuner local" else {"linewidth": 1}
            axis.plot(budgets, [cells[str(budget)]["mean"] for budget in budgets], marker="o", label=strategy, **style)
        axis.set_xscale("log")
        axis.minorticks_off()
        axis.set_xticks(BUDGETS, [str(budget) for budget in BUDGETS])
        axis.set_xlabel("evaluations")
        axis.set_ylabel("fraction of the optimum (mean over seeds)")
        axis.set_title(dataset, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(target, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("datasets", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    datasets = args.datasets or sorted((ROOT.parent / "shared" / "data").glob("*.json.gz")) + sorted(
        (ROOT / "bench" / "data").glob("*.kt.json.gz"))
    args.outdir.mkdir(parents=True, exist_ok=True)
    for path in datasets:
        recorded.load(path)
        run_tuner(path, args.outdir / f"tuner-{_stem(path)}.jsonl", args.seeds, args.workers)
        subprocess.run([sys.executable, str(ROOT / "bench" / "kernel_tuner_strategies.py"), str(path),
                        str(args.outdir / f"kernel_tuner-{_stem(path)}.jsonl"), "--seeds", str(args.seeds),
                        "--strategies", *STRATEGIES, "--budgets", *map(str, BUDGETS)], check=True)
    summary = summarize(datasets, args.outdir)
    document = {**provenance(" ".join(["python", *sys.argv]), "CPU (replay of recorded measurements)"),
                "search_versions": {name: version(name) for name in ("optuna", "kernel_tuner", "numpy")},
                "datasets": [os.path.relpath(path, ROOT) for path in datasets], "seeds": args.seeds, "summary": summary}
    (args.outdir / "summary.json").write_text(json.dumps(document, indent=1))
    (args.outdir / "table.md").write_text(table(summary))
    plot(summary, args.outdir / "fraction_vs_evaluations.png")
    print(table(summary))


if __name__ == "__main__":
    main()
