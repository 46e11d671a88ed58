"""How predictable each recorded space's optimum is from the space's own structure: a least-squares
model of log time fitted to EVERY recorded configuration that succeeded, with one term per
parameter value (main effects) or also one per pair of values of two parameters (pairwise), and
where it ranks the optimum among the configurations it predicts. A search sees at most a few
hundred configurations; where even a model fitted to all of them ranks the optimum far down,
a model-guided search can find it only by luck. Also R^2 of each fit, and how many configurations
lie within 3% of the optimum.

    python bench/space_predictability.py > bench/results/search_efficiency/space_predictability.json
"""
import glob
import itertools
import json
from pathlib import Path

import numpy as np
from provenance import provenance

from tuner import recorded

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def indicators(keys: list[tuple], domains: dict, pairwise: bool) -> np.ndarray:
    """One 0/1 column per parameter value (and, if `pairwise`, per pair of values that occurs)."""
    codes = np.array([[domain.index(value) for value, domain in zip(key, map(list, domains.values()))]
                      for key in keys])
    columns = [codes[:, j] == v for j, size in enumerate(map(len, domains.values())) for v in range(size)]
    if pairwise:
        for j, k in itertools.combinations(range(codes.shape[1]), 2):
            pairs = codes[:, j] * len(list(domains.values())[k]) + codes[:, k]
            columns += [pairs == value for value in np.unique(pairs)]
    return np.array(columns, dtype=float).T


def fit(keys: list[tuple], domains: dict, log_time: np.ndarray, pairwise: bool) -> dict:
    design = indicators(keys, domains, pairwise)
    coefficients, *_ = np.linalg.lstsq(design, log_time, rcond=None)
    predicted = design @ coefficients
    best = int(np.argmin(log_time))
    return {"terms": design.shape[1], "r2": round(float(1 - np.var(log_time - predicted) / np.var(log_time)), 3),
            "optimum_rank": int((predicted < predicted[best]).sum()) + 1}


def main() -> None:
    rows = []
    for path in sorted(glob.glob(str(DATA / "*.json.gz"))):
        space = recorded.load(path)
        keys = [key for key, result in space.results.items() if result.seconds is not None]
        log_time = np.log([space.results[key].seconds for key in keys])
        rows.append({"space": Path(path).name, "succeeded": len(keys),
                     "within_3_percent": int((np.exp(log_time.min() - log_time) >= 0.97).sum()),
                     "main_effects": fit(keys, space.domains, log_time, False),
                     "pairwise": fit(keys, space.domains, log_time, True)})
    print(json.dumps({**provenance("python bench/space_predictability.py", "none: the recorded spaces alone"),
                      "spaces": rows}, indent=1))


if __name__ == "__main__":
    main()
