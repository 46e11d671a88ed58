"""The batched family, registered through the seam: tuner.matmul on stacks as np.matmul takes them,
its own search, records and errors, on the simulator."""
import dataclasses
import json

import numpy as np
import pytest

import tuner
from tuner import cache
from tuner.cli import main
from tuner.families.batched import BatchedProblem
from tuner.family import families
from tuner.simulator import describe

HERE = describe("cuda")


pytestmark = pytest.mark.usefixtures("cache_dir")


def _stack(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-5), ("float64", 1e-12)])
@pytest.mark.parametrize("a_shape, b_shape", [((3, 17, 13), (3, 13, 9)), ((17, 13), (2, 13, 9)),
                                              ((2, 17, 13), (13, 9)), ((1, 5, 4), (3, 4, 6))],
                         ids=["stacks", "A broadcast", "B broadcast", "a stack of one broadcast"])
def test_stacks_match_numpy(dtype, rtol, a_shape, b_shape):
    A, B = _stack(*a_shape, dtype=dtype), _stack(*b_shape, dtype=dtype, seed=1)
    with pytest.warns(tuner.UntunedWarning, match=f"nothing is tuned for batched {dtype} on .*--batch"):
        C = tuner.matmul(A, B)
    np.testing.assert_allclose(C, np.matmul(A, B), rtol=rtol, atol=rtol)
    assert C.dtype == dtype


@pytest.mark.parametrize("a_shape, b_shape", [((0, 3, 4), (4, 5)), ((1, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5))])
def test_empty_stacks_follow_numpy(a_shape, b_shape):
    A, B = np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)
    assert tuner.matmul(A, B).shape == np.matmul(A, B).shape


def test_device_stacks_of_other_layouts_reach_only_the_verified_kernel(launched_types):
    """A strided device stack, a transposed device matrix broadcast against it and a strided device
    out: the kernel runs on C-contiguous copies made on the device, as it was verified, and out's
    memory between its strides is untouched."""
    from numba import cuda

    A, B, memory = _stack(2, 5, 8), _stack(3, 8, seed=1), _stack(2, 5, 6, seed=2)
    wide_A = np.zeros((2, 5, 16), np.float32)
    wide_A[:, :, ::2] = A
    expected = memory.copy()
    expected[:, :, ::2] = 2 * np.matmul(A, B.T) - memory[:, :, ::2]
    device = cuda.to_device(memory)
    with pytest.warns(tuner.UntunedWarning):
        tuner.matmul(cuda.to_device(wide_A)[:, :, ::2], cuda.to_device(B).T, device[:, :, ::2], alpha=2.0, beta=-1.0)
    np.testing.assert_allclose(device.copy_to_host(), expected, rtol=1e-5, atol=1e-6)
    assert launched_types and all(given == compiled for given, compiled in launched_types), launched_types


def test_alpha_beta_and_out_on_a_stack():
    A, B, out = _stack(2, 7, 5), _stack(2, 5, 3, seed=1), _stack(2, 7, 3, seed=2)
    expected = 2 * np.matmul(A, B) - out
    with pytest.warns(tuner.UntunedWarning):
        assert tuner.matmul(A, B, out, alpha=2.0, beta=-1.0) is out
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_a_batch_over_the_grid_layers_runs_as_several_launches(monkeypatch, launched_types):
    monkeypatch.setattr("tuner.families.batched.GRID_LAYERS", 2)
    A, B = _stack(5, 3, 4), _stack(4, 2, seed=1)
    with pytest.warns(tuner.UntunedWarning):
        np.testing.assert_allclose(tuner.matmul(A, B), np.matmul(A, B), rtol=1e-5, atol=1e-6)
    assert len(launched_types) == 3 and all(given == compiled for given, compiled in launched_types)


def test_several_launches_write_a_strided_device_out_in_place_with_alpha_and_beta(monkeypatch):
    """The launches write a contiguous stand-in, copied into out: nothing between out's layers is written."""
    from numba import cuda

    monkeypatch.setattr("tuner.families.batched.GRID_LAYERS", 2)
    A, B, memory = _stack(3, 4), _stack(5, 4, 2, seed=1), _stack(10, 3, 4, seed=2)
    expected = memory.copy()
    expected[::2, :, ::2] = 2 * np.matmul(A, B) - memory[::2, :, ::2]
    device = cuda.to_device(memory)
    with pytest.warns(tuner.UntunedWarning):
        tuner.matmul(cuda.to_device(A), cuda.to_device(B), device[::2, :, ::2], alpha=2.0, beta=-1.0)
    np.testing.assert_allclose(device.copy_to_host(), expected, rtol=1e-5, atol=1e-6)


def test_stacks_taller_than_a_grid_run_in_bands_of_rows_one_product_at_a_time(monkeypatch, launched_types):
    """A band of rows of one product is C-contiguous, as the kernel is compiled and verified for;
    a band across several products would not be, and Numba would compile another kernel for it."""
    monkeypatch.setattr("tuner.families.batched.GRID_LAYERS", 2)
    runtime = tuner.tuned._library(None, None).runtime
    one_row_of_blocks = dataclasses.replace(runtime.backend.limits, grid_rows=1)
    monkeypatch.setattr(runtime, "backend", dataclasses.replace(runtime.backend, limits=one_row_of_blocks))
    A, B = _stack(3, 70, 4), _stack(3, 4, 5, seed=1)  # two row tiles of 64, the second partial, in each product
    with pytest.warns(tuner.UntunedWarning):
        np.testing.assert_allclose(tuner.matmul(A, B), np.matmul(A, B), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tuner.matmul(A[0], B), np.matmul(A[0], B), rtol=1e-5, atol=1e-6)
    assert len(launched_types) == 2 * 3 * 2 and all(given == compiled for given, compiled in launched_types)


@pytest.mark.parametrize("a_shape, b_shape, message", [
    ((4, 3, 2), (3, 2, 5), "A is a stack of 4 matrices and B of 3: the stacks must be as long"),
    ((2, 3, 2), (2, 4, 5), "A's matrices are 3x2 and B's matrices are 4x5: A's columns (2) must equal B's rows (4)"),
    ((3, 2), (2, 4, 5), "A is 3x2 and B's matrices are 4x5: A's columns (2) must equal B's rows (4)"),
    ((2, 3, 2), (4, 5), "A's matrices are 3x2 and B is 4x5: A's columns (2) must equal B's rows (4)"),
    ((2, 2, 3, 2), (2, 5), "tuner.matmul multiplies 2-D matrices or 3-D stacks of them"),
])
def test_bad_stacks_get_one_clear_error(a_shape, b_shape, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tuner.matmul(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32))


def test_the_family_is_registered_and_its_problem_is_its_own():
    assert set(families()) == {"matmul", "batched"}
    problem = BatchedProblem(8, 6, 4, batch=3)
    assert problem.key == "float32-3x8x6x4" and problem.flops == 2 * 3 * 8 * 6 * 4
    assert problem.shapes == ((3, 8, 4), (3, 4, 6), (3, 8, 6))
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        BatchedProblem(8, 6, 4, batch=0)


def test_a_batched_search_writes_its_own_record_which_matmul_then_uses(cache_dir, capsys):
    assert main(["search", "--backend", "cuda", "--simulate", "--batch", "2", "--shape", "16", "16", "16",
                 "--trials", "2"]) == 0
    path = cache.record_path(cache_dir, HERE.slug, "batched-float32-2x16x16x16")
    found = cache.read_record(path)
    assert found.family == "batched" and found.problem == BatchedProblem(16, 16, 16, batch=2)
    assert json.loads(path.read_text())["problem"] == {"batch": 2, "m": 16, "n": 16, "k": 16, "dtype": "float32"}
    said = capsys.readouterr()
    assert "batched-float32-2x16x16x16" in said.out and "searching batched-float32-2x16x16x16 on" in said.err
    assert main(["list"]) == 0 and "batched-float32-2x16x16x16" in capsys.readouterr().out
    assert main(["regenerate", "--simulate"]) == 0  # named as list names it
    assert "batched-float32-2x16x16x16: current" in capsys.readouterr().out
    A, B = _stack(2, 16, 16), _stack(2, 16, 16, seed=1)
    np.testing.assert_allclose(tuner.matmul(A, B), np.matmul(A, B), rtol=1e-5, atol=1e-5)
    with pytest.warns(tuner.UntunedWarning, match="--shape 16 16 16"):  # a 2-D product is another family's
        tuner.matmul(A[0], B[0])
