"""How a correct kernel's error and a wrong one's look to verification's two bounds (tuner/measure.py
verify): the relative Frobenius error of the whole result, and each element's error over its scale
(|A| @ |B|)[i, j].

    python bench/element_error.py bench/results/element_error.json

CPU only, no kernel runs. "correct": each element summed in float32 one term at a time, as a
thread of a tiled kernel accumulates it, for K from 16 to 16,384 (uniform [-1, 1] entries, 64x64
results). "one fragment misses a k-tile": the correct float32 result at 4096x4096x4096 with one
4x8 block of elements missing the 8 terms of one k-tile; "one element off by 8": the same result
with one element moved by 8. The bound for float32 accumulation is 1e-4 for both (tuner/family.py).
"""
import json
import sys
from pathlib import Path

import numpy as np

from provenance import provenance

TOLERANCE = 1e-4


def _errors(result: np.ndarray, exact: np.ndarray, scale: np.ndarray) -> dict:
    difference = result.astype(np.float64) - exact
    return {"whole": float(np.linalg.norm(difference) / np.linalg.norm(exact)),
            "worst_element": float(np.max(np.abs(difference) / scale))}


def _sequential(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B summed in float32 one term at a time, in k order."""
    total = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for k in range(A.shape[1]):
        total += np.outer(A[:, k], B[k, :]).astype(np.float32)
    return total


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for k in (16, 256, 1024, 4096, 16384):
        A, B = rng.uniform(-1, 1, (64, k)).astype(np.float32), rng.uniform(-1, 1, (k, 64)).astype(np.float32)
        exact, scale = A.astype(np.float64) @ B.astype(np.float64), np.abs(A).astype(np.float64) @ np.abs(B)
        rows.append({"case": "correct", "shape": [64, 64, k], **_errors(_sequential(A, B), exact, scale)})
    m, n, k = 4096, 4096, 4096
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    exact, scale = A.astype(np.float64) @ B.astype(np.float64), np.abs(A).astype(np.float64) @ np.abs(B)
    result = exact.astype(np.float32)
    missing = result.copy()
    missing[:4, :8] -= (A[:4, 8:16].astype(np.float64) @ B[8:16, :8]).astype(np.float32)
    rows.append({"case": "one fragment misses a k-tile", "shape": [m, n, k], **_errors(missing, exact, scale)})
    off = result.copy()
    off[0, 0] += 8
    rows.append({"case": "one element off by 8", "shape": [m, n, k], **_errors(off, exact, scale)})
    for row in rows:
        row["fails"] = [bound for bound in ("whole", "worst_element") if not row[bound] <= TOLERANCE]
    output = {**provenance(" ".join(["python"] + sys.argv), "none: NumPy on the CPU"), "tolerance": TOLERANCE,
              "rows": rows}
    Path(sys.argv[1]).write_text(json.dumps(output, indent=1) + "\n")
    for row in rows:
        print(f"{row['case']:30} {str(row['shape']):20} whole {row['whole']:.2e}  worst element "
              f"{row['worst_element']:.2e}  fails: {', '.join(row['fails']) or 'neither'}")


if __name__ == "__main__":
    main()
