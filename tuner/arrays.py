"""The operands of `tuner.matmul`: checked, placed on the device, and handed back in the kind given.

Host operands (NumPy arrays, or anything `numpy.asarray` takes) are copied to the device and the
result is copied back. Device operands (Numba device arrays, and on CUDA any object exporting
`__cuda_array_interface__`, such as CuPy arrays and PyTorch tensors) are used in place where the
kernel takes them as they are, C-contiguous; one of another layout is copied into a contiguous
array on the device, and a device out of another layout gets the product through one.
"""
import contextlib
import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from .dtypes import PRECISIONS
from .family import Family, family_for
from .problem import Problem
from .runtime import Runtime


# The dtypes tuner multiplies, by name: NumPy works out dtype.name in Python at each ask.
_NAMES = {np.dtype(precision.input): precision.input for precision in PRECISIONS.values()}


def is_device(array) -> bool:
    """Whether `array` lives on the device: a Numba device array or a CUDA Array Interface exporter."""
    if isinstance(array, np.ndarray):
        return False
    if hasattr(array, "copy_to_host"):  # a Numba device array (CUDA, ROC or the simulator)
        return True
    try:
        return getattr(array, "__cuda_array_interface__", None) is not None
    except Exception as error:  # PyTorch refuses for a tensor that requires grad
        raise TypeError(f"a {type(array).__name__} that cannot lend its device memory ({error}); "
                        "pass one that can (for PyTorch, tensor.detach())") from None


@dataclass
class Call:
    """One product's device operands, and how to hand its result back."""

    A: object
    B: object
    C: object
    family: Family  # the kernel family whose operands these are
    problem: Problem | None  # the product the kernel is chosen for (k at least 1); None when C is empty
    out: object  # what the caller passed as out, if anything
    model: object  # the caller's first device operand, whose kind a new result takes; None for NumPy
    alpha: np.floating  # alpha and beta, checked, in the precision the product is computed in
    beta: np.floating
    stream: object = 0  # the exporter's stream, so that the caller's later work is ordered after ours
    strided_out: object = None  # the caller's device out where the kernel cannot take it: C stands in for it
    other_streams: bool = False  # whether work on streams other than the kernel's was waited for (arrays._stream)

    def result(self):
        """The product, as the caller's `out` (copied there from C first where C stands in for it)
        or as the kind of array the caller gave. Where the kernel ran on an exporter's stream, a
        result read on the default stream (a host copy, a Numba array) waits for it first: a
        non-blocking stream and the default one do not wait for each other. A CuPy or PyTorch
        result needs no wait, their later work going on that stream, unless operands were on
        other streams too, whose later work would not wait for the kernel reading them."""
        if self.strided_out is not None:  # on the kernel's stream, after it
            self.strided_out.bind(self.stream)[:] = self.C
        on_device = self.out is not None and is_device(self.out)
        returned = self.out if on_device else self.model if self.out is None else None  # None: a host result
        if self.stream and (self.other_streams or _package(returned) not in ("cupy", "torch")):
            self.stream.synchronize()
        if on_device:
            return self.out
        if isinstance(self.out, np.ndarray):
            if self.out.flags.c_contiguous and self.out.dtype.isnative:
                self.C.copy_to_host(self.out)
            else:
                self.out[...] = self.C.copy_to_host()
            return self.out
        if self.model is None:
            return self.C.copy_to_host()
        return _like(self.C, self.model)


def _package(array) -> str:
    """The top-level package of `array`'s type ("numba", "cupy", "torch"); "" for None."""
    return "" if array is None else type(array).__module__.partition(".")[0]


def _like(result, model):
    """`result`, a Numba device array, as the kind of device array `model` is (no copy)."""
    package = _package(model)
    if package == "cupy":
        import cupy

        return cupy.asarray(result)
    if package == "torch":
        import torch

        return torch.as_tensor(result, device=model.device)
    return result


def _on_device(runtime: Runtime, array):
    """A device array the kernel can take: a Numba array as is, an exporter wrapped (no copy)."""
    if hasattr(array, "copy_to_host"):  # checked first: the interface property builds a dict
        return array
    return runtime.wrap(array)


def _matrix(runtime: Runtime, array, name: str):
    """`array` as a NumPy or device array, with its name in any error; a host one must not be a
    subclass whose kind np.matmul keeps (a memmap's product is a plain ndarray there too), a device
    one must be in native byte order, the only one Numba compiles kernels for."""
    if not is_device(array):
        if name == "out" and not isinstance(array, np.ndarray):
            raise TypeError(f"out must be a NumPy array or a device array, not {type(array).__name__}")
        if isinstance(array, np.ma.MaskedArray):
            remedy = ("pass out.data to write the product into its data, every entry, the mask left as it is"
                      if name == "out" else f"pass {name}.filled(0) to multiply with masked entries as zeros, "
                                            f"or {name}.data to ignore the mask")
            raise TypeError(f"{name} is a masked array, whose mask tuner.matmul would ignore; {remedy}")
        if isinstance(array, np.ndarray) and type(array) is not np.ndarray and not isinstance(array, np.memmap):
            remedy = ("pass np.asarray(out), a view of its memory, to write the product there" if name == "out" else
                      f"pass np.asarray({name}) to multiply its values as a plain array")
            raise TypeError(f"{name} is a {type(array).__name__}, an ndarray subclass whose kind np.matmul keeps (a "
                            f"matrix, units) and tuner.matmul would drop; {remedy}")
        given = array
        try:
            array = np.asarray(array)
        except ValueError as error:  # nested lists of uneven lengths, above all
            raise ValueError(f"{name} cannot be read as a matrix of numbers ({error}); pass an array, or nested "
                             "lists whose rows (and matrices) are all as long") from None
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{name} must be a matrix of numbers, not {type(given).__name__}"
                            + (f" of {array.dtype}" if isinstance(given, np.ndarray) else ""))
    else:
        array = _on_device(runtime, array)
        dtype = np.dtype(array.dtype)
        if not dtype.isnative:
            raise TypeError(f"{name} is a device array of {dtype.str} ({dtype.newbyteorder('=').name} not in this "
                            "machine's byte order), which Numba compiles no kernel for; copy it to the device from a "
                            f"host array in native byte order, such as host.astype(np.{dtype.newbyteorder('=').name})")
    return array


def _precision(runtime: Runtime, dtype: str, precision: str | None) -> str:
    """The precision a product of `dtype` matrices runs in: their own, or the one asked for, which
    must take them; TypeError or ValueError saying what to pass."""
    if dtype not in runtime.backend.dtypes:
        raise TypeError(f"{dtype} matrices are not supported on {runtime.backend.name}; "
                        f"use one of {', '.join(runtime.backend.dtypes)}")
    if precision is None:
        return dtype
    taken = [name for name in runtime.backend.precisions() if PRECISIONS[name].input == dtype]
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a name, not {precision!r}; for {dtype} matrices choose one of: "
                        f"{', '.join(taken)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one tuner knows; for {dtype} matrices choose one of: "
                         f"{', '.join(taken)}")
    if precision not in runtime.backend.precisions():
        raise TypeError(f"precision={precision!r} is not available on {runtime.backend.name}"
                        f"{' (it runs on NVIDIA tensor cores)' if PRECISIONS[precision].tensor_cores else ''}; "
                        f"for {dtype} matrices choose one of: {', '.join(taken)}")
    if PRECISIONS[precision].input != dtype:
        raise TypeError(f"precision={precision!r} multiplies {PRECISIONS[precision].input} matrices, not {dtype}; "
                        f"cast A and B (A.astype(np.{PRECISIONS[precision].input})), or choose one of: "
                        f"{', '.join(taken)}")
    lacks = runtime.lacks(PRECISIONS[precision])
    if lacks:
        raise TypeError(lacks)
    return precision


def prepare(runtime: Runtime, A, B, out, alpha, beta, precision: str | None = None) -> Call:
    """Check the operands of C = alpha*A@B + beta*C and place them on the device (A and B not where
    C is empty: nothing runs); the product runs in `precision` (a name in dtypes.PRECISIONS) if
    given, else in the matrices' own.

    TypeError or ValueError for operands NumPy would refuse or the kernels do not take, ValueError
    for a product too slow for this device (the simulator), and MemoryError when the device has no
    room for them; each before anything is copied, and never a launch on bad operands. Where an
    allocation fails though the free memory sufficed, the driver's error is raised (memory_named).
    """
    alpha, beta = _real("alpha", alpha), _real("beta", beta)
    model = next((array for array in (out, A, B) if array is not None and is_device(array)), None)
    A, B = _matrix(runtime, A, "A"), _matrix(runtime, B, "B")
    native = [np.dtype(array.dtype).newbyteorder("=") for array in (A, B)]
    family = family_for(len(A.shape), len(B.shape))
    sizes, c_shape = family.sizes(tuple(A.shape), tuple(B.shape))
    for dtype in native:  # a complex matrix is refused as such: a cast to a real dtype would drop a part
        if dtype.kind == "c":
            _precision(runtime, dtype.name, None)
    if native[0] != native[1]:
        # The wider of the dtypes tuner multiplies, as np.matmul promotes two floats
        multiplied = [dtype for dtype in native if dtype.name in runtime.backend.dtypes]
        target = max(multiplied, key=lambda dtype: dtype.itemsize).name if multiplied else runtime.backend.dtypes[0]
        cast = "B" if native[0].name == target else "A"
        raise TypeError(f"A is {native[0]} and B is {native[1]}; tuner.matmul does not mix dtypes: "
                        f"cast one, e.g. {cast} as np.asarray({cast}, dtype=np.{target})")
    dtype = _precision(runtime, _NAMES.get(native[0]) or native[0].name, precision)
    accumulate = np.dtype(PRECISIONS[dtype].accumulate).type
    wider = "" if accumulate is np.float64 else ", or use float64 matrices"
    alpha, beta = scalar("alpha", alpha, accumulate, wider), scalar("beta", beta, accumulate, wider)
    output = np.dtype(PRECISIONS[dtype].output)
    C = None if out is None else _check_out(runtime, out, c_shape, output)
    if out is None and beta != 0:
        raise ValueError(f"beta={beta} scales C, so pass C as out= (or leave beta at 0)")
    # With k = 0 the kernel still runs, making C beta * C; with an empty C none runs, so A and B stay where they are.
    problem = None if 0 in c_shape else family.problem(**{**sizes, "k": max(sizes["k"], 1)}, dtype=dtype)
    given = (A, B) if problem is not None else ()
    device_out = C if C is not None and is_device(C) else None
    strided_out = device_out if device_out is not None and not compiled_layout(device_out) else None
    # Copied: a host operand, and a device one that the kernel cannot take as it is or that may share memory
    # with out (the kernel would read what it overwrites; NumPy gives the right product there, so must we). A
    # strided out's stand-in is new memory, and out is written after the kernel, so it shares nothing.
    shared = sharing(device_out, *given) if device_out is not None and strided_out is None else [False] * len(given)
    copies = [not is_device(array) or shares or not compiled_layout(array) for array, shares in zip(given, shared)]
    allocated = [array for array, copied in zip(given, copies) if copied]
    if C is not None and (device_out is None or strided_out is not None):
        allocated.append(C)  # a host out's copy, or a device out's contiguous stand-in
    needed = sum(array.nbytes for array in allocated) + (math.prod(c_shape) * output.itemsize if C is None else 0)
    free = min(runtime.module.current_context().get_memory_info().free, runtime.device.memory_bytes) \
        if needed else 0  # asked only when something is allocated: a driver call per product
    if needed > free:
        raise MemoryError(f"this product needs {needed / 2**30:.2f} GiB on the device, which has "
                          f"{free / 2**30:.2f} GiB free; split it into smaller products")
    too_slow = runtime.too_slow(problem) if problem is not None else ""
    if too_slow:
        raise ValueError(f"tuner.matmul: {too_slow}; run it on a GPU, or with smaller matrices")
    stream, waited = _stream(runtime, device_out, A, B)
    if given:
        A, B = (_to_device(runtime, array, stream) if copied else array for array, copied in zip(given, copies))
    from_host = any(not is_device(array) for array in given)
    if strided_out is not None:
        C = _contiguous(runtime, strided_out, stream, copy=beta != 0)
    elif device_out is not None:
        C = device_out
    elif C is not None and beta != 0:
        C, from_host = runtime.module.to_device(np.ascontiguousarray(C, dtype=output)), True
    else:
        C = runtime.module.device_array(c_shape, dtype=output)
    if stream and from_host:  # those copies went on the default stream, which a non-blocking stream does not wait for
        runtime.module.synchronize()
    return Call(A, B, C, family, problem, out, model, alpha, beta, stream, strided_out, waited)


# The handles of the legacy and the per-thread default streams, which wait for the default stream's work.
_DEFAULT_STREAMS = (1, 2)


def _stream(runtime: Runtime, *operands) -> tuple:
    """The stream the kernel runs on, the first operand's (0 where none has one), and whether other
    streams' work was waited for. Nothing orders the kernel after the pending work on another
    operand's stream (a Numba array bound to a stream of its own: Numba synchronises only an
    exporter's, when wrapping it), so that work is finished first. An exporter's stream may be
    non-blocking, not waiting for the default stream either, so the default stream's pending work
    is finished first where a device operand is on it (a Numba array bound to none)."""
    streams = {_which(array.stream): array.stream for array in operands if getattr(array, "stream", 0)}
    stream, *others = streams.values() or [0]
    for other in others:
        other.synchronize()
    beside_default = getattr(stream, "external", False) and _which(stream) not in _DEFAULT_STREAMS and any(
        array is not None and is_device(array) and not getattr(array, "stream", 0) for array in operands)
    if beside_default:
        runtime.module.synchronize()
    return stream, bool(others) or beside_default


def _which(stream) -> int:
    """Which stream `stream` is: its handle (two wraps of one exporter's stream are one stream), or,
    for the simulator's, which have none, the object's identity."""
    return int(stream) if hasattr(stream, "__int__") else id(stream)


@contextlib.contextmanager
def memory_named():
    """Within it, the driver's out-of-memory (raised by numba-cuda, and by numba-hip in HIP Python's
    CUDA names; for an allocation, once its retry after freeing the arrays pending deallocation has
    failed too) is a MemoryError saying what to do; any other error goes on as raised. Besides an
    allocation, a launch can fail so once the operands fill the device: the driver loads a kernel
    at its first launch (lazy loading) and reserves its local memory."""
    try:
        yield
    except Exception as error:
        if getattr(getattr(error, "code", None), "name", None) != "CUDA_ERROR_OUT_OF_MEMORY":
            raise
        raise MemoryError("the device ran out of memory for this product (placing its operands and result, or "
                          "launching its kernels); free device memory (arrays of this program or of other "
                          "processes), or split it into smaller products") from None


def scalar(name: str, value, accumulate: type, wider: str = ""):
    """`value`, the product's alpha or beta (its `name`), in the `accumulate` type the kernel computes
    in: TypeError unless it is a real number as NumPy takes one, ValueError if it overflows that
    type (the message ends with `wider`, another remedy)."""
    value = _real(name, value)
    if not _representable(value, accumulate):
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:20] + "..."
        raise ValueError(f"{name}={shown} overflows {accumulate.__name__}, the precision this product is "
                         f"computed in; scale A or B instead{wider}")
    return accumulate(value)


def _real(name: str, scalar):
    """`scalar` if it is a real number as NumPy takes one (a Python or NumPy number or bool, or a
    0-d array of one), as a scalar; TypeError otherwise."""
    if type(scalar) in (float, int):  # the common case, without the abstract base class's check
        return scalar
    if isinstance(scalar, (np.ndarray, np.generic)) and scalar.ndim == 0 and scalar.dtype.kind in "biuf":
        return scalar[()]
    if not isinstance(scalar, numbers.Real):
        what = f"a {scalar.ndim}-D {scalar.dtype} array" if isinstance(scalar, np.ndarray) else type(scalar).__name__
        raise TypeError(f"{name} must be a real number, not {what}")
    return scalar


def stack_of_one(matrix):
    """A 2-D device array that the kernel takes as it is (prepare copies any other) as a stack of
    one matrix, (1, m, n), viewing the same memory."""
    return matrix.reshape(1, *matrix.shape)


def _representable(scalar, accumulate) -> bool:
    """Whether a real `scalar` stays what it is in the `accumulate` type: NaN and infinities do,
    finite values must not overflow to infinity."""
    try:
        value = float(scalar)
    except OverflowError:  # an integer beyond every float
        return False
    if math.isinf(value) and scalar != value:  # a wider float (np.longdouble) beyond every float64
        return False
    if not math.isfinite(value) or abs(value) <= _largest(accumulate):  # the common case, without NumPy's cast
        return True
    with np.errstate(over="ignore"):  # beyond the largest, a value may still round down to it
        return bool(np.isfinite(accumulate(value)))


@functools.cache
def _largest(accumulate) -> float:
    """The largest finite value of the float type `accumulate`."""
    return float(np.finfo(accumulate).max)


def _check_out(runtime: Runtime, out, shape: tuple[int, ...], dtype: np.dtype):
    """`out` as an array of the product's shape and dtype that can be written: on the device, each
    entry in memory of its own (NumPy writes a broadcast host out's entries in turn, the last one
    staying; the device's threads would race)."""
    matrix = _matrix(runtime, out, "out")
    if tuple(matrix.shape) != shape:
        raise ValueError(f"out has shape {tuple(matrix.shape)}, but A @ B is {'x'.join(map(str, shape))}")
    if np.dtype(matrix.dtype).newbyteorder("=") != dtype:
        raise TypeError(f"out is {np.dtype(matrix.dtype).newbyteorder('=')}, but this product is {dtype}")
    interface = getattr(out, "__cuda_array_interface__", None)
    if (isinstance(out, np.ndarray) and not out.flags.writeable) or (interface and interface["data"][1]):
        raise ValueError("out is read-only; pass a writable array, or leave out out to get a new one")
    if 0 in matrix.strides and is_device(matrix) and any(
            stride == 0 and size > 1 for size, stride in zip(matrix.shape, matrix.strides)):
        raise ValueError("out is a broadcast device array (a stride of 0), whose entries share memory that the "
                         "product's parallel writes would race for; pass one with memory of its own for each entry")
    return matrix


def compiled_layout(array) -> bool:
    """Whether Numba types `array` (a Numba device array, a CUDA Array Interface exporter or a
    NumPy array) as layout "C", the one every tuned kernel is compiled, verified and timed for:
    a Numba device array C-contiguous and not broadcast (no stride of 0), as its `_numba_type_`
    says, asked of its flags (numba.typeof would build a Numba type at each ask); an exporter or
    NumPy array whose interface gives no strides, as it does for a C-contiguous one (numba-cuda
    types an exporter whose interface gives strides as layout "A", even a C-contiguous array's). For
    another layout (a transposed, strided or broadcast view) Numba would compile another kernel,
    never verified nor timed. An empty array is never read (the simulator types some as layout "A")."""
    if 0 in tuple(array.shape):
        return True
    if hasattr(array, "is_c_contiguous"):
        return array.is_c_contiguous() and 0 not in tuple(array.strides)
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return interface.get("strides") is None


def _to_device(runtime: Runtime, array, stream):
    """A contiguous copy of an operand on the device: of a host one, in native byte order; of a
    device one, made on the device on `stream`, the kernel's (_contiguous)."""
    if not is_device(array):
        return runtime.module.to_device(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("=")))
    return _contiguous(runtime, array, stream)


def _contiguous(runtime: Runtime, array, stream, copy: bool = True):
    """A C-contiguous device array of the device `array`'s shape and dtype, bound to `stream`,
    holding `array`'s values where `copy`: copied by Numba's assignment kernel on that stream, so
    that the kernel launched there after it reads them, without a trip through the host."""
    contiguous = runtime.module.device_array(tuple(array.shape), dtype=array.dtype, stream=stream)
    if copy:
        contiguous[:] = array
    return contiguous


def sharing(out, *arrays) -> list[bool]:
    """Whether each of the device `arrays` may share memory with the device array `out`: whether
    the byte ranges they span overlap (a bound: strided views that interleave count as
    overlapping), out's worked out once. The simulator's device arrays live in host memory and
    export NumPy's array interface instead of CUDA's."""
    if 0 in out.shape:
        return [False] * len(arrays)
    low, high = _span(out)
    return [0 not in array.shape and (span := _span(array))[0] < high and low < span[1] for array in arrays]


def _span(array) -> tuple[int, int]:
    """The byte addresses [first, last) a device array of at least one element touches."""
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    start, itemsize = interface["data"][0], np.dtype(interface["typestr"]).itemsize
    shape, strides = interface["shape"], interface.get("strides")
    if not strides:  # C-contiguous: one run of bytes
        return start, start + math.prod(shape) * itemsize
    low = start + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = start + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + itemsize
    return low, high
