"""The mma.sync wrappers (tuner/mma.py): fragment layouts checked against the PTX ISA's tables, the
emulation checked on the simulator against A @ B + C, and the CUDA C wrappers compiled for sm_90
(PTX, then LTO-linked SASS with HMMA) in a fresh process with the simulator off."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from tuner.mma import SHAPES, a_layout, b_layout, c_layout, functions, round_tf32

ROOT = Path(__file__).resolve().parent.parent


def _cells(layout, shape, rows, cols):
    return sorted(cell for lane in range(32) for cell in layout(shape, lane)), \
        sorted((r, c) for r in range(rows) for c in range(cols))


@pytest.mark.parametrize("name", SHAPES)
def test_fragments_cover_each_matrix_once(name):
    shape = SHAPES[name]
    for layout, rows, cols in ((a_layout, shape.m, shape.k), (b_layout, shape.k, shape.n),
                               (c_layout, shape.m, shape.n)):
        held, every = _cells(layout, shape, rows, cols)
        assert held == every


def test_layouts_match_the_ptx_isa_tables():
    """Lane 5 (groupID 1, threadID_in_group 1) and lane 30 (7, 2), read off the ISA's figures."""
    tf32, f16 = SHAPES["tf32"], SHAPES["float16"]
    assert a_layout(tf32, 5) == [(1, 1), (9, 1), (1, 5), (9, 5)]
    assert b_layout(tf32, 5) == [(1, 1), (5, 1)]
    assert a_layout(f16, 5) == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    assert b_layout(f16, 5) == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert c_layout(f16, 5) == c_layout(tf32, 5) == [(1, 2), (1, 3), (9, 2), (9, 3)]
    assert a_layout(tf32, 30) == [(7, 2), (15, 2), (7, 6), (15, 6)]
    assert b_layout(f16, 30) == [(4, 7), (5, 7), (12, 7), (13, 7)]
    assert c_layout(tf32, 30) == [(7, 4), (7, 5), (15, 4), (15, 5)]


def test_tf32_rounding_is_to_nearest_with_ties_away_from_zero():
    ulp = 2.0 ** -10
    values = np.array([1 + ulp / 2, 1 + ulp / 2 - 2 ** -23, -(1 + ulp / 2), 1 + 3 * ulp / 2, np.inf, 3.0],
                      dtype=np.float32)
    assert round_tf32(values).tolist() == [1 + ulp, 1.0, -(1 + ulp), 1 + 2 * ulp, np.inf, 3.0]


def _one_warp_per_block_product(name, a, b, c, warps):
    """Each warp of one block (and each of two blocks) multiplies its own A, B, C: fragments are
    scattered per the layouts, the kernel calls the emulated mma once per lane, D is gathered."""
    shape = SHAPES[name]
    mma = functions()[name]
    dtype = np.dtype(shape.dtype)
    problems = a.shape[0]
    frag_a = np.zeros((problems, 32, shape.a_count), dtype)
    frag_b = np.zeros((problems, 32, shape.b_count), dtype)
    frag_c = np.zeros((problems, 32, shape.c_count), np.float32)
    for p in range(problems):
        for lane in range(32):
            frag_a[p, lane] = [a[p][cell] for cell in a_layout(shape, lane)]
            frag_b[p, lane] = [b[p][cell] for cell in b_layout(shape, lane)]
            frag_c[p, lane] = [c[p][cell] for cell in c_layout(shape, lane)]
    out = np.zeros_like(frag_c)

    @cuda.jit
    def kernel(fa, fb, fc, out):
        p = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        d = cuda.local.array(4, np.float32)
        fragment_a = cuda.local.array(8, fa.dtype)[:fa.shape[2]]
        fragment_b = cuda.local.array(4, fb.dtype)[:fb.shape[2]]
        for i in range(fa.shape[2]):
            fragment_a[i] = fa[p, lane, i]
        for i in range(fb.shape[2]):
            fragment_b[i] = fb[p, lane, i]
        for i in range(4):
            d[i] = fc[p, lane, i]
        mma(d, fragment_a, fragment_b)
        for i in range(4):
            out[p, lane, i] = d[i]

    kernel[problems // warps, 32 * warps](frag_a, frag_b, frag_c, out)
    result = np.zeros(c.shape, np.float32)
    for p in range(problems):
        for lane in range(32):
            for value, cell in zip(out[p, lane], c_layout(shape, lane)):
                result[p][cell] = value
    return result


def _operands(name, problems, rng):
    shape = SHAPES[name]
    a = rng.standard_normal((problems, shape.m, shape.k)).astype(shape.dtype)
    b = rng.standard_normal((problems, shape.k, shape.n)).astype(shape.dtype)
    c = rng.standard_normal((problems, shape.m, shape.n)).astype(np.float32)
    return a, b, c


@pytest.mark.parametrize("name", SHAPES)
def test_emulated_mma_gives_a_times_b_plus_c_in_every_warp(name):
    """Two blocks of two warps: four products at once, each the float64 product of the inputs as
    the tensor core sees them (TF32-rounded or float16), rounded once to float32."""
    a, b, c = _operands(name, 4, np.random.default_rng(21))
    d = _one_warp_per_block_product(name, a, b, c, warps=2)
    seen = (round_tf32(a) if name == "tf32" else a).astype(np.float64)
    b_seen = (round_tf32(b) if name == "tf32" else b).astype(np.float64)
    expected = seen @ b_seen + c
    np.testing.assert_allclose(d, expected, rtol=1e-6, atol=1e-6)


def test_emulated_tf32_rounds_its_inputs():
    """A and B with bits below TF32's mantissa: the float32 product differs from the TF32 one."""
    shape = SHAPES["tf32"]
    a = np.full((1, shape.m, shape.k), 1 + 2.0 ** -12, np.float32)
    b = np.full((1, shape.k, shape.n), 1 + 2.0 ** -11 + 2.0 ** -13, np.float32)
    c = np.zeros((1, shape.m, shape.n), np.float32)
    d = _one_warp_per_block_product("tf32", a, b, c, warps=1)
    assert np.all(d == np.float32(8 * (1 + 2.0 ** -10)))


def _compile(kernel_name):
    script = ROOT / "tests" / "data" / "mma_compile.py"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(script), kernel_name], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", [
    "tf32",
    # test_tensor_cores.py's float16-tc kernel test links the float16 wrapper to HMMA in the default run
    pytest.param("float16", marks=pytest.mark.slow),
])
def test_a_kernel_calling_the_wrapper_compiles_to_ptx_and_links_to_hmma_for_sm_90(name):
    """PTX from Numba calls the wrapper; linked with LTO (NVRTC, nvJitLink: no GPU needed) the
    call is inlined: HMMA in the SASS, no stack, no local memory, no spills."""
    report = _compile(name)
    assert report["ptx_calls_wrapper"]
    expected = {"tf32": "HMMA.1688.F32.TF32", "float16": "HMMA.16816.F32"}[name]
    assert report["hmma"] == [expected]
    assert report["local_memory_instructions"] == 0 and report["calls"] == 0
    assert report["stack_bytes"] == 0 and report["spill_bytes"] == 0 and report["registers"] > 0


def test_the_tensor_core_probe_verifies_the_tuners_kernels_through_the_emulation(tmp_path):
    """bench/tensor_core_probe.py's dry run: the untuned default (edge tiles in M, N and K), verified
    against float64 with tf32's tolerance (float16-tc's kernels are verified in test_tensor_cores.py)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "tensor_core_probe.py"), str(tmp_path),
                           "--shapes", "20,40,24", "--probe", "default", "--precisions", "tf32"],
                          capture_output=True, text=True,
                          env=os.environ | {"NUMBA_ENABLE_CUDASIM": "1", "TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "tensor_core_probe.json").read_text())
    rows = [row for row in result["rows"] if row["kernel"] in ("tuned", "default")]
    assert result["simulator_dry_run"] and [row["precision"] for row in rows] == ["tf32"] * 2
    assert all(row["verified"] and row["relative_error"] > 0 for row in rows)
    assert "nothing is tuned for tf32" in rows[0]["warnings"][0]
