"""Variants compiled per minute by the search's compile-ahead pool (tuner/compile_ahead.py), with 1
and 2 workers, on this machine without a GPU: each worker compiles to PTX for sm_90 and runs
ptxas, the work it does on a GPU host short of loading the cubin.

    python bench/compile_throughput.py OUT.json [--workers 1 2] [--count 24] [--seed 0]

The same uniform sample of the float32 space is compiled by each pool size from a fresh kernel
directory; the wall time counts the workers' start (Python and Numba imports), as a search pays
it once. The machine's load average is recorded before and after each pool, since other jobs
slow the figure down.
"""
import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance

from tuner.backends import CUDA
from tuner.compile_ahead import CompilePool
from tuner.space import Space


def _pool_run(configs: list, workers: int) -> dict:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as kernels, CompilePool("cuda", "float32", kernels, simulated=True,
                                                               workers=workers) as pool:
        start = time.perf_counter()
        for index, config in enumerate(configs):
            pool.submit(str(index), config.as_dict())
        compiled = [pool.result(str(index)) for index in range(len(configs))]
        wall = time.perf_counter() - start
    return {"workers": workers, "variants": len(configs), "wall_seconds": round(wall, 2),
            "variants_per_minute": round(60 * len(configs) / wall, 2),
            "median_compile_seconds": round(statistics.median(c.seconds for c in compiled), 3),
            "failures": [c.error for c in compiled if c.error],
            "load_average_before": load_before, "load_average_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    configs = random.Random(args.seed).sample(list(Space.of(CUDA, "float32")), args.count)
    runs = [_pool_run(configs, workers) for workers in args.workers]
    result = {**provenance(" ".join([Path(sys.executable).name] + sys.argv), "no GPU: PTX for sm_90 and ptxas"),
              "sample": f"{args.count} configurations of the float32 space, seed {args.seed}",
              "runs": runs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        print(f"{run['workers']} workers: {run['variants_per_minute']:.1f} variants/min "
              f"(median {run['median_compile_seconds']:.2f} s each, {len(run['failures'])} failures)")


if __name__ == "__main__":
    main()
