"""tuner.matmul against NumPy on the simulator: odd shapes, dtypes, alpha/beta, host and device
operands, and every kind of bad input (a clear exception, or NumPy's answer where it has one)."""
import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import tuner

TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3}


@pytest.fixture(autouse=True)
def empty_cache(cache_dir):
    """Nothing tuned: every product runs the default configuration, warned about once."""
    warnings.simplefilter("ignore", tuner.UntunedWarning)


def _operands(m, n, k, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)


def _expected(A, B, alpha=1.0, beta=0.0, C=None):
    product = alpha * (A.astype(np.float64) @ B.astype(np.float64))
    return product if C is None else product + beta * C.astype(np.float64)


def _close(result, expected, dtype):
    bound = TOLERANCE[dtype] * max(np.linalg.norm(expected), 1.0)
    assert np.linalg.norm(np.asarray(result, np.float64) - expected) <= bound


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (67, 3, 2)], ids=["1x1x1", "primes", "tall-skinny"])
def test_numpy_operands_give_numpy_results(shape, dtype):
    A, B = _operands(*shape, dtype)
    C = tuner.matmul(A, B)
    assert type(C) is np.ndarray and C.shape == shape[:2]
    assert C.dtype == (np.float32 if dtype == "float16" else dtype)  # float16 accumulates and returns float32
    _close(C, _expected(A, B), dtype)


def test_a_product_larger_than_one_tile():
    A, B = _operands(65, 66, 17)
    _close(tuner.matmul(A, B), _expected(A, B), "float32")


def test_alpha_and_beta_scale_into_out():
    A, B = _operands(9, 10, 11, "float64")
    C = np.random.default_rng(1).uniform(-1, 1, (9, 10))
    before = C.copy()
    assert tuner.matmul(A, B, C, alpha=2.0, beta=-0.5) is C
    _close(C, _expected(A, B, 2.0, -0.5, before), "float64")


@pytest.mark.parametrize("alpha, beta", [(np.True_, np.float32(-0.5)), (np.array(2.0), np.array(-1)),
                                         (np.int64(3), np.uint8(1))], ids=["numpy bool", "0-d arrays", "numpy ints"])
def test_alpha_and_beta_take_numpy_scalars_as_numpy_does(alpha, beta):
    A, B = _operands(4, 5, 6, "float64")
    C = np.ones((4, 5))
    tuner.matmul(A, B, C, alpha=alpha, beta=beta)
    _close(C, _expected(A, B, float(alpha), float(beta), np.ones((4, 5))), "float64")


def test_threads_may_share_tuner_matmul():
    """Numba's simulator keeps a launch's thread state for the whole process: tuner launches one
    at a time there, so that callers' threads do not mix up (on a GPU they run as they come)."""
    from concurrent.futures import ThreadPoolExecutor

    operands = [_operands(8 + index, 9, 10 - index, "float64") for index in range(6)]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda pair: tuner.matmul(*pair), operands))
    for (A, B), C in zip(operands, results):
        _close(C, _expected(A, B), "float64")


def test_device_operands_give_device_results_in_place():
    A, B = _operands(5, 6, 7)
    result = tuner.matmul(cuda.to_device(A), cuda.to_device(B))
    assert cuda.devicearray.is_cuda_ndarray(result)
    _close(result.copy_to_host(), _expected(A, B), "float32")
    out = cuda.device_array((5, 6), np.float32)
    assert tuner.matmul(cuda.to_device(A), B, out=out) is out  # a host B is copied over
    _close(out.copy_to_host(), _expected(A, B), "float32")


def test_strided_and_fortran_ordered_host_operands():
    A, B = _operands(6, 5, 8)
    wide = np.zeros((6, 10), np.float32)
    out = wide[:, ::2]
    tuner.matmul(np.asfortranarray(A), B[::-1][::-1], out=out)
    _close(out, _expected(A, B), "float32")
    assert not wide[:, 1::2].any()


def test_device_operands_of_other_layouts_reach_only_the_verified_kernel(launched_types):
    """A transposed or strided device operand is copied into a C-contiguous one on the device, and
    a strided device out is computed into one and copied back: the tuned kernel runs only on the
    operand types it was verified for, never as another specialization Numba would compile."""
    A, B = _operands(6, 5, 8)
    wide_B, memory = np.zeros((8, 10), np.float32), np.random.default_rng(3).uniform(-1, 1, (6, 10)).astype(np.float32)
    wide_B[:, ::2] = B
    transposed, wide_out = cuda.to_device(np.ascontiguousarray(A.T)).T, cuda.to_device(memory)
    out = wide_out[:, ::2]
    assert tuner.matmul(transposed, cuda.to_device(wide_B)[:, ::2], out, alpha=2.0, beta=-1.0) is out
    _close(out.copy_to_host(), _expected(A, B, 2.0, -1.0, memory[:, ::2]), "float32")
    np.testing.assert_array_equal(wide_out.copy_to_host()[:, 1::2], memory[:, 1::2])  # between out's columns
    assert launched_types and all(given == compiled for given, compiled in launched_types), launched_types


def test_the_device_copies_of_operands_of_other_layouts_must_fit_in_its_memory(monkeypatch):
    runtime = tuner.tuned._library(None, None).runtime
    monkeypatch.setattr(runtime, "device", dataclasses.replace(runtime.device, memory_bytes=1500))
    A, B = (cuda.to_device(matrix) for matrix in _operands(16, 16, 16))  # 1 KiB each
    out = cuda.device_array((16, 16), np.float32)
    tuner.matmul(A, B, out)  # nothing copied
    tuner.matmul(A.T, B, out)  # one copy, of 1 KiB
    with pytest.raises(MemoryError, match="split it into smaller products"):  # two copies, of 2 KiB
        tuner.matmul(A.T, B.T, out)


def test_out_aliasing_an_operand_gives_numpy_answer():
    A, _ = _operands(6, 6, 6, "float64")
    expected = _expected(A, A)
    on_device = cuda.to_device(A)
    tuner.matmul(on_device, on_device, out=on_device)
    _close(on_device.copy_to_host(), expected, "float64")
    on_host = A.copy()
    tuner.matmul(on_host, on_host, out=on_host)
    _close(on_host, expected, "float64")
    # 65 columns take two 64-wide blocks: the simulator runs the first, which writes C, before the second reads A
    A, B = _operands(3, 65, 65, "float64")
    on_device = cuda.to_device(A)
    tuner.matmul(on_device, B, out=on_device)
    _close(on_device.copy_to_host(), _expected(A, B), "float64")


def test_out_overlapping_an_operand_of_another_layout():
    X = np.random.default_rng(2).uniform(-1, 1, (4, 4)).astype(np.float32)
    expected = _expected(X.T, X)
    on_device = cuda.to_device(X)
    tuner.matmul(on_device.T, on_device, out=on_device)
    _close(on_device.copy_to_host(), expected, "float32")
    wide = cuda.to_device(np.hstack([np.zeros((4, 2), np.float32), X[:, :2]]))
    tuner.matmul(wide[:, 2:], np.eye(2, dtype=np.float32), out=wide[:, :2])  # side by side, not overlapping
    _close(wide.copy_to_host()[:, :2], X[:, :2].astype(np.float64), "float32")


def test_an_operand_overlapping_a_strided_out_is_not_copied(monkeypatch):
    """A strided out gets the product through a contiguous stand-in, written into out after the
    kernel, so an operand it overlaps is read as it was without a copy of its own (which cost a
    pass and device memory, and where memory was short, a MemoryError for a product that fits)."""
    from tuner import arrays

    rows = cuda.to_device(np.random.default_rng(3).uniform(-1, 1, (8, 4)).astype(np.float32))
    A, B = rows[:4], np.random.default_rng(4).uniform(-1, 1, (4, 4)).astype(np.float32)
    expected = _expected(A.copy_to_host(), B)
    copied, to_device = [], arrays._to_device
    monkeypatch.setattr(arrays, "_to_device", lambda runtime, array, stream: copied.append(arrays.is_device(array)) or
                        to_device(runtime, array, stream))
    tuner.matmul(A, B, out=rows[::2])  # rows 0, 2, 4 and 6: two of them A's
    assert copied == [False]  # B, from the host, alone
    _close(rows.copy_to_host()[::2], expected, "float32")


def test_a_broadcast_device_out_is_refused_in_one_line():
    """A device out with a stride of 0 has entries that are one memory location: the product's
    parallel writes to them would race, leaving any one of them (NumPy, writing in turn, leaves
    the last); a host one gets NumPy's answer."""
    A, B = _operands(4, 3, 5)
    for strides in [(4, 0), (0, 4)]:
        with pytest.raises(ValueError, match=r"^out is a broadcast device array \(a stride of 0\), whose entries share "
                                             r"memory that the product's parallel writes would race for; pass one "
                                             r"with memory of its own for each entry$"):
            tuner.matmul(A, B, out=cuda.device_array((4, 3), np.float32, strides=strides))
    row = cuda.device_array((1, 3), np.float32, strides=(0, 4))  # a stride of 0 along one row moves nowhere
    tuner.matmul(A[:1], B, out=row)
    _close(row.copy_to_host(), _expected(A[:1], B), "float32")
    host, numpys = (np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (4, 3), (4, 0)) for _ in range(2))
    tuner.matmul(A, B, out=host)
    np.matmul(A, B, out=numpys)
    np.testing.assert_allclose(host, numpys, rtol=1e-5)  # each row's last entry, in its every entry


def test_big_endian_host_operands():
    A, B = _operands(5, 3, 4)
    out = np.zeros((5, 3), ">f4")
    tuner.matmul(A.astype(">f4"), B.astype(">f4"), out=out)
    _close(out, _expected(A, B), "float32")


@pytest.mark.parametrize("swapped", ["A", "B", "out"])
def test_a_device_array_in_the_other_byte_order_is_refused_in_one_line(swapped):
    """numba-cuda copies a big-endian host array to the device as it is, but compiles no kernel for
    its dtype (numpy_support.from_dtype raises at the launch); the simulator, which runs the kernel
    on NumPy arrays, would multiply it."""
    A, B = _operands(4, 3, 5)
    operands = {"A": cuda.to_device(A), "B": cuda.to_device(B), "out": cuda.device_array((4, 3), np.float32)}
    operands[swapped] = cuda.to_device(np.zeros(operands[swapped].shape, ">f4"))
    with pytest.raises(TypeError, match=rf"^{swapped} is a device array of >f4 \(float32 not in this machine's byte "
                                        r"order\), which Numba compiles no kernel for; copy it to the device from a "
                                        r"host array in native byte order, such as host.astype\(np.float32\)$"):
        tuner.matmul(**operands)


def test_a_product_taller_than_a_grid_runs_as_several_launches(monkeypatch):
    runtime = tuner.tuned._library(None, None).runtime
    one_row_of_blocks = dataclasses.replace(runtime.backend.limits, grid_rows=1)
    monkeypatch.setattr(runtime, "backend", dataclasses.replace(runtime.backend, limits=one_row_of_blocks))
    A, B = _operands(150, 5, 3)  # three row tiles of 64: three launches
    _close(tuner.matmul(A, B), _expected(A, B), "float32")
    from numba import cuda

    kernel, C = tuner.get_kernel(150, 5, 3), cuda.device_array((150, 5), np.float32)
    kernel(cuda.to_device(A), cuda.to_device(B), C)  # a launch of a tuned kernel is split alike
    _close(C.copy_to_host(), _expected(A, B), "float32")


def test_a_product_wider_than_a_grid_covers_is_refused_in_one_line_naming_the_width_to_split_at(monkeypatch):
    """ROC bounds a grid's threads along x (blocks x threads per block) to 32 bits. A block of C's
    columns is not C-contiguous, so splitting there would run a kernel never verified: refused, for
    tuner.matmul and for a tuned kernel, before any launch."""
    from tuner.kernel import Kernel
    from tuner.space import Space

    runtime = tuner.tuned._library(None, None).runtime
    config = Space.of(runtime.backend, "float32").default()
    two_tiles = dataclasses.replace(runtime.backend, grid_column_threads=2 * config.threads)
    monkeypatch.setattr(runtime, "backend", two_tiles)
    launches, configured = [], Kernel._configured
    monkeypatch.setattr(Kernel, "_configured", lambda kernel, grid, stream: launches.append(grid) or configured(
        kernel, grid, stream))
    A, B = _operands(70, 2 * config.block_n + 1, 3)
    message = f"C is {2 * config.block_n + 1} columns wide, more than one {runtime.backend.name} launch of this " \
              f"kernel covers; multiply B's columns in blocks of at most {2 * config.block_n}"
    with pytest.raises(ValueError) as raised:
        tuner.matmul(A, B)
    assert str(raised.value) == message
    with pytest.raises(ValueError) as raised:
        C = cuda.device_array((70, B.shape[1]), np.float32)
        tuner.get_kernel(A.shape[0], B.shape[1], A.shape[1])(cuda.to_device(A), cuda.to_device(B), C)
    assert str(raised.value) == message and launches == []
    A, B = _operands(70, 2 * config.block_n, 3)  # as wide as a grid covers
    _close(tuner.matmul(A, B), _expected(A, B), "float32")
    assert launches == [(2, 2)]


def test_a_tuned_kernel_refuses_a_c_over_its_operands():
    """tuner.matmul copies an operand that `out` overlaps; the kernel itself would read what it overwrites."""
    A, B = _operands(72, 72, 72)
    kernel, dA, dB = tuner.get_kernel(72, 72, 72), cuda.to_device(A), cuda.to_device(B)
    for C, name in ((dA, "A"), (dB, "B")):
        with pytest.raises(ValueError, match=f"C shares memory with {name}, .*; pass a separate C"):
            kernel(dA, dB, C)
    np.testing.assert_array_equal(dA.copy_to_host(), A)  # nothing ran


class _Exported:
    """Stands in for a CUDA Array Interface exporter (a CuPy array) of host memory."""

    def __init__(self, host):
        self.shape, self.dtype, self._host = host.shape, host.dtype, host
        self.__cuda_array_interface__ = {**host.__array_interface__, "version": 3,
                                         "strides": None if host.flags.c_contiguous else host.strides}


def test_a_tuned_kernel_refuses_operands_of_another_layout():
    """Numba would compile another kernel for them, never verified (tuner.matmul copies them itself)."""
    A, B = _operands(8, 8, 8)
    kernel, dA, dB = tuner.get_kernel(8, 8, 8), cuda.to_device(A), cuda.to_device(B)
    C = cuda.to_device(np.zeros((8, 8), np.float32))
    strided = {"A": (dA.T, dB, C), "B": (dA, cuda.to_device(np.hstack([B, B]))[:, ::2], C),
               "C": (dA, dB, cuda.to_device(np.zeros((8, 16), np.float32))[:, ::2]),
               "a NumPy A": (A.T, B, np.zeros((8, 8), np.float32)), "an exported A": (_Exported(A.T), dB, C)}
    for what, operands in strided.items():
        for launch in (lambda: kernel(*operands), lambda: kernel.kernel.bind(*operands)):
            with pytest.raises(ValueError, match=f"^{what.split()[-1]} is not C-contiguous \\(a transposed, strided or "
                                                 "broadcast view\\), .*; pass a C-contiguous copy"):
                launch()
    assert not C.copy_to_host().any()  # nothing ran
    kernel.kernel.check_operands(_Exported(np.ascontiguousarray(A.T)), dB, C)
    explicit = _Exported(A)
    explicit.__cuda_array_interface__["strides"] = A.strides  # numba-cuda types it layout "A" (see below)
    with pytest.raises(ValueError, match="^A is not C-contiguous"):
        kernel.kernel.check_operands(explicit, dB, C)


def test_an_exporter_is_taken_as_it_is_only_where_numba_cuda_types_it_as_the_kernel_is_compiled():
    """numba-cuda types a CUDA Array Interface exporter (one without Numba's own type) from the
    strides its interface gives: layout "C" only where it gives none, layout "A" even for a
    C-contiguous array's strides (it compares them with the item size in bits). One taken as C
    there would make it compile another kernel, never verified. Asked of numba-cuda's own typeof,
    outside the simulator (whose typeof is NumPy's)."""
    script = """if True:
        import json
        import numpy as np
        from numba.cuda.typing.typeof import typeof
        from tuner.arrays import compiled_layout

        class Exported:
            def __init__(self, host, strides):
                self.shape, self.dtype = host.shape, host.dtype
                self.__cuda_array_interface__ = {"shape": host.shape, "strides": strides, "typestr": host.dtype.str,
                                                 "data": (host.ctypes.data, False), "version": 3}

        host = np.zeros((2, 4, 6), np.float32)
        cases = {"no strides": (host, None), "a C-contiguous one's strides": (host, host.strides),
                 "a band of rows": (host[:, 1:3], host[:, 1:3].strides), "one layer": (host[1:], None),
                 "strided": (host[:, :, ::2], host[:, :, ::2].strides),
                 "transposed": (host.T, host.T.strides), "broadcast": (host, (0, 24, 4))}
        print(json.dumps({name: [compiled_layout(Exported(array, strides)), typeof(Exported(array, strides)).layout]
                          for name, (array, strides) in cases.items()}))
    """
    environment = {key: value for key, value in os.environ.items() if key != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**environment, "PYTHONPATH": os.path.dirname(os.path.dirname(tuner.__file__))})
    assert done.returncode == 0, done.stderr
    layouts = json.loads(done.stdout)
    assert layouts["no strides"] == [True, "C"]
    assert {name: taken for name, (taken, layout) in layouts.items() if taken != (layout == "C")} == {}


class _Dispatcher:
    """Stands in for a Numba dispatcher: counts launches."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, configuration):
        return self.launch

    def launch(self, *arguments):
        self.launches += 1


def test_a_tuned_kernel_launches_nothing_for_an_empty_c():
    """A grid with no blocks is no launch (CUDA refuses one)."""
    dispatcher = _Dispatcher()
    kernel = dataclasses.replace(tuner.get_kernel(8, 5, 6).kernel, function=dispatcher)
    A, B = (cuda.to_device(operand) for operand in _operands(8, 5, 6))
    kernel(A, B, cuda.device_array((8, 5), np.float32))
    kernel(cuda.device_array((0, 6), np.float32), B, cuda.device_array((0, 5), np.float32))
    assert dispatcher.launches == 1


def test_a_tuned_kernel_leaves_out_numbas_small_grid_warning_and_only_its_own(tmp_path):
    """numba-cuda warns of a grid under 128 blocks when a launch is configured, which needs no GPU;
    tuner's launches go without it, and other kernels' keep it."""
    script = f"""
import warnings
from pathlib import Path
from tuner.backends import CUDA
from tuner.kernel import load
from tuner.space import Space

space = Space.of(CUDA, "float32")
kernel = load(space, space.default(), Path({str(tmp_path / "kernels")!r}))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    kernel._configured((1, 1), 0)
    tuners = len(seen)
    kernel.function[(2, 1), kernel.block, 0]  # configured as any Numba kernel is
print(tuners, [str(warning.message) for warning in seen[tuners:]])
"""
    environment = {name: value for name, value in os.environ.items() if name != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stderr
    tuners, others = done.stdout.split(" ", 1)
    assert tuners == "0" and "Grid size 2 will likely result in GPU under-utilization" in others


def test_empty_dimensions_follow_numpy():
    assert tuner.matmul(np.zeros((0, 3), np.float32), np.zeros((3, 4), np.float32)).shape == (0, 4)
    assert tuner.matmul(np.zeros((3, 4), np.float32), np.zeros((4, 0), np.float32)).shape == (3, 0)
    np.testing.assert_array_equal(tuner.matmul(np.ones((2, 0)), np.ones((0, 3))), np.zeros((2, 3)))
    C = np.full((2, 3), 4.0)
    tuner.matmul(np.ones((2, 0)), np.ones((0, 3)), C, beta=0.5)
    np.testing.assert_array_equal(C, np.full((2, 3), 2.0))


def test_an_empty_product_copies_neither_operand(monkeypatch):
    """With an empty C no kernel runs: A and B, however large, are neither copied to the device nor
    counted against its memory (a broadcast view of 2**40 elements takes none of the host's)."""
    monkeypatch.setattr("tuner.arrays._to_device", lambda *arguments: pytest.fail("an operand was copied"))
    huge = np.broadcast_to(np.float32(1), (2**20, 2**20))
    assert tuner.matmul(np.zeros((0, 2**20), np.float32), huge).shape == (0, 2**20)
    assert tuner.matmul(huge, np.zeros((2**20, 0), np.float32)).shape == (2**20, 0)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the simulator computes in NumPy scalars
def test_nan_and_inf_propagate_as_in_numpy():
    A, B = _operands(5, 4, 3, "float64")
    A[0, 0], A[2, 1], B[2, 3] = np.nan, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        expected = A @ B
    result = tuner.matmul(A, B)
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(result), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(result[finite], expected[finite], rtol=1e-12)


class _Unlendable:
    """Like a PyTorch tensor that requires grad: its __cuda_array_interface__ raises."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


F32 = np.ones((4, 3), np.float32)
BAD = {
    "inner dimensions": ((F32, F32), {}, ValueError, r"A's columns \(3\) must equal B's rows \(4\)"),
    "a vector": ((F32[0], F32.T), {}, ValueError,
                 "2-D matrices or 3-D stacks of them .*, but A is 1-D and B is 2-D; reshape"),
    "a stack of 4-D": ((np.ones((2, 2, 4, 3), np.float32), F32.T), {}, ValueError,
                       r"A is 4-D and B is 2-D; reshape a deeper stack S into one, as S.reshape\(-1, \*S.shape.*"
                       r"and the result R back, as R.reshape\(\*S.shape\[:-2\], \*R.shape\[-2:\]\)$"),
    "a scalar": ((np.float32(2), F32.T), {}, ValueError, "A is 0-D and B is 2-D; a scalar s is no operand: pass it as"),
    "integers": ((np.ones((4, 3), int), np.ones((3, 2), int)), {}, TypeError, "int64 matrices are not supported"),
    "complex": ((F32.astype(complex), F32.T.astype(complex)), {}, TypeError, "complex128 matrices"),
    "mixed dtypes": (([[1.0, 2.0, 3.0]] * 4, F32.T), {}, TypeError,
                     r"A is float64 and B is float32; .* does not mix dtypes: cast one, e.g. B as np.asarray\(B, "
                     r"dtype=np.float64\)"),
    "mixed with integers": ((np.ones((4, 3), np.int64), F32.T), {}, TypeError,
                            r"A is int64 and B is float32; .* cast one, e.g. A as np.asarray\(A, dtype=np.float32\)"),
    "mixed floats, the wider second": ((F32, F32.T.astype(np.float64)), {}, TypeError,
                                       r"A is float32 and B is float64; .* cast one, e.g. A as np.asarray\(A, "
                                       r"dtype=np.float64\)"),  # what np.matmul promotes to, not a lossy cast
    "float32 with complex": ((F32, F32.T.astype(np.complex64)), {}, TypeError,
                             r"^complex64 matrices are not supported on cuda"),  # no cast: it would drop a part
    "float16 with float32": ((F32.astype(np.float16), F32.T), {}, TypeError,
                             r"A is float16 and B is float32; .* e.g. A as np.asarray\(A, dtype=np.float32\)"),
    "out of the wrong shape": ((F32, F32.T), {"out": np.zeros((4, 3), np.float32)}, ValueError,
                               r"out has shape \(4, 3\), but A @ B is 4x4"),
    "out of the wrong dtype": ((F32, F32.T), {"out": np.zeros((4, 4))}, TypeError, "out is float64"),
    "out as a list": ((F32, F32.T), {"out": [[0.0] * 4] * 4}, TypeError, "out must be a NumPy array"),
    "read-only out": ((F32, F32.T), {"out": np.broadcast_to(np.float32(0), (4, 4))}, ValueError,
                      "out is read-only; pass a writable array"),  # not NumPy's own, after the launch
    "beta without out": ((F32, F32.T), {"beta": 1.0}, ValueError, "pass C as out="),
    "a complex alpha": ((F32, F32.T), {"alpha": 1j}, TypeError, "alpha must be a real number"),
    "an alpha of one element": ((F32, F32.T), {"alpha": np.array([2.0])}, TypeError,
                                "alpha must be a real number, not a 1-D float64 array"),
    "a complex 0-D beta": ((F32, F32.T), {"out": np.zeros((4, 4), np.float32), "beta": np.array(1j)}, TypeError,
                           "beta must be a real number, not a 0-D complex128 array"),
    "too large for the device": ((np.broadcast_to(np.float32(1), (300_000, 300_000)),
                                  np.broadcast_to(np.float32(1), (300_000, 2))), {}, MemoryError,
                                 "split it into smaller products"),
    "a tensor that cannot lend its memory": ((_Unlendable(), F32.T), {}, TypeError, "cannot lend its device memory"),
    "None": ((None, F32.T), {}, TypeError, "A must be a matrix of numbers, not NoneType"),
    "strings": ((F32, np.full((3, 4), "x")), {}, TypeError, "B must be a matrix of numbers, not ndarray of <U1"),
    "ragged rows": (([[1.0, 2.0, 3.0]] * 3 + [[1.0, 2.0]], F32.T), {}, ValueError,
                    r"^A cannot be read as a matrix of numbers \(setting an array element with a sequence.*\); "
                    r"pass an array, or nested lists whose rows \(and matrices\) are all as long$"),
    "a ragged stack": ((np.ones((2, 4, 3), np.float32), [F32.T.tolist(), F32.tolist()]), {}, ValueError,
                       r"^B cannot be read as a matrix of numbers .*; pass an array, or nested lists"),
    "a masked array": ((np.ma.masked_array(F32, mask=F32 > 0), F32.T), {}, TypeError,
                       r"A is a masked array, whose mask tuner.matmul would ignore; pass A.filled\(0\)"),
    "a masked out": ((F32, F32.T), {"out": np.ma.masked_array(np.zeros((4, 4), np.float32))}, TypeError,
                     r"out is a masked array, whose mask tuner.matmul would ignore; pass out.data to write the "
                     r"product into its data"),  # out.filled(0) would be a copy, never written
    "an alpha float32 cannot hold": ((F32, F32.T), {"alpha": 1e300}, ValueError,
                                     r"alpha=1e\+300 overflows float32, the precision this product is computed in"),
    "a beta no float can hold": ((F32, F32.T), {"out": np.zeros((4, 4), np.float32), "beta": 10 ** 400}, ValueError,
                                 r"beta=10000000000000000000\.\.\. overflows float32"),
    "a precision that is not a name": ((F32, F32.T), {"precision": ["tf32"]}, TypeError,
                                       r"precision must be a name, not \['tf32'\]; for float32 matrices choose"),
    "too large for the simulator": ((np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)), {}, ValueError,
                                    "256x256x256 is too large for the simulator.*; run it on a GPU, or with smaller"),
}


@pytest.mark.parametrize("operands, keywords, error, message", BAD.values(), ids=BAD.keys())
def test_bad_input_is_a_clear_exception(operands, keywords, error, message):
    with pytest.raises(error, match=message):
        tuner.matmul(*operands, **keywords)


class _Quantity(np.ndarray):
    """Like astropy's Quantity: an ndarray subclass whose products np.matmul gives back as its own kind."""


@pytest.mark.parametrize("name", ["A", "B", "out"])
@pytest.mark.parametrize("subclass", [np.matrix, _Quantity], ids=["np.matrix", "units"])
def test_an_ndarray_subclass_is_refused_naming_np_asarray(name, subclass):
    """np.matmul gives a subclass's product back as that subclass (a matrix, a quantity with its units);
    tuner.matmul's is a plain ndarray, so it refuses one rather than drop what it carries."""
    A, B = _operands(4, 3, 5)
    operands = {"A": A, "B": B, "out": np.zeros((4, 3), np.float32)}
    operands[name] = operands[name].view(subclass)
    assert type(np.matmul(operands["A"], operands["B"], out=operands["out"] if name == "out" else None)) is subclass
    remedy = (r"pass np.asarray\(out\), a view of its memory, to write the product there$" if name == "out" else
              rf"pass np.asarray\({name}\) to multiply its values as a plain array$")
    with pytest.raises(TypeError, match=rf"^{name} is a {subclass.__name__}, an ndarray subclass whose kind np.matmul "
                                        rf"keeps \(a matrix, units\) and tuner.matmul would drop; {remedy}"):
        tuner.matmul(**operands)


def test_a_memory_mapped_operand_is_multiplied_as_np_matmul_multiplies_it(tmp_path):
    """np.matmul gives a memmap's product back as a plain ndarray, and so does tuner.matmul."""
    A, B = _operands(4, 3, 5)
    mapped = np.memmap(tmp_path / "A", np.float32, "w+", shape=A.shape)
    mapped[:] = A
    result = tuner.matmul(mapped, B)
    assert type(result) is type(np.matmul(mapped, B)) is np.ndarray
    _close(result, _expected(A, B), "float32")


@pytest.mark.skipif(np.finfo(np.longdouble).max < np.longdouble("1e400"),
                    reason="this platform's long double is float64")
def test_a_long_double_alpha_beyond_float64_is_refused_not_turned_into_infinity():
    F64 = F32.astype(np.float64)
    with pytest.raises(ValueError, match=r"overflows float64, the precision this product is computed in; scale A or "
                                         r"B instead$"):
        tuner.matmul(F64, F64.T, alpha=np.longdouble("1e400"))


def test_a_product_too_large_for_the_simulator_is_refused_before_its_operands_are_copied(monkeypatch):
    """Copying first costs the time, and the host memory (the simulator's device memory), the refusal
    spares: operands near the host's memory were copied twice before, and the process was killed."""
    def copy(*args, **kwargs):
        raise AssertionError("an operand was copied to the device")

    monkeypatch.setattr(cuda, "to_device", copy)
    square = np.ones((256, 256), np.float32)
    with pytest.raises(ValueError, match="256x256x256 is too large for the simulator"):
        tuner.matmul(square, square)


class _DriverError(Exception):
    """Like numba-cuda's CudaAPIError (numba-hip's HipAPIError alike), which the simulator replaces: the
    driver's result as `code`."""

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code


@pytest.mark.parametrize("failing", ["to_device", "device_array", "launch"])
@pytest.mark.parametrize("result, error, message", [
    ("CUDA_ERROR_OUT_OF_MEMORY", MemoryError,
     r"^the device ran out of memory for this product \(placing its operands and result, or launching its kernels\); "
     r"free device memory \(arrays of this program or of other processes\), or split it into smaller products$"),
    ("CUDA_ERROR_INVALID_VALUE", _DriverError, "CUDA_ERROR_INVALID_VALUE"),  # any other failure as the driver gave it
], ids=["out of memory", "another failure"])
def test_an_allocation_or_launch_the_device_has_no_room_for_is_a_memory_error_saying_what_to_do(
        monkeypatch, failing, result, error, message):
    """The free memory is checked before anything is copied, but an allocation may fail all the same
    (memory taken meanwhile by another process, or too fragmented), and a launch may find no room
    for a kernel's local memory or its code: numba-cuda's error, after its own retry, reached the
    user as the driver's, a traceback, where MemoryError is promised."""
    code = getattr(pytest.importorskip("cuda.bindings.driver").CUresult, result)

    def fail(*args, **kwargs):
        raise _DriverError(code, f"Call to the driver results in {result}")

    if failing == "launch":
        monkeypatch.setattr(tuner.kernel.Kernel, "_configured", lambda self, grid, stream: fail)
    else:
        monkeypatch.setattr(cuda, failing, fail)
    with pytest.raises(error, match=message):
        tuner.matmul(*_operands(5, 6, 7))


def test_a_copy_into_a_strided_out_the_device_has_no_room_for_is_a_memory_error_saying_what_to_do(monkeypatch):
    """Numba's copy kernel, which copies the product into a strided out, is compiled and loaded at
    its first use (lazy loading), once the operands are placed: a launch that can fail for want of
    device memory, as the tuned kernel's can (the test above). That reached the user as the
    driver's error, a traceback, where MemoryError is promised."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    code = pytest.importorskip("cuda.bindings.driver").CUresult.CUDA_ERROR_OUT_OF_MEMORY

    class CopyKernelLaunched:  # numba-cuda's assignment launches its copy kernel
        def __setitem__(self, *args):
            raise _DriverError(code, "Call to cuLaunchKernel results in CUDA_ERROR_OUT_OF_MEMORY")

    monkeypatch.setattr(FakeCUDAArray, "bind", lambda array, stream=0: CopyKernelLaunched())
    A, B = (cuda.to_device(matrix) for matrix in _operands(5, 6, 7))
    out = cuda.to_device(np.zeros((5, 12), np.float32))[:, ::2]
    with pytest.raises(MemoryError, match=r"^the device ran out of memory .*; free device memory .*, or split it "
                                          r"into smaller products$"):
        tuner.matmul(A, B, out)


def test_the_gpu_benchmarks_device_a_of_another_layout_is_one_on_a_gpu_too(monkeypatch):
    """bench/matmul_on_gpu.py checks that a device A of another layout runs only the verified
    kernel. It made that A as a device array's .T, which numba-cuda's DeviceNDArray computes into a
    new C-contiguous array with a transpose kernel (the simulator's is NumPy's view): on a GPU the
    check passed with no operand of another layout. Here .T copies as numba-cuda's does."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from tuner import arrays

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import matmul_on_gpu

    monkeypatch.setattr(FakeCUDAArray, "transpose",
                        lambda self, axes=None: cuda.to_device(np.ascontiguousarray(self.copy_to_host().T)))
    laid_out, contiguous = [], arrays._contiguous

    def copying(runtime, array, *arguments, **keywords):
        laid_out.append(array.is_c_contiguous())
        return contiguous(runtime, array, *arguments, **keywords)

    monkeypatch.setattr(arrays, "_contiguous", copying)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuner.UntunedWarning)
        row = matmul_on_gpu._first_call((16, 8, 12), "float32")
    assert laid_out == [False] and row["transposed_A_relative_error"] < 1e-5, laid_out



def test_the_gpu_benchmark_fails_on_a_failed_phase_or_a_kernel_compiled_for_another_layout(monkeypatch):
    """bench/matmul_on_gpu.py printed a failed phase, or a count of specializations, and exited 0,
    so gpu_check.sh counted the step as passed."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import matmul_on_gpu

    passed = {"cold": {"kernel_specializations": 1}, "warm": {"kernel_specializations": None},
              "dispatch": {}, "cublas": {"skipped": "CuPy is not installed"}}
    assert matmul_on_gpu._problems(passed) == []
    assert matmul_on_gpu._problems({**passed, "dispatch": {"failed": 1, "stderr": ""}}) == ["the dispatch phase failed"]
    assert matmul_on_gpu._problems({**passed, "warm": {"kernel_specializations": 2}}) == [
        "warm: the kernel has 2 specializations after the call on an F-ordered device A, not 1"]

def test_array_interface_exporters_are_used_in_place():
    if not hasattr(cuda, "as_cuda_array"):
        pytest.skip("Numba's CUDA simulator has no __cuda_array_interface__; CuPy (and, where installed, "
                    "PyTorch) operands are checked on a GPU by bench/matmul_on_gpu.py")
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    A, B = _operands(33, 17, 9)
    result = tuner.matmul(cupy.asarray(A), cupy.asarray(B))
    assert isinstance(result, cupy.ndarray)
    _close(cupy.asnumpy(result), _expected(A, B), "float32")


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="an NVIDIA driver is present")
def test_without_a_gpu_the_error_names_the_simulator():
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    script = "import numpy, tuner; tuner.matmul(numpy.ones((2, 2)), numpy.ones((2, 2)))"
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("tuner.runtime.NoGPU: no GPU here (")
    assert "tuner.matmul needs one, or, to try it on Numba's CUDA simulator" in done.stderr
    assert "set NUMBA_ENABLE_CUDASIM=1 before starting Python" in done.stderr


def test_each_device_a_program_switches_to_gets_its_own_runtime_and_records(monkeypatch, tmp_path):
    """A program may switch GPUs (cuda.select_device, `with cuda.gpus[1]`): tuner.matmul then
    describes that device and reads its records, rather than the first device's."""
    import types

    from records import H100

    from tuner import tuned
    from tuner.backends import CUDA
    from tuner.runtime import Runtime

    current = {"id": 0}
    module = types.SimpleNamespace(get_current_device=lambda: types.SimpleNamespace(id=current["id"]))
    monkeypatch.setattr(type(CUDA), "describe", lambda self, module: dataclasses.replace(
        H100, name=f"NVIDIA GPU {current['id']}"))
    opened = Runtime(CUDA, module, CUDA.describe(module))
    monkeypatch.setattr(tuned, "detect_runtime", lambda backend: opened)
    for held in ("_runtimes", "_on_device", "_libraries"):
        monkeypatch.setattr(tuned, held, {})
    first = tuned._library("cuda", tmp_path).runtime
    current["id"] = 1
    second = tuned._library("cuda", tmp_path).runtime
    current["id"] = 0
    assert first is opened is tuned._library("cuda", tmp_path).runtime
    assert second.device.name == "NVIDIA GPU 1" and second.device.fingerprint != first.device.fingerprint


def test_a_process_forked_after_tuner_opened_the_gpu_is_told_to_spawn_its_workers(monkeypatch, tmp_path):
    """A GPU driver initialised in a process cannot be used in a child forked after that: numba-cuda
    raises "CUDA initialized before forking" at the child's first driver call, stood in for here.
    tuner says so in one line there, with what to do, before waiting for any lock of the parent's."""
    import contextlib
    import multiprocessing
    import types

    from records import H100

    from tuner import tuned
    from tuner.backends import CUDA
    from tuner.runtime import Runtime, RuntimeUnavailable

    parent = os.getpid()

    def current_device():
        if os.getpid() != parent:
            raise RuntimeError("CUDA initialized before forking")
        return types.SimpleNamespace(id=0)

    opened = Runtime(CUDA, types.SimpleNamespace(get_current_device=current_device), H100)
    monkeypatch.setattr(tuned, "detect_runtime", lambda backend: opened)
    for held in ("_runtimes", "_on_device", "_libraries"):
        monkeypatch.setattr(tuned, held, {})
    assert tuned._library("cuda", tmp_path).runtime is opened
    for backend, held in (("cuda", contextlib.nullcontext()), (None, tuned._lock)):  # forked as a thread holds it
        with held, multiprocessing.get_context("fork").Pool(1) as pool, pytest.raises(RuntimeUnavailable) as refused:
            pool.apply_async(tuned._library, (backend, tmp_path)).get(timeout=10)
        assert str(refused.value) == (
            f"this process was forked from process {parent} after tuner had opened its cuda GPU, whose driver "
            "cannot be used in a process forked after it started; start worker processes with the 'spawn' start "
            "method (multiprocessing.get_context('spawn')), or use the GPU in the parent only after forking them")


def test_on_a_callers_stream_the_copies_and_the_result_wait_for_what_they_follow(monkeypatch):
    """An exporter's non-blocking stream does not wait for the default stream, nor it for that one:
    the host operand's copy is finished before the launch, and the launch before the copy back; a device
    operand's copy goes on the kernel's stream, which orders it without a wait."""
    from tuner import arrays

    runtime, said = tuner.tuned._library(None, None).runtime, []

    class Stream:
        def synchronize(self):
            said.append("stream")

    monkeypatch.setattr(runtime.module, "synchronize", lambda: said.append("device"))
    A, B = _operands(5, 3, 4)
    on_stream = cuda.to_device(B)
    on_stream.stream = Stream()
    call = arrays.prepare(runtime, A, on_stream, np.zeros((5, 3), np.float32), 1.0, 0.0)
    assert said == ["device"]  # A's copy, on the default stream, is done before a launch on B's stream
    call.result()
    assert said == ["device", "stream"]
    numba_result = arrays.prepare(runtime, cuda.to_device(A), on_stream, None, 1.0, 0.0)
    assert numba_result.stream is on_stream.stream and said == ["device", "stream"]  # nothing copied, no wait
    numba_result.result()  # a Numba array, whose later use is on the default stream
    assert said == ["device", "stream", "stream"]
    aliased = cuda.to_device(np.zeros((4, 4), np.float32))
    aliased.stream = Stream()
    call = arrays.prepare(runtime, aliased, aliased, aliased, 1.0, 0.0)  # A and B copied aside, on the device
    assert call.A.stream is call.B.stream is aliased.stream and said[3:] == []  # on the kernel's stream: no wait


def test_operands_on_two_streams_wait_for_the_other_and_it_for_the_product(monkeypatch):
    """The kernel launches on one operand's stream, which nothing orders after the pending work on
    another operand's (a Numba array bound to another stream: numba synchronises only an exporter's
    stream when wrapping it), nor that stream's later work after the kernel: the other stream is
    synchronised before anything is enqueued, and the kernel's before the result is handed back,
    a CuPy or PyTorch one too. One stream seen twice (two wraps of an exporter's) is one stream."""
    from tuner import arrays

    runtime, said = tuner.tuned._library(None, None).runtime, []

    class Stream:
        def __init__(self, name, handle):
            self.name, self.handle = name, handle

        def synchronize(self):
            said.append(self.name)

        def __int__(self):
            return self.handle

    A, B = (cuda.to_device(matrix) for matrix in _operands(5, 3, 4))
    A.stream, B.stream = Stream("A's", 7), Stream("B's", 8)
    call = arrays.prepare(runtime, A, B, None, 1.0, 0.0)
    assert call.stream is A.stream and said == ["B's"]
    cupy_like = type("ndarray", (), {"__module__": "cupy", "__cuda_array_interface__": {}})()
    assert dataclasses.replace(call, out=cupy_like).result() is cupy_like and said == ["B's", "A's"]
    B.stream = Stream("B's, as A's", 7)  # the same stream, wrapped again
    call = arrays.prepare(runtime, A, B, None, 1.0, 0.0)
    assert said == ["B's", "A's"] and dataclasses.replace(call, out=cupy_like).result() is cupy_like
    assert said == ["B's", "A's"]  # one stream: CuPy's later work on it is ordered after the kernel


def test_an_operand_on_the_default_stream_beside_an_exporters_stream_is_waited_for(monkeypatch):
    """An exporter's stream may be non-blocking (a PyTorch side stream, a non-blocking CuPy one),
    which does not wait for the default stream: a Numba array bound to no stream, whose writer may
    still run there, is waited for before the kernel launches on the exporter's stream, and the
    kernel before the result is handed back, a CuPy or PyTorch one too, since the default stream's
    later work would not wait for the kernel reading it. Numba's own streams and the exporters'
    default streams wait for the default stream, so there nothing waits."""
    from tuner import arrays

    runtime, said = tuner.tuned._library(None, None).runtime, []

    class Stream:
        def __init__(self, handle, external):
            self.handle, self.external = handle, external

        def synchronize(self):
            said.append("exporter's")

        def __int__(self):
            return self.handle

    monkeypatch.setattr(runtime.module, "synchronize", lambda: said.append("device"))
    cupy_like = type("ndarray", (), {"__module__": "cupy", "__cuda_array_interface__": {}})()
    A, B = (cuda.to_device(matrix) for matrix in _operands(5, 3, 4))
    B.stream = Stream(7, external=True)
    call = arrays.prepare(runtime, A, B, None, 1.0, 0.0)
    assert call.stream is B.stream and said == ["device"]
    assert dataclasses.replace(call, out=cupy_like).result() is cupy_like and said == ["device", "exporter's"]
    for waits_for_the_default_stream in [Stream(1, external=True), Stream(2, external=True), Stream(7, external=False)]:
        B.stream, said[:] = waits_for_the_default_stream, []
        call = arrays.prepare(runtime, A, B, None, 1.0, 0.0)
        assert dataclasses.replace(call, out=cupy_like).result() is cupy_like and said == []
