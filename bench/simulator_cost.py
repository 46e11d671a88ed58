"""What one launch costs on Numba's CUDA simulator, which runs one Python thread per GPU thread:
tuner.matmul with the default configuration (64x64 blocks of 256 threads) on products of one to
sixteen blocks and k from 1 to 128, next to the work that tuner/simulator.py's limit counts for
each (blocks x (k / 8 + BLOCK_STEPS), a fitted model); then the seed's configuration (16x16 blocks
of 256 threads) at 64 cubed, which the model, counted at the default tile, does not see.

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
from numba import cuda  # noqa: E402

from tuner.backends import CUDA  # noqa: E402
from tuner.families.batched import BatchedProblem  # noqa: E402
from tuner.kernel import load  # noqa: E402
from tuner.space import SEED, Space  # noqa: E402

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
    space, A, B = Space.of(CUDA, "float32"), np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    seed = {}
    for name, config in (("default", space.default()), ("seed", SEED)):
        launch = load(space, config).bind(cuda.to_device(A), cuda.to_device(B), cuda.device_array((64, 64), np.float32))
        start = time.perf_counter()
        launch()
        seed[name] = round(time.perf_counter() - start, 3)
    print(json.dumps({**provenance("python bench/simulator_cost.py", "CPU (Numba's CUDA simulator)"),
                      "max_work": simulator.MAX_WORK, "rows": rows, "64x64x64_seconds_by_configuration": seed},
                     indent=1))


if __name__ == "__main__":
    main()
