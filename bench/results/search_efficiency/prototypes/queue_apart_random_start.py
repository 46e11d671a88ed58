"""The dropped prototype 'queued configurations do not shorten the random start' against the product's
warm start: cold / top 1 before (sibling_warm_start.json, the committed run) / top 1 with the prototype
(queue_apart_random_start.json, made at its commit; queue_apart_random_start.patch), per space and budget,
mean ± standard error, in parentheses the mean paired difference to cold ± its standard error, and the
paired difference of the prototype to the product's start. Also how many runs pass 0.70 by 50 evaluations.

    python bench/results/search_efficiency/prototypes/queue_apart_random_start.py
"""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEFORE = json.loads((HERE.parent / "sibling_warm_start.json").read_text())
AFTER = json.loads((HERE / "queue_apart_random_start.json").read_text())


def cell(values):
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5


def main():
    budgets = AFTER["budgets"]
    assert budgets == BEFORE["budgets"] and AFTER["seeds"] == BEFORE["seeds"]
    print(f"before: commit {BEFORE['commit']}; prototype: commit {AFTER['commit']}; {AFTER['seeds']} seeds")
    print("| held-out space | start | " + " | ".join(map(str, budgets)) + " | prototype - before at "
          + ", ".join(map(str, budgets)) + " | runs >= 0.70 by 50 |")
    print("| --- | --- |" + " ---: |" * (len(budgets) + 2))
    for stem, after in AFTER["spaces"].items():
        before = BEFORE["spaces"][stem]
        raw = {"cold": before["raw_fractions"]["cold"], "top 1 before": before["raw_fractions"]["top 1"],
               "top 1 prototype": after["raw_fractions"]["top 1"]}
        assert raw["cold"] == after["raw_fractions"]["cold"]
        seeds = sorted(raw["cold"], key=int)
        index50 = budgets.index(50)
        for name, by_seed in raw.items():
            cells = []
            for index in range(len(budgets)):
                mean, se = cell([by_seed[s][index] for s in seeds])
                text = f"{mean:.3f} ± {se:.3f}"
                if name != "cold":
                    d, dse = cell([by_seed[s][index] - raw["cold"][s][index] for s in seeds])
                    text += f" ({d:+.3f} ± {dse:.3f})"
                cells.append(text)
            versus = ""
            if name == "top 1 prototype":
                versus = ", ".join("{:+.3f} ± {:.3f}".format(*cell(
                    [by_seed[s][i] - raw["top 1 before"][s][i] for s in seeds])) for i in range(len(budgets)))
            passed = sum(by_seed[s][index50] >= 0.70 for s in seeds)
            label = stem.removeprefix("benchmark_hub_") if name == "cold" else ""
            print(f"| {label} | {name} | " + " | ".join(cells) + f" | {versus} | {passed} |")


if __name__ == "__main__":
    main()
