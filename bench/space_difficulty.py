"""How hard each recorded space makes issue 19's targets (0.97 of the optimum at 100 evaluations,
0.995 at 400), from the space alone and from the raw runs in bench/results/search_efficiency/.

For each space in ../shared/data: how many recorded configurations lie within 3% and 0.5% of the
optimum; how likely uniform draws of recorded configurations (failed ones count as evaluations,
as in the replays) are to find one within 100 and 400 draws, and their expected fraction of the
optimum, both exact; and the hit rates of the default (the candidate summary.json says ships),
Optuna's TPE and each Kernel Tuner strategy: the share of their runs that reached 0.97 by 100
evaluations and 0.995 by 400. Where a target needs configurations that few runs of any strategy
find, a mean above it needs a search that finds them nearly every time.

    python bench/space_difficulty.py [--out bench/results/search_efficiency/space_difficulty.json]
"""
import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provenance import provenance  # noqa: E402
from replay_experiment import _asked, _fraction, _rows, longest_runs  # noqa: E402

from tuner import recorded  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
RUNS = ROOT / "bench" / "results" / "search_efficiency"
TARGETS = {100: 0.97, 400: 0.995}


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) if 0 <= k <= n else -math.inf


def uniform(fractions: list[float], draws: int) -> dict:
    """Uniform draws without replacement from `fractions` (one per recorded configuration): the
    expected best fraction, and the chance of one at or above each target."""
    ranked, total = sorted(fractions, reverse=True), len(fractions)
    draws = min(draws, total)
    denominator = _log_choose(total, draws)
    # The best drawn has rank i when it is drawn and the other draws - 1 come from below it.
    expected = sum(value * math.exp(_log_choose(total - rank, draws - 1) - denominator)
                   for rank, value in enumerate(ranked, start=1) if total - rank >= draws - 1)
    hits = {}
    for target in TARGETS.values():
        missing = total - sum(value >= target for value in ranked)
        hits[f"{target}"] = 1 - math.exp(_log_choose(missing, draws) - denominator)
    return {"expected_fraction": expected, "chance_of_at_least": hits}


def hit_rates(stem: str, optimum_ms: float, default: str) -> dict:
    """Per strategy and budget: the share of runs at or above that budget's target, and the runs;
    `default` is the candidate that ships."""
    runs = {}  # (strategy, budget) -> fractions
    for line in _rows(RUNS / f"candidates-{stem}.jsonl.gz"):
        if line["candidate"] == default:
            for budget in TARGETS:
                runs.setdefault((f"default ({default})", budget), []).append(
                    _fraction(optimum_ms, line["best_ms"], budget))
    for line in longest_runs(_rows(RUNS / f"tuner-{stem}.jsonl")):
        if line["sampler"] == "tpe":
            for budget in TARGETS:
                if _asked(line) >= budget:
                    runs.setdefault(("tpe", budget), []).append(_fraction(optimum_ms, line["best_ms"], budget))
    for line in _rows(RUNS / f"kernel_tuner-{stem}.jsonl"):
        if line["budget"] in TARGETS:
            runs.setdefault((f"kernel_tuner {line['strategy']}", line["budget"]), []).append(
                _fraction(optimum_ms, line["best_ms"], line["budget"]))
    rates = {}
    for (strategy, budget), fractions in sorted(runs.items()):
        rates.setdefault(strategy, {})[str(budget)] = {
            "hit_rate": sum(value >= TARGETS[budget] for value in fractions) / len(fractions), "runs": len(fractions)}
    return rates


def difficulty(path: Path, default: str) -> dict:
    space = recorded.load(path)
    optimum = space.optimum
    fractions = [optimum / result.seconds if result.seconds else 0.0 for result in space.results.values()]
    stem = path.name.removesuffix(".gz").removesuffix(".json")
    return {"space": stem, "recorded": len(fractions), "succeeded": sum(value > 0 for value in fractions),
            "within": {f"{target}": sum(value >= target for value in fractions) for target in TARGETS.values()},
            "next_below_0.97": max((value for value in fractions if value < 0.97), default=0.0),
            "uniform": {str(budget): uniform(fractions, budget) for budget in TARGETS},
            "hit_rates": hit_rates(stem, optimum * 1e3, default)}


def table(rows: list[dict]) -> str:
    lines = ["| space | configurations (succeeded) | ≥ 0.97 | ≥ 0.995 | next below 0.97 | uniform: P(≥ 0.97 by 100), "
             "mean | uniform: P(≥ 0.995 by 400), mean | default: hits at 100 / 400 | TPE: hits at 100 / 400 | "
             "best Kernel Tuner strategy: hits at 100 / 400 |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        rates = row["hit_rates"]

        def hits(strategy, budget):
            cell = rates.get(strategy, {}).get(budget)
            return f"{cell['hit_rate']:.2f} ({cell['runs']})" if cell else "-"

        def best_kernel_tuner(budget):
            ran = [name for name in rates if name.startswith("kernel_tuner") and budget in rates[name]]
            best = max(ran, key=lambda name: rates[name][budget]["hit_rate"])
            return f"{hits(best, budget)} {best.removeprefix('kernel_tuner ')}"

        near, far = row["uniform"]["100"], row["uniform"]["400"]
        default = next(name for name in rates if name.startswith("default ("))
        lines.append(
            f"| {row['space'].removeprefix('benchmark_hub_')} | {row['recorded']} ({row['succeeded']}) | "
            f"{row['within']['0.97']} | {row['within']['0.995']} | {row['next_below_0.97']:.3f} | "
            f"{near['chance_of_at_least']['0.97']:.2f}, {near['expected_fraction']:.3f} | "
            f"{far['chance_of_at_least']['0.995']:.2f}, {far['expected_fraction']:.3f} | "
            f"{hits(default, '100')} / {hits(default, '400')} | {hits('tpe', '100')} / {hits('tpe', '400')} | "
            f"{best_kernel_tuner('100')} / {best_kernel_tuner('400')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RUNS / "space_difficulty.json")
    args = parser.parse_args()
    shipped = json.loads((RUNS / "summary.json").read_text())["selection"]["shipped"]
    rows = [difficulty(path, shipped) for path in sorted(DATA.glob("*.json.gz"))]
    text = table(rows)
    command = " ".join([Path(sys.executable).name] + sys.argv)
    args.out.write_text(json.dumps({**provenance(command, "none: the recorded spaces and the replays' raw runs"),
                                    "targets": TARGETS, "spaces": rows,
                                    "table": text}, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
