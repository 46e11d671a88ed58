"""Session 22's prototype, not shipped: after TPE's turn, each run picks the variant it goes on as by
a statistic of the turn's own best-so-far curve, among the candidates that share that turn (so a
switched run is exactly the recorded run of the variant it picks, seed for seed: no new replays).
Rules: "always V", or "if statistic > t then A else B" for three statistics of the first 50
evaluations (gain = best at 10 / best at 50; improvements in evaluations 11..50; evaluations
since the last improvement), t at their deciles, A and B any two of the family. Scored
leave-one-space-out with replay_experiment.py's rule (a space's score is the mean over the five
budgets; the best worst training space wins), against the runs in ../candidates-*.jsonl.gz and
the rivals in ../summary.json.

    python bench/results/search_efficiency/prototypes/post_turn_switch.py   # from the repository root
"""
import gzip
import itertools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from provenance import provenance  # noqa: E402

from tuner.recorded import load  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BUDGETS = [25, 50, 100, 200, 400]
SEEDS = range(100)
FAMILY = ["TPE first 50", "TPE first 50, wide share 0.05", "TPE first 50, wide share 0.1", "TPE first 50, doubling",
          "TPE first 50, wide share 0.1, GP share 0.1", "TPE first 50, wide share 0.1, GP share 0.25",
          "TPE first 50, wide share 0.1, GP share 0.5", "TPE first 50, wide share 0.1, stalled 20 GP share 0.5"]
DEFAULT = "TPE first 50, wide share 0.1"
STATISTICS = ("gain", "improvements", "since_last")


def _runs():
    spaces = sorted(path.name.removeprefix("candidates-").removesuffix(".jsonl.gz")
                    for path in RESULTS.glob("candidates-*.jsonl.gz"))
    runs, optimum = {}, {}
    for space in spaces:
        optimum[space] = load(DATA / f"{space}.json.gz").optimum * 1e3
        with gzip.open(RESULTS / f"candidates-{space}.jsonl.gz", "rt") as lines:
            for line in lines:
                row = json.loads(line)
                if row["candidate"] in FAMILY and row["seed"] in SEEDS:
                    runs[space, row["candidate"], row["seed"]] = [float("inf") if ms is None else ms
                                                                  for ms in row["best_ms"]]
    return spaces, runs, optimum


def _statistics(curve) -> dict:
    head = curve[:50]
    last = max([i for i in range(1, 50) if head[i] < head[i - 1]], default=0)
    return {"gain": head[9] / head[49] if head[9] < float("inf") else 1e9,
            "improvements": sum(1 for a, b in zip(head[10:], head[11:]) if b < a), "since_last": 49 - last}


def main() -> None:
    spaces, runs, optimum = _runs()
    differ = sum(len({tuple(runs[space, variant, seed][:50]) for variant in FAMILY}) > 1
                 for space in spaces for seed in SEEDS)
    print(f"runs whose first 50 evaluations differ across the family: {differ} (of {len(spaces) * len(SEEDS)})")
    said = {(space, seed): _statistics(runs[space, DEFAULT, seed]) for space in spaces for seed in SEEDS}
    rules = [("always", None, variant, variant) for variant in FAMILY]
    for name in STATISTICS:
        values = sorted({found[name] for found in said.values()})
        for t in sorted({values[int(q / 10 * (len(values) - 1))] for q in range(1, 10)}):
            rules += [(name, t, a, b) for a, b in itertools.permutations(FAMILY, 2)]

    def fractions(rule, space, budget):
        name, t, a, b = rule
        picked = [a if name == "always" or said[space, seed][name] > t else b for seed in SEEDS]
        return [optimum[space] / runs[space, variant, seed][budget - 1] for variant, seed in zip(picked, SEEDS)]

    scores = {}

    def score(rule, space):
        if (rule, space) not in scores:
            scores[rule, space] = statistics.mean(statistics.mean(fractions(rule, space, b)) for b in BUDGETS)
        return scores[rule, space]

    summary = json.loads((RESULTS / "summary.json").read_text())
    print(f"{len(rules)} rules; held out: the switch's cells, then the shipped procedure's (summary.json); "
          "* behind the best rival by more than two standard errors")
    behind = {"switch": 0, "shipped": 0}
    means = {"switch": {b: [] for b in BUDGETS}, "shipped": {b: [] for b in BUDGETS}}
    for out in spaces:
        rule = max(rules, key=lambda rule: min(score(rule, space) for space in spaces if space != out))
        rivals = [cells for name, cells in summary["summary"][out].items()
                  if not name.startswith("candidate") and name != "tuner random"]
        shipped = summary["selection"]["held_out"][out]["cells"]
        line = {"switch": [], "shipped": []}
        for b in BUDGETS:
            rival = max((cells[str(b)] for cells in rivals), key=lambda cell: cell["mean"])
            xs = fractions(rule, out, b)
            ours = {"switch": (statistics.mean(xs), statistics.stdev(xs) / len(xs) ** 0.5),
                    "shipped": (shipped[str(b)]["mean"], shipped[str(b)]["se"])}
            for who, (mean, se) in ours.items():
                late = rival["mean"] - mean > 2 * (se ** 2 + rival["se"] ** 2) ** 0.5
                behind[who] += late
                means[who][b].append(mean)
                line[who].append(f"{mean:.3f}{'*' if late else ' '}")
        name, t, a, b = rule
        picked = a if name == "always" else f"{name} > {t:.4g}: {a}; else {b}"
        print(f"{out.removeprefix('benchmark_hub_'):26} {' '.join(line['switch'])} | shipped "
              f"{' '.join(line['shipped'])} | {picked}")
    for who in ("switch", "shipped"):
        print(f"{who}: held-out means {' '.join(f'{statistics.mean(means[who][b]):.3f}' for b in BUDGETS)}, "
              f"worst {' '.join(f'{min(means[who][b]):.3f}' for b in BUDGETS)}, {behind[who]} cells behind")
    picked = max(rules, key=lambda rule: min(score(rule, space) for space in spaces))
    for name, rule in (("picked on all ten", picked), ("shipped default", ("always", None, DEFAULT, DEFAULT))):
        each = {space: score(rule, space) for space in spaces}
        worst = min(each, key=each.get)
        print(f"{name}: {rule}; worst space score {each[worst]:.4f} ({worst.removeprefix('benchmark_hub_')}), "
              f"mean {statistics.mean(each.values()):.4f}")
    print(json.dumps(provenance("python bench/results/search_efficiency/prototypes/post_turn_switch.py",
                                "CPU only (replays recorded before; nothing measured on a GPU)")))


if __name__ == "__main__":
    main()
