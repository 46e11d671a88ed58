"""What one launch costs on Numba's CUDA simulator, which runs one Python thread per GPU thread:
tuner.matmul with the default configuration (64x64 tiles of 256 threads, 8-deep k-steps) on
products of one to sixteen blocks and one to sixteen k-steps, next to the work that
tuner/simulator.py's limit counts for each (blocks x (k-steps + BLOCK_STEPS)).

    python bench/simulator_cost.py > bench/results/simulator_cost.json
"""
import json
import os
import tempfile
import time
import warnings

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("TUNER_CACHE_DIR", tempfile.mkdtemp(prefix="tuner-simulator-cost-"))

import numpy as np  # noqa: E402
from provenance import provenance  # noqa: E402

import tuner  # noqa: E402
from tuner import simulator  # noqa: E402
from tuner.families.batched import BatchedProblem  # noqa: E402

# (batch, m, n, k)
SHAPES = [(1, 64, 64, 8), (1, 64, 64, 64), (1, 128, 128, 8), (1, 128, 128, 128), (1, 256, 256, 1),
          (8, 4, 4, 4), (16, 4, 4, 4), (1, 64, 64, 128)]


def main() -> None:
    warnings.simplefilter("ignore", tuner.UntunedWarning)
    tuner.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))  # compiled once, before the clock
    rows = []
    for batch, m, n, k in SHAPES:
        A, B = np.ones((batch, m, k), np.float32), np.ones((batch, k, n), np.float32)
        start = time.perf_counter()
        tuner.matmul(A, B)
        seconds = time.perf_counter() - start
        work = simulator.work(BatchedProblem(m, n, k, batch=batch))
        rows.append({"batch": batch, "m": m, "n": n, "k": k, "seconds": round(seconds, 3), "work": work,
                     "seconds_per_work": round(seconds / work, 4)})
    print(json.dumps({**provenance("python bench/simulator_cost.py", "CPU (Numba's CUDA simulator)"),
                      "max_work": simulator.MAX_WORK, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
