"""The batched family: a stack of independent products, C[i] = alpha * A[i] @ B[i] + beta * C[i],
in one launch with the batch on the grid's z axis, as np.matmul takes stacks: (b, m, k) @ (b, k, n),
or one 2-D operand broadcast against a stack of the other."""
import argparse
import dataclasses

from ..arrays import stack_of_one
from ..config import Tiling
from ..family import Family
from ..problem import Problem

# Blocks along the grid's z axis, which runs over the batch: CUDA's bound, within HIP's. A larger batch
# (or taller matrices than the grid's rows hold) runs as several launches.
GRID_LAYERS = 65535


@dataclasses.dataclass(frozen=True)
class BatchedProblem(Problem):
    """`batch` independent GEMMs of one shape and dtype."""

    batch: int = 1

    family = "batched"

    @classmethod
    def dimensions(cls) -> tuple[str, ...]:
        return ("batch", "m", "n", "k")

    @property
    def products(self) -> int:
        return self.batch

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return (self.batch, self.m, self.k), (self.batch, self.k, self.n), (self.batch, self.m, self.n)

    @property
    def options(self) -> str:
        return f"--batch {self.batch} --shape {self.m} {self.n} {self.k}"


def _batch(text: str) -> int:
    """--batch's value: a positive integer, or argparse's one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of products, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class Batched(Family):
    """Stacks of products, the batch on the grid's z axis; a batch of 1 in one operand broadcasts."""

    name = "batched"
    problem = BatchedProblem
    template = "batched_matmul.py.j2"
    record_prefix = "batched-"
    operands = "3-D stacks of them (as np.matmul takes them: one may be a 2-D matrix, broadcast)"
    operand_dims = 3

    def accepts(self, a_dims: int, b_dims: int) -> bool:
        return (a_dims, b_dims) in ((3, 3), (2, 3), (3, 2))

    def sizes(self, a_shape: tuple, b_shape: tuple) -> tuple[dict, tuple[int, ...]]:
        (a_batch, m, k), (b_batch, k_b, n) = ((1, *shape) if len(shape) == 2 else shape for shape in (a_shape, b_shape))
        if k != k_b:
            a, b = (f"{name} is" if len(shape) == 2 else f"{name}'s matrices are" for name, shape in
                    (("A", a_shape), ("B", b_shape)))
            raise ValueError(f"{a} {m}x{k} and {b} {k_b}x{n}: A's columns ({k}) must equal B's rows ({k_b})")
        if a_batch != b_batch and 1 not in (a_batch, b_batch):
            raise ValueError(f"A is a stack of {a_batch} matrices and B of {b_batch}: the stacks must be as long, or "
                             "one of them a single matrix, which is broadcast")
        batch = a_batch if b_batch == 1 else b_batch  # NumPy's rule: a stack of one broadcasts, even to none
        return {"batch": batch, "m": m, "n": n, "k": k}, (batch, m, n)

    def kernel_operands(self, A, B):
        """A and B as stacks: a 2-D operand becomes a stack of one, which the kernel broadcasts."""
        return tuple(stack_of_one(operand) if len(operand.shape) == 2 else operand for operand in (A, B))

    def verifications(self, config: Tiling, dtype: str) -> tuple[tuple[BatchedProblem, str], ...]:
        """The matmul family's two problems (Family.verifications), each as a stack of three products
        with one operand a single matrix, broadcast: A in the first, B in the second."""
        return tuple((dataclasses.replace(problem, batch=3), shared)
                     for (problem, _), shared in zip(super().verifications(config, dtype), "AB"))

    def parts(self, A, B, C, config: Tiling, grid_rows: int) -> list[tuple]:
        """One launch per GRID_LAYERS products of the stack; where the rows outgrow a grid's
        `grid_rows` row tiles, one per band of rows of each product, a band of one product being
        C-contiguous, as the kernel is compiled and verified for (a band across products is not,
        and Numba would compile another kernel for it). An operand of one matrix is shared."""
        batch, m = tuple(C.shape)[:2]
        rows = config.block_m * grid_rows
        if batch <= GRID_LAYERS and m <= rows:
            return [(A, B, C)]

        def layers(operand, first, count):
            return operand if tuple(operand.shape)[0] == 1 else operand[first:first + count]

        if m <= rows:
            return [(layers(A, first, GRID_LAYERS), layers(B, first, GRID_LAYERS), C[first:first + GRID_LAYERS])
                    for first in range(0, batch, GRID_LAYERS)]
        return [(layers(A, index, 1)[:, top:top + rows], layers(B, index, 1), C[index:index + 1, top:top + rows])
                for index in range(batch) for top in range(0, m, rows)]

    def grid(self, config: Tiling, c_shape: tuple) -> tuple[int, ...]:
        """(column tiles, row tiles, products)."""
        batch, m, n = tuple(c_shape)
        return (-(-n // config.block_n), -(-m // config.block_m), batch)

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch", type=_batch, metavar="B",
                            help="tune a stack of B products of --shape, in one launch (the batched family)")

    def chosen(self, args) -> bool:
        return getattr(args, "batch", None) is not None

    def problem_of(self, shape: tuple[int, int, int], args, dtype: str) -> BatchedProblem:
        return BatchedProblem(*shape, dtype, batch=args.batch)


FAMILY = Batched()
