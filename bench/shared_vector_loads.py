"""Whether Numba's CUDA target can emit vector shared-memory loads (ld.shared.v4), which the
template would need for fewer LDS per multiply-add (docs/performance_notes.md).

One small kernel reads four adjacent float32 of a shared tile per step, at an index that is a
multiple of four, once with the tile at Numba's default alignment and once with alignment=16.

    python bench/shared_vector_loads.py > bench/results/shared_vector_loads.json
"""
import json
import re

from numba import cuda, float32, types, uint64
from provenance import provenance


def kernel_source(alignment: str) -> str:
    return f'''
def kernel(A, out):
    tile = cuda.shared.array(shape=(16, 64), dtype=float32{alignment})
    tid = cuda.threadIdx.x
    tile[tid // 64, tid % 64] = A[tid]
    cuda.syncthreads()
    c = uint64(tid % 16) * uint64(4)
    total = float32(0)
    for kk in range(16):
        total += tile[kk, c] * tile[kk, c + uint64(1)] + tile[kk, c + uint64(2)] * tile[kk, c + uint64(3)]
    out[tid] = total
'''


def main():
    runs = []
    for alignment in ("", ", alignment=16"):
        scope = {"cuda": cuda, "float32": float32, "uint64": uint64}
        source = kernel_source(alignment)
        exec(source, scope)
        ptx, _ = cuda.compile_ptx(scope["kernel"], (types.float32[::1], types.float32[::1]), cc=(9, 0))
        runs.append({"source": source, "shared_declaration": re.findall(r"\.shared \.align \d+ .*", ptx),
                     "shared_loads": sorted(set(re.findall(r"ld\.shared\S*", ptx)))})
    print(json.dumps({**provenance("python bench/shared_vector_loads.py", "none: compile_ptx for sm_90 on the CPU"),
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
