"""The matrix product being tuned: C (m x n) = A (m x k) @ B (k x n) in one precision."""
from dataclasses import dataclass

from .dtypes import PRECISIONS


@dataclass(frozen=True)
class Problem:
    """A GEMM shape and dtype; its `key` names cache records and studies."""

    m: int
    n: int
    k: int
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in PRECISIONS:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of: {', '.join(PRECISIONS)}")
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")

    @property
    def flops(self) -> int:
        """Floating-point operations of one product: a multiply and an add per term."""
        return 2 * self.m * self.n * self.k

    @property
    def operand_bytes(self) -> int:
        """Device memory for A, B and C, with a second C for verifying into."""
        precision = PRECISIONS[self.dtype]
        return (self.m + self.n) * self.k * precision.input_bytes + 2 * self.m * self.n * precision.output_bytes

    @property
    def reference_bytes(self) -> int:
        """Host memory for verifying: float64 copies of A and B and their float64 product."""
        return 8 * ((self.m + self.n) * self.k + self.m * self.n)

    @property
    def key(self) -> str:
        return f"{self.dtype}-{self.m}x{self.n}x{self.k}"
