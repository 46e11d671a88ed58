"""The precisions a kernel can be generated for: what it reads, accumulates in and writes."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """Numba type names of a kernel's inputs, accumulators and output, and their sizes."""

    name: str
    input: str
    accumulate: str
    output: str

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
}
