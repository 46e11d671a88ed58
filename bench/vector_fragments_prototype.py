"""A prototype, outside the template: the 8x8 tile with contiguous fragments read by vector shared
loads (docs/performance_notes.md, "Vector shared loads").

It renders block_m=block_n=128, thread_m=thread_n=8, unroll_k=16 (over the unroll cap),
transpose_a=true, pad=0, then rewrites the source: thread (tr, tc) takes rows tr*4 + {0..3} and
tr*4 + 64 + {0..3} (columns alike) instead of tr + 16*i, and both tiles get alignment=16. It
reports the interior k-tile's SASS (tuner/sass.py) and checks the result against NumPy on the
simulator, in a child process (the simulator takes no alignment, so the child drops it; it does
not change the arithmetic).

    python bench/vector_fragments_prototype.py > bench/results/vector_fragments_prototype.json
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
from provenance import provenance

import tuner.space
from tuner.backends import CUDA
from tuner.config import Config
from tuner.source import render

CONFIG = Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=16, transpose_a=True, pad=0)
SHAPE = (130, 131, 20)  # two block rows and columns, one of each on the edge; a partial k-tile


def prototype_source() -> str:
    with mock.patch.object(tuner.space, "MAX_UNROLLED_MULTIPLY_ADDS", 1024):
        source = render(tuner.space.Space.of(CUDA, "float32"), CONFIG)
    group, threads = 4, CONFIG.threads_m  # 16 thread rows (and columns); fragments of 8 = 2 groups of 4

    def contiguous(name, text):
        def offset(match):
            i = int(match.group(2) or 0) // threads
            new = i % group + (i // group) * group * threads
            return f"{name}4 + uint64({new})" if new else f"{name}4"
        definition = f"    {name} = uint64("
        head, body = text.split(definition, 1)
        first, rest = body.split("\n", 1)
        rest = re.sub(rf"\b{name}\b( \+ uint64\((\d+)\))?", offset, rest)
        return f"{head}{definition}{first}\n    {name}4 = {name} * uint64({group})\n{rest}"

    source = contiguous("tc", contiguous("tr", source))
    return source.replace("dtype=float32)", "dtype=float32, alignment=16)")


def static(source: str) -> dict:
    from numba import cuda, types

    from tuner.kernel import import_source
    from tuner.resources import assemble, interior_k_tile, parse_ptxas

    module = import_source(source, "cuda")
    matrix = types.float32[:, ::1]
    ptx, _ = cuda.compile_ptx(module.matmul.py_func, (matrix, matrix, matrix, types.float32, types.float32),
                              cc=(9, 0), launch_bounds=CONFIG.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp, "kernel.cubin")
        resources = parse_ptxas(assemble(ptx, cubin=cubin), 0.0)
        return {**resources.as_dict(), "ptx_shared_loads": sorted(set(re.findall(r"ld\.shared\S*", ptx))),
                "interior_k_tile": interior_k_tile(cubin, CONFIG)}


def main():
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    source = prototype_source()
    if "--simulate" in sys.argv:
        from tuner.kernel import import_source

        module = import_source(source.replace(", alignment=16", ""), "cuda")
        m, n, k = SHAPE
        rng = np.random.default_rng(1)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.full((m, n), np.nan, dtype=np.float32)
        grid = (-(-n // CONFIG.block_n), -(-m // CONFIG.block_m))
        module.matmul[grid, CONFIG.threads](a, b, c, np.float32(1), np.float32(0))
        reference = a.astype(np.float64) @ b
        print(json.dumps({"shape": SHAPE, "relative_error": float(np.linalg.norm(c - reference)
                                                                     / np.linalg.norm(reference))}))
        return
    child = subprocess.run([sys.executable, __file__, "--simulate"], capture_output=True, text=True, check=True,
                           env=os.environ | {"NUMBA_ENABLE_CUDASIM": "1"})
    result = {**provenance("python bench/vector_fragments_prototype.py",
                           "none: compile_ptx for sm_90, ptxas and nvdisasm on the CPU; Numba's CUDA simulator"),
              "config": CONFIG.as_dict(), "rewrite": "fragments of 2 groups of 4 contiguous rows/columns, "
              "groups 64 apart; alignment=16", **static(source),
              "simulator_check": json.loads(child.stdout)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
