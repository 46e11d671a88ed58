"""Static ceilings of the large register tiles, before and after issue 17's options: registers,
spills, compile time (PTX + ptxas, wall and CPU) and the FMA share of one interior k-tile's SASS, from
`tuner.resources.count`, the same numbers `tuner resources --json` prints. The flagship of a dtype
is the configuration with the highest FMA share that compiles without spills (docs/kernels.md).

    python bench/ceilings.py --dtype float32 > bench/results/ceilings_float32.json
    python bench/ceilings.py --dtype float64 > bench/results/ceilings_float64.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace

from provenance import provenance

from tuner.backends import CUDA
from tuner.config import Config
from tuner.resources import count, ptxas_path
from tuner.sass import nvdisasm_beside
from tuner.space import Space

EIGHT = Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=1)
VECTOR = replace(EIGHT, transpose_a=True, pad=4, vector_fragments=True)
CANDIDATES = {
    # The space before issue 17: its best 8x8 tile, and the default configuration.
    "before: default": Config(),
    "before: 8x8": EIGHT,
    "8x8, min_blocks=1": replace(EIGHT, min_blocks=1),
    "8x8 vector, rolled": VECTOR,
    "8x8 vector, rolled, min_blocks=1": replace(VECTOR, min_blocks=1),
    "8x8 vector, block_k=8 unrolled": replace(VECTOR, block_k=8, unroll_k=8),
    "8x8 vector, block_k=8 unrolled, min_blocks=1": replace(VECTOR, block_k=8, unroll_k=8, min_blocks=1),
    "8x8 vector, block_k=16 unrolled": replace(VECTOR, unroll_k=16),
    "8x8 vector, block_k=16 unrolled, pad=0": replace(VECTOR, unroll_k=16, pad=0),
    "8x8 vector, block_k=16 unrolled, min_blocks=1": replace(VECTOR, unroll_k=16, min_blocks=1),
    "8x8 vector, block_k=16 unrolled, double_buffer": replace(VECTOR, unroll_k=16, double_buffer=True),
    "8x8 vector, block_k=8 unrolled, double_buffer": replace(VECTOR, block_k=8, unroll_k=8, double_buffer=True),
    "8x4 vector, block_k=16 unrolled": replace(VECTOR, block_n=64, thread_n=4, unroll_k=16),
    "4x4 vector, block_k=16 unrolled": replace(VECTOR, block_m=64, block_n=64, thread_m=4, thread_n=4, unroll_k=16),
}


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (ptxas, nvdisasm): unlike the wall time,
    it hardly grows when other jobs share the cores."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args()
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    space = Space.of(CUDA, args.dtype)
    runs = []
    for name, config in CANDIDATES.items():
        reasons = space.violations(config)
        if reasons:
            runs.append({"name": name, "config": config.as_dict(), "in_space": False, "violations": reasons})
            continue
        start = _cpu_seconds()
        resources = count(space, config).as_dict()
        runs.append({"name": name, "config": config.as_dict(), "in_space": True, **resources,
                     "cpu_seconds": round(_cpu_seconds() - start, 3)})
        print(name, runs[-1]["fma_fraction"], runs[-1]["registers"], runs[-1]["compile_seconds"], file=sys.stderr)
    sound = [run for run in runs if run["in_space"] and not run["spills"] and run["fma_fraction"] is not None]
    flagship = max(sound, key=lambda run: run["fma_fraction"])
    command = f"python bench/ceilings.py --dtype {args.dtype}"
    device = "none: compile_ptx for sm_90, ptxas and nvdisasm on the CPU (2 shared cores: times are under load)"
    tools = {"ptxas": _version(ptxas_path()), "nvdisasm": _version(nvdisasm_beside(ptxas_path()))}
    print(json.dumps({**provenance(command, device), "tools": tools, "dtype": args.dtype,
                      "flagship": {"name": flagship["name"], "config": Config(**flagship["config"]).describe()},
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
