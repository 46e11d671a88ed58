"""Why a capped kernel gets no launch bounds: ptxas drops -maxrregcount when the PTX has .maxntid.

One 8x8-tile kernel is compiled with and without launch bounds, and each PTX is assembled with
and without a cap of 128 registers.

    python bench/register_cap_with_launch_bounds.py > bench/results/register_cap_with_launch_bounds.json
"""
import json
import os
import subprocess
import tempfile

from numba import cuda, types

from provenance import provenance

from tuner.backends import CUDA
from tuner.config import Config
from tuner.kernel import import_source
from tuner.resources import assemble, ptxas_path, parse_ptxas
from tuner.source import render
from tuner.space import Space


def main():
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    space = Space.of(CUDA, "float32")
    config = Config(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8, unroll_k=1)
    function = import_source(render(space, config), "cuda").matmul.py_func
    matrix = types.float32[:, ::1]
    signature = (matrix, matrix, matrix, types.float32, types.float32)
    runs = []
    for launch_bounds in (config.threads, None):
        ptx, _ = cuda.compile_ptx(function, signature, cc=(9, 0), launch_bounds=launch_bounds)
        for cap in (0, 128):
            resources = parse_ptxas(assemble(ptx, max_registers=cap), ptx_seconds=0.0)
            runs.append({"launch_bounds": launch_bounds, "maxrregcount": cap, "ptx_has_maxntid": ".maxntid" in ptx,
                         "registers": resources.registers, "spill_store_bytes": resources.spill_store_bytes})
    ptxas = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(json.dumps({
        **provenance("python bench/register_cap_with_launch_bounds.py",
                     "none: compile_ptx for sm_90 and ptxas on the CPU"),
        "ptxas": ptxas,
        "config": config.as_dict(),
        "runs": runs,
    }, indent=1))


if __name__ == "__main__":
    main()
