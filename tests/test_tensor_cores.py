"""The tensor-core precisions tf32 and float16-tc: their space, their kernels (run on the simulator
through the emulated mma wrappers), tuner.matmul and tuner search with them, their records, and
their SASS for sm_90 (in a fresh process with the simulator off)."""
import ast
import dataclasses
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tuner
from tuner import cache, record
from tuner.backends import CUDA, ROC
from tuner.cli import main
from tuner.config import Config, WarpConfig, parse_assignments
from tuner.dtypes import PRECISIONS
from tuner.mma import SHAPES, a_layout, b_layout, c_layout
from tuner.problem import Problem
from tuner.source import render
from tuner.space import InvalidConfig, Space
from tuner.tuned import UntunedWarning

from records import H100, make_record

INPUT = {"tf32": np.float32, "float16-tc": np.float16}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    tuner.tuned.reload()


@pytest.mark.parametrize("name", SHAPES)
def test_fragment_layouts_move_with_the_lane_as_the_template_assumes(name):
    """The template places each fragment element at the thread's first one plus its place for lane
    0: A at (groupID, packed * threadID_in_group), B transposed, C at (groupID, 2 * threadID_in_group)."""
    shape = SHAPES[name]
    for lane in range(32):
        group, member = lane // 4, lane % 4
        for layout, (row, col) in ((a_layout, (group, shape.packed * member)),
                                   (b_layout, (shape.packed * member, group)), (c_layout, (group, 2 * member))):
            assert layout(shape, lane) == [(row + r, col + c) for r, c in layout(shape, 0)]


def test_the_tensor_core_space_has_its_own_parameters_and_rules():
    space = Space.of(CUDA, "tf32")
    assert space.config_type is WarpConfig and space.domains().keys() == set(WarpConfig.names())
    assert space.default() == WarpConfig() and space.default().threads == 128
    assert space.starts() == (space.default(),)
    assert any(config.warp_m == 64 for config in space) and space.size() > 1000
    half = Space.of(CUDA, "float16-tc")
    assert "16-deep k-step" in half.broken_rules(WarpConfig(block_k=8))[0]
    assert half.broken_rules(WarpConfig(block_m=32, warp_m=64)) == [
        "warp_m must divide block_m and warp_n must divide block_n"]
    assert "shared memory" in " ".join(space.broken_rules(WarpConfig(block_m=256, block_n=256, block_k=64)))
    assert "mma calls per warp" in " ".join(space.pruned_by(WarpConfig(block_m=128, block_n=128, block_k=64,
                                                                       warp_m=64, warp_n=64)))
    assert parse_assignments(["warp_n=16"], space.default()) == WarpConfig(warp_n=16)
    assert Space.of(CUDA, "float32").config_type is Config


@pytest.mark.parametrize("argv, message", [
    (["search", "--backend", "roc", "--dtype", "tf32"], "runs on NVIDIA's tensor cores (mma.sync), which roc"),
    (["render", "--backend", "roc", "--dtype", "float16-tc"], "choose one of: float32, float64"),
    (["render", "--backend", "cuda", "--dtype", "tf32", "thread_m=8"], "names: block_m, block_n, block_k, warp_m"),
    (["render", "--backend", "cuda", "--dtype", "tf32", "--seed-kernel"], "seed kernel multiplies on the CUDA cores"),
    (["render", "--backend", "cuda", "--dtype", "bfloat16"], "is not a precision tuner knows"),
])
def test_mistakes_with_the_tensor_core_precisions_get_one_line(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_the_one_template_renders_warp_tiles_of_mma_calls():
    space = Space.of(CUDA, "tf32")
    config = WarpConfig(block_m=64, block_n=32, warp_m=32, warp_n=16, block_k=16)
    source = render(space, config)
    ast.parse(source)
    # 2 k-steps of 8, each 2 x 2 fragments of a 32x16 warp tile in m16n8 tiles.
    assert source.count("mma(c") == 2 * 2 * 2 and '@cuda.jit(lto=True, launch_bounds=128)' in source
    assert "cache=True" not in source and "lto" not in render(space, config, simulated=True)
    assert "mma(" not in render(Space.of(CUDA, "float32"), Config())


def _product(precision, shapes, rng):
    A, B = (rng.uniform(-1, 1, shape).astype(INPUT[precision]) for shape in shapes)
    exact = np.matmul(A.astype(np.float64), B.astype(np.float64))
    return A, B, exact


def _error(result, expected):
    return np.linalg.norm(result.astype(np.float64) - expected) / np.linalg.norm(expected)


@pytest.mark.parametrize("precision", ["tf32", "float16-tc"])
def test_matmul_in_a_tensor_core_precision_on_odd_shapes(precision):
    rng = np.random.default_rng(5)
    A, B, exact = _product(precision, ((37, 21), (21, 41)), rng)  # edge tiles in M, N and K (16 + 5)
    with pytest.warns(UntunedWarning, match=f"nothing is tuned for {precision}"):
        C = tuner.matmul(A, B, precision=precision)
    assert C.dtype == np.float32 and C.shape == (37, 41)
    bound = tuner.family.get_family("matmul").tolerance(PRECISIONS[precision])
    assert _error(C, exact) < bound
    if precision == "tf32":  # TF32 multiplies: coarser than float32, as cuBLAS with TF32 allowed
        assert 1e-5 < _error(C, exact)
    out = rng.uniform(-1, 1, C.shape).astype(np.float32)
    expected = 2.0 * exact + 0.5 * out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedWarning)
        result = tuner.matmul(A, B, out=out, alpha=2.0, beta=0.5, precision=precision)
    assert result is out and _error(out, expected) < bound


def test_batched_products_run_on_the_tensor_cores_too():
    rng = np.random.default_rng(6)
    A, B, exact = _product("tf32", ((2, 19, 12), (12, 33)), rng)  # one k-tile: the odd shapes above run two
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedWarning)
        C = tuner.matmul(A, B, precision="tf32")
    assert C.shape == (2, 19, 33) and _error(C, exact) < 2e-3


@pytest.mark.parametrize("arrays, precision, error, message", [
    (np.float64, "tf32", TypeError, "precision='tf32' multiplies float32 matrices, not float64"),
    (np.float32, "float16-tc", TypeError, "cast A and B (A.astype(np.float16))"),
    (np.float32, "bf16", ValueError, "for float32 matrices choose one of: float32, tf32"),
])
def test_a_precision_the_matrices_cannot_take_is_a_clear_error(arrays, precision, error, message):
    with pytest.raises(error) as raised:
        tuner.matmul(np.ones((4, 4), arrays), np.ones((4, 4), arrays), precision=precision)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_tensor_core_search_writes_a_record_that_matmul_and_the_report_then_use(tmp_path):
    assert main(["search", "--backend", "cuda", "--simulate", "--dtype", "tf32", "--trials", "1",
                 "--shape", "24", "40", "12", "--cache-dir", str(tmp_path / "cache")]) == 0
    stored = cache.Catalog.read(tmp_path / "cache").select(dtype="tf32")
    assert len(stored) == 1 and isinstance(stored[0].record.best.config, WarpConfig)
    rng = np.random.default_rng(7)
    A, B, exact = _product("tf32", ((24, 12), (12, 40)), rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tuned: no UntunedWarning
        C = tuner.matmul(A, B, precision="tf32")
    assert _error(C, exact) < 2e-3
    page = tmp_path / "report.html"  # the report draws a study of warp tiles too (no benchmark results: test_report's)
    (tmp_path / "no-bench").mkdir()
    assert main(["report", "--out", str(page), "--cache-dir", str(tmp_path / "cache"),
                 "--bench", str(tmp_path / "no-bench")]) == 0 and page.exists()


def test_a_record_whose_configurations_are_not_its_precisions_is_refused():
    good = make_record(H100, Problem(64, 64, 64, "tf32"), [(WarpConfig(), 1e9)]).as_dict()
    assert record.Record.from_dict(json.loads(json.dumps(good))).best.config == WarpConfig()
    bad = json.loads(json.dumps(good))
    bad["best"]["config"] = Config().as_dict()
    with pytest.raises(record.RecordError, match="a tf32 record's configurations have the parameters block_m"):
        record.Record.from_dict(bad)


def test_the_fingerprint_covers_the_linked_wrappers():
    """A change to templates/mma.cu changes what tensor-core kernels compute, so it starts new records."""
    assert "mma.cu" in tuner.family.templates() and "report.html.j2" not in tuner.family.templates()


def test_gpus_before_compute_capability_8_refuse_them_in_one_line():
    turing = dataclasses.replace(H100, name="Tesla T4", arch="sm_75")
    assert CUDA.lacks(turing, PRECISIONS["tf32"]) == ("tf32 needs the mma.sync of compute capability 8.0 or newer, "
                                                      "and this GPU (Tesla T4) is sm_75; use float32 or float16")
    assert CUDA.lacks(turing, PRECISIONS["float16"]) == CUDA.lacks(H100, PRECISIONS["float16-tc"]) == ""


def test_roc_refuses_the_tensor_core_precisions():
    with pytest.raises(InvalidConfig, match="which roc has no access to; choose one of: float32, float64"):
        Space.of(ROC, "float16-tc")
    assert "tf32" not in ROC.precisions() and "tf32" in CUDA.precisions()


@pytest.mark.parametrize("dtype", [
    # test_mma.py links the tf32 wrapper to HMMA in the default run; float16-tc covers the kernel around it
    pytest.param("tf32", marks=pytest.mark.slow),
    "float16-tc",
])
def test_the_default_tensor_core_kernel_links_to_hmma_in_its_k_loop_without_spills(dtype):
    """`tuner resources` links the kernel with the wrappers (LTO, no GPU needed) and counts the HMMA
    one interior k-tile issues from the SASS: one per mma call the template unrolls."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-m", "tuner", "resources", "--backend", "cuda", "--dtype", dtype,
                           "--json"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    space = Space.of(CUDA, dtype)
    assert report["k_tile_multiply_adds"] == space.multiply_adds(space.default()) > 0
    assert report["spills"] is False and report["stack_bytes"] == 0 and 0 < report["fma_fraction"] < 1
