"""The precisions a kernel can be generated for: what it reads, accumulates in and writes, and
whether its multiply-adds run on the tensor cores."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """Numba type names of a kernel's inputs, accumulators and output, and their sizes. A
    precision with `tensor_cores` (an mma shape of tuner/mma.py) multiplies on the tensor cores;
    the others on the CUDA cores (or their AMD counterparts)."""

    name: str
    input: str
    accumulate: str
    output: str
    tensor_cores: str = ""

    @property
    def units(self) -> str:
        """The arithmetic the multiply-adds run on, as the device's peak table names it."""
        return f"{self.tensor_cores}-tensor" if self.tensor_cores else self.accumulate

    @property
    def input_bytes(self) -> int:
        return _BYTES[self.input]

    @property
    def accumulate_bytes(self) -> int:
        return _BYTES[self.accumulate]

    @property
    def output_bytes(self) -> int:
        return _BYTES[self.output]


_BYTES = {"float16": 2, "float32": 4, "float64": 8}

PRECISIONS = {
    "float32": Precision("float32", input="float32", accumulate="float32", output="float32"),
    "float64": Precision("float64", input="float64", accumulate="float64", output="float64"),
    # Half-precision inputs, single-precision accumulation and result (like cuBLAS's gemmEx).
    "float16": Precision("float16", input="float16", accumulate="float32", output="float32"),
    # Opt-in tensor-core precisions (NVIDIA only): float32 in and out with TF32 multiplies (10-bit
    # mantissas, as cuBLAS with TF32 allowed), and float16 in with float32 accumulation and result.
    "tf32": Precision("tf32", input="float32", accumulate="float32", output="float32", tensor_cores="tf32"),
    "float16-tc": Precision("float16-tc", input="float16", accumulate="float32", output="float32",
                            tensor_cores="float16"),
}
