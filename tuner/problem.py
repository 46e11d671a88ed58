"""The product being tuned: C (m x n) = A (m x k) @ B (k x n) in one precision.

What generic code asks of a problem, whatever its kernel family: its `key` (which names cache
records and studies), its work and memory, its operands' shapes, the distance to another shape
of its family, and its fields as a record stores them.
"""
import functools
import math
from dataclasses import asdict, dataclass, fields

from .dtypes import PRECISIONS


def _positive(problem, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(problem, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class Problem:
    """A GEMM shape and dtype."""

    m: int
    n: int
    k: int
    dtype: str = "float32"

    family = "matmul"  # the kernel family that computes it

    def __post_init__(self):
        if self.dtype not in PRECISIONS:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of: {', '.join(PRECISIONS)}")
        _positive(self, self.dimensions())

    @classmethod
    @functools.cache  # asked at each Problem's construction, one a tuner.matmul call
    def dimensions(cls) -> tuple[str, ...]:
        """The names of its sizes, as a record stores them."""
        return tuple(field.name for field in fields(cls) if field.name != "dtype")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in self.dimensions())

    @property
    def products(self) -> int:
        """Independent matrix products it computes."""
        return 1

    @property
    def multiply_adds(self) -> int:
        return self.products * self.m * self.n * self.k

    @property
    def flops(self) -> int:
        """Floating-point operations: a multiply and an add per term."""
        return 2 * self.multiply_adds

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The shapes of A, B and C."""
        return (self.m, self.k), (self.k, self.n), (self.m, self.n)

    @property
    def operand_bytes(self) -> int:
        """Device memory for A, B and C, with a second C for verifying into."""
        precision = PRECISIONS[self.dtype]
        (a, b, c) = (math.prod(shape) for shape in self.shapes)
        return (a + b) * precision.input_bytes + 2 * c * precision.output_bytes

    @property
    def reference_bytes(self) -> int:
        """Host memory for verifying: float64 copies of A and B, their float64 product, each
        element's scale (measure.Operands) and a result's difference from the product (measure.verify)."""
        return 8 * (sum(math.prod(shape) for shape in self.shapes) + 2 * math.prod(self.shapes[2]))

    @property
    def shape_text(self) -> str:
        """Its sizes as the command line's messages write them: 64x64x64."""
        return "x".join(map(str, self.sizes))

    @property
    def options(self) -> str:
        """Its sizes as `tuner search` takes them."""
        return f"--shape {self.m} {self.n} {self.k}"

    @property
    def key(self) -> str:
        return f"{self.dtype}-{self.shape_text}"

    def distance(self, other: "Problem") -> float:
        """How far apart two shapes of one family are: the summed log-ratios of their sizes."""
        return sum(abs(math.log2(a / b)) for a, b in zip(self.sizes, other.sizes))

    def as_dict(self) -> dict:
        return asdict(self)
