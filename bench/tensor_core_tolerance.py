"""The error the tensor-core precisions make by design, against a float64 reference: what their
verification tolerances (tuner/family.py) are set from.

    python bench/tensor_core_tolerance.py bench/results/tensor_core_tolerance.json

CPU only, no kernel runs: A and B are rounded as the mma.sync wrappers round them (tf32: cvt.rna
to 10 mantissa bits, tuner.mma.round_tf32; float16-tc: the float16 inputs are exact), multiplied
exactly in float64 and rounded once to float32, which is the error the inputs' rounding causes; the
tensor cores' float32 accumulation adds about 1e-7 * sqrt(K) on top. Relative Frobenius error of
C against the float64 product of the unrounded inputs, for entries uniform in [-1, 1], uniform in
[0, 1] and standard normal, over odd shapes and K up to 8192. A GPU run checks the hardware's own.
"""
import json
import sys
from pathlib import Path

import numpy as np

from tuner import DISTRIBUTION
from tuner.devices import software
from tuner.mma import round_tf32

SHAPES = ((127, 129, 65), (512, 512, 512), (257, 255, 4096), (64, 64, 8192))
DISTRIBUTIONS = {
    "uniform[-1,1]": lambda rng, shape: rng.uniform(-1, 1, shape),
    "uniform[0,1]": lambda rng, shape: rng.uniform(0, 1, shape),
    "normal": lambda rng, shape: rng.standard_normal(shape),
}
ROUNDING = {"tf32": (np.float32, round_tf32), "float16-tc": (np.float16, lambda x: x)}


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for precision, (dtype, rounded) in ROUNDING.items():
        for name, draw in DISTRIBUTIONS.items():
            for m, n, k in SHAPES:
                A, B = draw(rng, (m, k)).astype(dtype), draw(rng, (k, n)).astype(dtype)
                exact = A.astype(np.float64) @ B.astype(np.float64)
                C = (rounded(A).astype(np.float64) @ rounded(B).astype(np.float64)).astype(np.float32)
                error = float(np.linalg.norm(C - exact) / np.linalg.norm(exact))
                rows.append({"precision": precision, "distribution": name, "shape": [m, n, k], "relative_error": error})
    worst = {p: max(r["relative_error"] for r in rows if r["precision"] == p) for p in ROUNDING}
    result = {"command": " ".join(["python"] + sys.argv), "device": "none: NumPy on the CPU",
              "versions": software((DISTRIBUTION, "numpy")), "worst": worst, "rows": rows}
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1) + "\n")
    for row in rows:
        print(f"{row['precision']:10} {row['distribution']:14} {str(row['shape']):18} {row['relative_error']:.2e}")
    print("worst:", {p: f"{e:.2e}" for p, e in worst.items()})


if __name__ == "__main__":
    main()
