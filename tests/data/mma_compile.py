"""Compile a one-warp kernel calling one mma wrapper (tuner/mma.py) for sm_90, without a GPU, and
print what the PTX and the LTO-linked SASS hold as one JSON line. Run with the simulator off."""
import json
import re
import sys
import tempfile
from pathlib import Path

from numba import cuda, types

from tuner.mma import SHAPES, cubin, functions
from tuner.resources import parse_ptxas, ptxas_path
from tuner.sass import disassemble

name = sys.argv[1]
shape = SHAPES[name]
mma = functions()[name]
element = getattr(types, shape.dtype)
A_COUNT, B_COUNT = shape.a_count, shape.b_count


def kernel(out, a_in, b_in):
    d = cuda.local.array(4, types.float32)
    a = cuda.local.array(A_COUNT, element)
    b = cuda.local.array(B_COUNT, element)
    lane = cuda.threadIdx.x
    for i in range(4):
        d[i] = out[lane, i]
    for i in range(A_COUNT):
        a[i] = a_in[lane, i]
    for i in range(B_COUNT):
        b[i] = b_in[lane, i]
    mma(d, a, b)
    for i in range(4):
        out[lane, i] = d[i]


signature = (types.float32[:, :], element[:, :], element[:, :])
ptx, _ = cuda.compile_ptx(kernel, signature, cc=(9, 0))
code, log = cubin(kernel, signature)
resources = parse_ptxas(log, 0.0)
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp, "kernel.cubin")
    path.write_bytes(code)
    sass = disassemble(path, ptxas_path())
print(json.dumps({
    "ptx_calls_wrapper": bool(re.search(rf"call[.\w]*\s+\(retval0\),\s+{shape.symbol},", ptx)),
    "hmma": re.findall(r"\bHMMA\.[\w.]+", sass),
    "local_memory_instructions": len(re.findall(r"\b(LDL|STL)\b", sass)),
    "calls": len(re.findall(r"\bCALL\b", sass)),
    "registers": resources.registers,
    "stack_bytes": resources.stack_bytes,
    "spill_bytes": resources.spill_store_bytes + resources.spill_load_bytes,
}))
