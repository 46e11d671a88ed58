"""Why the space caps unrolling: compile_ptx time of one kernel as its k-loop is unrolled further.

An 8x8 register tile (128x128 block, block_k=16) emits 64 multiply-adds per k-step; unroll_k
copies them. The space's rule (MAX_UNROLLED_MULTIPLY_ADDS) is lifted here to measure past it.

    python bench/unroll_compile_time.py > bench/results/unroll_compile_time.json
"""
import json
import os
import sys
import tempfile

from provenance import provenance

from tuner import space as space_module
from tuner.backends import CUDA
from tuner.config import Config
from tuner.resources import assemble, compile_ptx, parse_ptxas
from tuner.space import Space


def main():
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    space_module.MAX_UNROLLED_MULTIPLY_ADDS = 10**9  # measure beyond the rule
    space = Space.of(CUDA, "float32")
    runs = []
    for unroll in (1, 2, 4, 8, 16):
        config = Config(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8, unroll_k=unroll)
        ptx, seconds = compile_ptx(space, config)
        resources = parse_ptxas(assemble(ptx), seconds)
        runs.append({"unroll_k": unroll, "multiply_adds_per_trip": 64 * unroll, **resources.as_dict(),
                     "config": config.as_dict()})
        print(f"unroll_k={unroll:2d} multiply-adds/trip={64 * unroll:4d} compile_ptx={seconds:6.1f}s "
              f"registers={resources.registers}", file=sys.stderr)
    print(json.dumps({
        **provenance("python bench/unroll_compile_time.py", "none: compile_ptx for sm_90 on the CPU"),
        "runs": runs,
    }, indent=1))


if __name__ == "__main__":
    main()
