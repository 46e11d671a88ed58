"""get_kernel serves this device's tuned configuration for the nearest shape, never another
device's, and falls back to a default with one warning; bad records are skipped, named."""
import dataclasses
import json
import re
import warnings

import numpy as np
import pytest
from records import H100, make_record

import tuner
from tuner import cache
from tuner.backends import BACKENDS, CUDA
from tuner.config import Config
from tuner.simulator import describe as describe_simulator
from tuner.problem import Problem
from tuner.space import Space

HERE = describe_simulator("cuda")  # the device the tests run on
# 32 threads a block each: a record under other software is verified on the simulator, which runs a
# Python thread per GPU thread, on 2 x 2 blocks (the default's 256 threads take eight times as long).
SMALL = Config(block_m=16, block_n=16, thread_m=4, thread_n=2)
LARGE = Config(block_m=32, block_n=16, thread_m=4, thread_n=4, prefetch=False)


def _store(root, device, problem, ranked):
    path = cache.record_path(root, device.slug, problem.key)
    cache.write_record(path, make_record(device, problem, ranked))
    return path


def test_with_nothing_tuned_the_default_runs_after_one_warning(cache_dir):
    with pytest.warns(tuner.UntunedWarning, match="tuner search --backend cuda --simulate --dtype float32 "
                                                  "--shape 8 9 10") as caught:
        kernel = tuner.get_kernel(8, 9, 10)
    assert len(caught) == 1 and "tuner regenerate" not in str(caught[0].message)
    assert not kernel.tuned and kernel.record is None and kernel.config == Space.of(CUDA, "float32").default()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not tuner.get_kernel(100, 10, 1).tuned  # the same dtype: no second warning


OTHER_SOFTWARE = dataclasses.replace(HERE, driver="another",
                                     software={**HERE.software, "numba": "0.1", "templates": "x"})


def test_sizes_computed_with_numpy_are_taken(cache_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuner.UntunedWarning)
        kernel = tuner.get_kernel(np.int64(8), np.prod([3, 3]), 10)
    assert kernel.problem.key == "float32-8x9x10" and type(kernel.problem.m) is int


def test_records_of_other_gpu_models_are_never_used_and_the_warning_names_the_regenerate_that_retunes_them(
        cache_dir):
    """A new GPU does not orphan what was tuned on the old one unsaid: `tuner regenerate` re-tunes it here,
    warm-started from it. Only where the family and dtype were tuned there."""
    _store(cache_dir, H100, Problem(16, 16, 16), [(SMALL, 9000.0)])
    _store(cache_dir, H100, Problem(16, 16, 16, "float64"), [(SMALL, 900.0)])
    with pytest.warns(tuner.UntunedWarning, match=r"tune it once with: tuner search --backend cuda --simulate --dtype "
                      r"float32 --shape 16 16 16 \(or re-tune here what was tuned on NVIDIA H100 80GB HBM3, another "
                      r"GPU model, with: tuner regenerate --backend cuda --simulate\)$"):
        kernel = tuner.get_kernel(16, 16, 16)
    assert not kernel.tuned and kernel.config != SMALL
    with pytest.warns(tuner.UntunedWarning) as caught:
        tuner.get_kernel(16, 16, 16, dtype="float16")
    assert "tuner regenerate" not in str(caught[0].message)


def test_the_untuned_warning_names_no_regenerate_that_would_skip_every_product_tuned_elsewhere(cache_dir):
    """tuner regenerate skips a product too large for this device (here the simulator, as it refuses
    256 cubed): where that is all another GPU model tuned, the warning names only tuner search."""
    _store(cache_dir, H100, Problem(256, 256, 256), [(SMALL, 9000.0)])
    with pytest.warns(tuner.UntunedWarning) as caught:
        tuner.get_kernel(16, 16, 16)
    assert "tuner search" in str(caught[0].message) and "tuner regenerate" not in str(caught[0].message)


def test_a_record_of_this_gpu_model_under_other_software_is_used_once_verified(cache_dir):
    path = _store(cache_dir, OTHER_SOFTWARE, Problem(16, 16, 16), [(SMALL, 5.0)])
    with pytest.warns(tuner.OtherSoftwareWarning, match="under other software .driver another -> none, numba 0.1 -> "
                      ".*passed verification here.*tuner regenerate --backend cuda --simulate") as caught:
        kernel = tuner.get_kernel(16, 16, 16)
    assert len(caught) == 1 and (kernel.tuned, kernel.config, kernel.record) == (True, SMALL, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # verified once: no second warning for another shape
        assert tuner.get_kernel(20, 12, 16).config == SMALL
    A, B = np.random.default_rng(0).random((2, 9, 9), dtype=np.float32)
    np.testing.assert_allclose(tuner.matmul(A, B), A @ B, rtol=1e-5)


def test_a_record_under_other_software_that_fails_verification_here_is_not_used(cache_dir, monkeypatch):
    monkeypatch.setattr("tuner.tuned.verify_config", lambda *args: "relative error 1 exceeds 1e-04")
    _store(cache_dir, OTHER_SOFTWARE, Problem(16, 16, 16), [(SMALL, 5.0)])
    with pytest.warns(tuner.OtherSoftwareWarning, match=r"fails verification here .relative error 1.*, so it is not "
                      r"used; to re-tune its product here: tuner regenerate --backend cuda --simulate$"):
        with pytest.warns(tuner.UntunedWarning):
            kernel = tuner.get_kernel(16, 16, 16)
    assert not kernel.tuned and kernel.config != SMALL


def test_under_other_software_a_runner_up_serves_when_the_best_fails_verification(cache_dir, monkeypatch):
    monkeypatch.setattr("tuner.tuned.verify_config",
                        lambda runtime, space, config, kernels: "planted" if config == SMALL else "")
    _store(cache_dir, OTHER_SOFTWARE, Problem(16, 16, 16), [(SMALL, 5.0), (LARGE, 4.0)])
    with pytest.warns(tuner.OtherSoftwareWarning) as caught:
        kernel = tuner.get_kernel(16, 16, 16)
    assert kernel.config == LARGE and len(caught) == 2
    assert "fails verification here (planted)" in str(caught[0].message)
    assert "passed verification here" in str(caught[1].message)


def test_of_a_shapes_records_under_other_software_the_newest_serves(cache_dir):
    """One per software version, as each `tuner regenerate` under new code leaves them; the oldest
    used to serve where its fingerprint sorted first. The newest has the middle slug."""
    versions = sorted((dataclasses.replace(OTHER_SOFTWARE, software={**OTHER_SOFTWARE.software, "templates": name})
                       for name in "abc"), key=lambda device: device.slug)
    paths = [cache.record_path(cache_dir, device.slug, "float32-16x16x16") for device in versions]
    for path, device, config, month in zip(paths, versions, (SMALL, LARGE, Config()), (1, 3, 2)):
        cache.write_record(path, make_record(device, Problem(16, 16, 16), [(config, 5.0)],
                                             finished=f"2026-0{month}-01T00:00:00+00:00"))
    with pytest.warns(tuner.OtherSoftwareWarning) as caught:
        kernel = tuner.get_kernel(16, 16, 16)
    assert (kernel.config, kernel.record) == (LARGE, paths[1])
    assert len(caught) == 1 and str(caught[0].message).startswith(f"tuner: {paths[1]} was tuned")


def test_the_newest_is_the_latest_moment_not_the_greatest_string(cache_dir):
    """Times with another offset, or none (taken as UTC), as a hand edit may leave them."""
    versions = [dataclasses.replace(OTHER_SOFTWARE, software={**OTHER_SOFTWARE.software, "templates": name})
                for name in "abc"]
    moments = ("2026-03-01T01:00:00+05:00", "2026-02-28T22:00:00", "2026-02-28T21:00:00+00:00")  # the 2nd is newest
    paths = [cache.record_path(cache_dir, device.slug, "float32-16x16x16") for device in versions]
    for path, device, config, finished in zip(paths, versions, (SMALL, LARGE, Config()), moments):
        cache.write_record(path, dataclasses.replace(make_record(device, Problem(16, 16, 16), [(config, 5.0)]),
                                                     finished=finished))
    with pytest.warns(tuner.OtherSoftwareWarning):
        kernel = tuner.get_kernel(16, 16, 16)
    assert (kernel.config, kernel.record) == (LARGE, paths[1])


@pytest.mark.parametrize("device", [HERE, OTHER_SOFTWARE], ids=["this-fingerprint", "other-software"])
def test_the_users_record_serves_before_a_newer_shipped_one_of_its_fingerprint(cache_dir, monkeypatch, device):
    """The user's records come before the shipped ones; a newer shipped record of the same fingerprint served."""
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: cache_dir / "shipped")
    paths = [cache.record_path(root, device.slug, "float32-16x16x16") for root in (cache_dir, cache_dir / "shipped")]
    for path, config, month in zip(paths, (SMALL, LARGE), (1, 2)):
        cache.write_record(path, make_record(device, Problem(16, 16, 16), [(config, 5.0)],
                                             finished=f"2026-0{month}-01T00:00:00+00:00"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuner.OtherSoftwareWarning)
        kernel = tuner.get_kernel(16, 16, 16)
    assert (kernel.config, kernel.record) == (SMALL, paths[0])


def test_this_fingerprint_is_preferred_to_a_nearer_shape_under_other_software(cache_dir):
    _store(cache_dir, OTHER_SOFTWARE, Problem(16, 16, 16), [(SMALL, 5.0)])
    here = _store(cache_dir, HERE, Problem(64, 64, 64), [(LARGE, 1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = tuner.get_kernel(16, 16, 16)
    assert (kernel.config, kernel.record) == (LARGE, here)


def test_the_record_of_the_nearest_shape_is_used(cache_dir):
    small = _store(cache_dir, HERE, Problem(16, 16, 16), [(SMALL, 2.0)])
    large = _store(cache_dir, HERE, Problem(64, 64, 64), [(LARGE, 1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near_small, near_large = tuner.get_kernel(20, 12, 16), tuner.get_kernel(60, 60, 100)
    assert (near_small.config, near_small.record, near_small.tuned_for) == (SMALL, small, Problem(16, 16, 16))
    assert (near_large.config, near_large.record, near_large.tuned_for) == (LARGE, large, Problem(64, 64, 64))
    assert near_large.grid == (4, 2) and near_large.block == LARGE.threads  # 60 / 16 columns, 60 / 32 rows
    assert "cache=True" in near_large.source_path.read_text()


def test_a_record_of_another_dtype_is_never_used(cache_dir):
    _store(cache_dir, HERE, Problem(16, 16, 16, "float64"), [(SMALL, 2.0)])
    with pytest.warns(tuner.UntunedWarning, match="nothing is tuned for float32"):
        kernel = tuner.get_kernel(16, 16, 16)
    assert not kernel.tuned and kernel.config != SMALL


def test_a_tuned_kernel_launches_on_device_arrays(cache_dir):
    from numba import cuda

    _store(cache_dir, HERE, Problem(16, 16, 16), [(SMALL, 2.0)])
    kernel = tuner.get_kernel(5, 7, 3)
    A, B = np.arange(15, dtype=np.float32).reshape(5, 3), np.ones((3, 7), np.float32)
    C = cuda.device_array((5, 7), np.float32)
    kernel(cuda.to_device(A), cuda.to_device(B), C)
    np.testing.assert_allclose(C.copy_to_host(), A @ B)
    with pytest.raises(ValueError, match="shapes do not chain"):
        kernel(cuda.to_device(A), cuda.to_device(B), cuda.device_array((5, 6), np.float32))
    with pytest.raises(ValueError, match="shapes do not chain"):  # bind, the fast path, checks too
        kernel.kernel.bind(cuda.to_device(B), cuda.to_device(A), C)


@pytest.mark.parametrize("arguments, error, message", [
    ((None,), TypeError, "alpha must be a real number, not NoneType"),
    ((1.0, "2"), TypeError, "beta must be a real number, not str"),
    ((1e300,), ValueError, r"alpha=1e\+300 overflows float32, the precision this product is computed in"),
], ids=["None", "a string", "an overflow"])
def test_a_tuned_kernels_scalars_are_checked_as_tuner_matmuls_are(cache_dir, arguments, error, message):
    from numba import cuda

    _store(cache_dir, HERE, Problem(16, 16, 16), [(SMALL, 2.0)])
    kernel = tuner.get_kernel(2, 2, 2)
    operands = [cuda.to_device(np.ones((2, 2), np.float32)) for _ in range(3)]
    with pytest.raises(error, match=message):
        kernel(*operands, *arguments)
    with pytest.raises(TypeError, match="A must be a device array, not NoneType"):
        kernel(None, *operands[1:])


def test_a_record_whose_best_is_no_longer_valid_serves_its_best_valid_runner_up(cache_dir):
    too_many_threads = Config(block_m=128, block_n=128, thread_m=1, thread_n=1)  # in the domains, against a rule
    assert Space.of(CUDA, "float32").broken_rules(too_many_threads)
    _store(cache_dir, HERE, Problem(16, 16, 16), [(too_many_threads, 3.0), (SMALL, 2.0)])
    assert tuner.get_kernel(16, 16, 16).config == SMALL


def test_a_measured_configuration_that_the_search_now_prunes_still_serves(cache_dir):
    elongated = Config(block_m=64, block_n=64, thread_m=8, thread_n=2)  # it runs; the search skips it
    assert Space.of(CUDA, "float32").pruned_by(elongated) and not Space.of(CUDA, "float32").broken_rules(elongated)
    _store(cache_dir, HERE, Problem(16, 16, 16), [(elongated, 3.0), (SMALL, 2.0)])
    assert tuner.get_kernel(16, 16, 16).config == elongated


def test_bad_records_are_skipped_with_a_warning_naming_the_file(cache_dir):
    good = _store(cache_dir, HERE, Problem(16, 16, 16), [(SMALL, 2.0)])
    hostile = good.with_name("float32-32x32x32.json")
    hostile.write_text(json.dumps({**json.loads(good.read_text()), "problem": {
        "m": 32, "n": 32, "k": 32, "dtype": "float32"}, "source": "import os; os.system('touch pwned')"}))
    truncated = good.with_name("float32-64x64x64.json")
    truncated.write_text(good.read_text()[:200])
    with pytest.warns(tuner.SkippedRecordWarning) as caught:
        kernel = tuner.get_kernel(64, 64, 64)
    named = sorted(str(warning.message).split(": ")[1].removeprefix("skipping cache record ") for warning in caught)
    assert named == sorted([str(hostile), str(truncated)])
    assert kernel.tuned and kernel.record == good and not (cache_dir / "pwned").exists()


def test_an_unsupported_dtype_is_a_type_error_from_get_kernel_as_from_matmul(cache_dir):
    """As NumPy's linalg and CuPy's cuBLAS wrappers refuse a dtype they lack."""
    for dtype in ("int8", np.int32, "bogus"):
        with pytest.raises(TypeError, match="is not a precision tuner knows; choose one of: float32") as error:
            tuner.get_kernel(4, 4, 4, dtype)
        assert "\n" not in str(error.value)
    with pytest.raises(TypeError, match="int8 matrices are not supported on cuda; use one of float32"):
        tuner.matmul(np.ones((4, 4), np.int8), np.ones((4, 4), np.int8))


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS)
def test_the_default_is_the_64x64_tile_on_every_backend_and_dtype(backend):
    for dtype in backend.dtypes:
        assert Space.of(backend, dtype).default() == Config(block_m=64, block_n=64, thread_m=4, thread_n=4)


def test_a_record_moved_into_this_devices_folder_is_not_used(cache_dir):
    elsewhere = _store(cache_dir, H100, Problem(16, 16, 16), [(SMALL, 9000.0)])
    moved = cache.record_path(cache_dir, HERE.slug, Problem(16, 16, 16).key)
    moved.parent.mkdir(parents=True)
    elsewhere.rename(moved)
    other_shape = _store(cache_dir, HERE, Problem(64, 64, 64), [(LARGE, 1.0)])
    other_shape.rename(other_shape.with_name(f"{Problem(20, 20, 20).key}.json"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tuner.get_kernel(20, 20, 20)
    skipped = [str(warning.message) for warning in caught if warning.category is tuner.SkippedRecordWarning]
    assert len(skipped) == 2 and all("moved or copied here by hand" in message for message in skipped)
    assert not kernel.tuned


@pytest.mark.parametrize("dtype", [np.float32, np.dtype("float32"), "float32", "f4", "single"],
                         ids=["type", "dtype", "name", "code", "alias"])
def test_get_kernel_takes_numpy_dtypes(cache_dir, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuner.UntunedWarning)
        assert tuner.get_kernel(4, 4, 4, dtype).problem.dtype == "float32"
    with pytest.raises(TypeError, match="dtype must be a NumPy dtype or its name, such as 'float32', not 5"):
        tuner.get_kernel(4, 4, 4, 5)
    with pytest.raises(TypeError, match="dtype must be a NumPy dtype or its name, such as 'float32', not None"):
        tuner.get_kernel(4, 4, 4, None)  # NumPy would read it as float64


def test_with_a_cache_dir_given_the_commands_the_warnings_suggest_name_it(cache_dir, tmp_path):
    other = tmp_path / "my cache"
    with pytest.warns(tuner.UntunedWarning, match=re.escape(f"--shape 8 9 10 --cache-dir '{other}'")):
        tuner.get_kernel(8, 9, 10, cache_dir=other)
    _store(other, OTHER_SOFTWARE, Problem(8, 8, 8), [(SMALL, 10.0)])
    tuner.reload()
    with pytest.warns(tuner.OtherSoftwareWarning, match=re.escape(f"tuner regenerate --backend cuda --simulate "
                                                                  f"--cache-dir '{other}'")):
        tuner.get_kernel(8, 8, 8, cache_dir=other)


def test_a_cache_directory_set_between_calls_is_read_at_the_next_call(cache_dir, tmp_path, monkeypatch):
    """The cache directory of $TUNER_CACHE_DIR is worked out once per value of it and of $HOME (which
    a leading ~ names): a call after either changes reads the directory they name now."""
    monkeypatch.setenv("HOME", str(tmp_path / "first"))
    monkeypatch.setenv("TUNER_CACHE_DIR", "~/cache")
    tuned_here = _store(tmp_path / "second" / "cache", HERE, Problem(16, 16, 16), [(SMALL, 2.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuner.UntunedWarning)
        assert not tuner.get_kernel(16, 16, 16).tuned
        monkeypatch.setenv("HOME", str(tmp_path / "second"))
        assert tuner.get_kernel(16, 16, 16).record == tuned_here
        monkeypatch.setenv("TUNER_CACHE_DIR", str(cache_dir))
        assert not tuner.get_kernel(16, 16, 16).tuned


def test_get_kernel_names_its_own_cache_dir_argument_in_errors(tmp_path):
    with pytest.raises(TypeError, match="cache_dir= must be a path, not int"):
        tuner.get_kernel(4, 4, 4, cache_dir=5)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=f"cache_dir={tmp_path / 'file'} is not a directory"):
        tuner.get_kernel(4, 4, 4, cache_dir=tmp_path / "file")
