"""Kernel families: what generic code needs to generate, launch, verify and record one kind of kernel.

A family bundles its problem type (key, work, shapes, distance), its kernel template, its launch
geometry, how `tuner.matmul` recognises its operands, its reference and tolerance, the options of
`tuner search` that ask for it, and where its records go. The tunable
parameters, their domains, rules and heuristics are the space's (space.py), which every family of
tiled products shares. A family registers itself by being a module of tuner/families that defines
FAMILY: adding a family adds a module and its template, and changes nothing here.
"""
import importlib
import pkgutil
import re
from functools import cache

import numpy as np

from .config import Tiling
from .dtypes import Precision
from .problem import Problem


DEFAULT = "matmul"  # the family of a product that asks for no other
# Bounds on ||C - reference|| / ||reference|| by accumulation precision, and on each element's
# error over its scale |A| @ |B| (measure.verify). Rounding in a k-term dot product grows like
# sqrt(k) * eps (float32 eps 1.2e-7, float64 2.2e-16); these leave two orders of magnitude for k
# up to 65536, while a missing or doubled tile errs by 1e-2 or more. An element's error over its
# scale is about eps whatever k, so one wrong tile or element fails where the whole would not.
TOLERANCE = {"float32": 1e-4, "float64": 1e-11}
# Bounds for tensor-core shapes whose inputs are rounded: TF32 keeps 10 mantissa bits, so the product
# of rounded inputs errs by up to about 3e-4 (bench/results/tensor_core_tolerance.json, K up to 8192);
# the bound leaves a factor of about 7, and a missing tile still errs by 1e-2 or more.
ROUNDED_INPUTS_TOLERANCE = {"tf32": 2e-3}


class Family:
    """The matmul family's behaviour, which other families refine: C = alpha * A @ B + beta * C
    on 2-D operands, one launch per product (several when its rows outgrow the grid)."""

    name = "matmul"
    problem = Problem  # its problem type
    template = "matmul.py.j2"  # the kernel template rendered
    # The CUDA C its tensor-core kernels link (the templates its kernels are rendered from are found
    # from `template`: source.template_closure).
    linked = ("mma.cu",)
    record_prefix = ""  # before the problem's key in its record files' names
    operands = "2-D matrices"  # what `tuner.matmul` takes, in words
    operand_dims = 2  # dimensions of A, B and C as the kernel takes them

    def accepts(self, a_dims: int, b_dims: int) -> bool:
        """Whether `tuner.matmul` operands of these dimensions are this family's."""
        return (a_dims, b_dims) == (2, 2)

    def sizes(self, a_shape: tuple, b_shape: tuple) -> tuple[dict, tuple[int, ...]]:
        """The problem's sizes (by name) and C's shape for operands of these shapes; ValueError if
        they do not multiply."""
        (m, k), (k_b, n) = a_shape, b_shape
        if k != k_b:
            raise ValueError(f"A is {m}x{k} and B is {k_b}x{n}: A's columns ({k}) must equal B's rows ({k_b})")
        return {"m": m, "n": n, "k": k}, (m, n)

    def kernel_operands(self, A, B):
        """A and B as the kernel takes them (the same arrays, for this family)."""
        return A, B

    def verifications(self, config: Tiling, dtype: str) -> tuple[tuple[Problem, str], ...]:
        """Two small problems to verify a configuration on before trusting it, each with edge tiles
        in every dimension and the operand of each that is one matrix, broadcast ("": none, in this
        family): the first with three k-tiles or more (a double-buffered kernel's first buffer then
        takes a second k-tile), the second with two. Their sizes differ, in opposite orders (m < n < k,
        then k < n < m), so that a bound of one dimension used for another's falls short in one of
        them: a row or column left unwritten, or read as zeros."""

        def sizes(order: str, k_tiles: int) -> dict[str, int]:
            """In `order`, each size the least above the size before it and above its block (above
            k_tiles - 1 k-tiles for k) that is no multiple of its block."""
            chosen, before = {}, 0
            for name in order:
                block = getattr(config, f"block_{name}")
                size = max(block * (k_tiles - 1 if name == "k" else 1), before) + 1
                chosen[name] = before = size + (size % block == 0)
            return chosen

        return tuple((self.problem(**sizes(order, k_tiles), dtype=dtype), "")
                     for order, k_tiles in (("mnk", 3), ("knm", 2)))

    def random_operands(self, problem: Problem, rng: np.random.Generator, dtype: str) -> tuple:
        """Host operands with entries uniform in [-1, 1]."""
        a_shape, b_shape, _ = problem.shapes
        return rng.uniform(-1, 1, a_shape).astype(dtype), rng.uniform(-1, 1, b_shape).astype(dtype)

    def reference(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """The float64 product a kernel's result is checked against."""
        return np.matmul(A.astype(np.float64), B.astype(np.float64))

    def tolerance(self, precision: Precision) -> float:
        """The largest relative error (Frobenius norm) a correct kernel of `precision` may make."""
        return max(TOLERANCE[precision.accumulate], ROUNDED_INPUTS_TOLERANCE.get(precision.tensor_cores, 0.0))

    def signature(self, precision: Precision) -> str:
        """The kernel's Numba signature for C-contiguous operands."""
        layout = ", ".join([":"] * (self.operand_dims - 1) + ["::1"])
        operand, output, scalar = (f"{precision.input}[{layout}]", f"{precision.output}[{layout}]",
                                   precision.accumulate)
        return f"void({operand}, {operand}, {output}, {scalar}, {scalar})"

    def parts(self, A, B, C, config: Tiling, grid_rows: int) -> list[tuple]:
        """The (A, B, C) of each launch: one, or one per band of rows that fits a grid's
        `grid_rows` row tiles."""
        rows, m = config.block_m * grid_rows, tuple(C.shape)[0]
        if m <= rows:
            return [(A, B, C)]
        return [(A[first:first + rows], B, C[first:first + rows]) for first in range(0, m, rows)]

    def grid(self, config: Tiling, c_shape: tuple) -> tuple[int, ...]:
        """Blocks per grid for a C of this shape: (column tiles, row tiles)."""
        *_, m, n = tuple(c_shape)
        return (-(-n // config.block_n), -(-m // config.block_m))

    def add_arguments(self, parser) -> None:
        """The options of `tuner search` that ask for this family's problems (none: it is the default)."""

    def chosen(self, args) -> bool:
        """Whether parsed `tuner search` arguments ask for this family's problems."""
        return False

    def problem_of(self, shape: tuple[int, int, int], args, dtype: str) -> Problem:
        """The problem that `tuner search` arguments describe, with `shape` its M, N and K."""
        return self.problem(*shape, dtype)


@cache
def families() -> dict[str, Family]:
    """Every registered family by name, the default first: the FAMILY of each module of tuner/families."""
    from . import families as package

    found = [importlib.import_module(f"{package.__name__}.{module.name}").FAMILY
             for module in pkgutil.iter_modules(package.__path__)]
    for attribute in ("name", "record_prefix"):  # each family its own records: a forgotten override is caught here
        values = [getattr(family, attribute) for family in found]
        assert len(set(values)) == len(values), f"two kernel families share a {attribute}: {values}"
    return {family.name: family for family in sorted(found, key=lambda family: (family.name != DEFAULT, family.name))}


def get_family(name: str) -> Family:
    """The family called `name`, or a ValueError that lists the known ones."""
    try:
        return families()[name]
    except KeyError:
        raise ValueError(f"unknown kernel family {name!r}; choose one of: {', '.join(families())}") from None


def keyed_problem(key) -> Problem | None:
    """The problem whose key (Problem.key: its dtype, then its sizes) is `key`, of the one family
    whose problems have that many sizes; None for anything else (a study's storage may hold anything)."""
    dtype, _, shape = key.rpartition("-") if isinstance(key, str) else ("", "", "")
    sizes = shape.split("x")
    if not all(re.fullmatch(r"[0-9]+", size) for size in sizes):
        return None
    found = [family.problem for family in families().values() if len(family.problem.dimensions()) == len(sizes)]
    if len(found) != 1:
        return None
    try:
        return found[0](**dict(zip(found[0].dimensions(), map(int, sizes))), dtype=dtype)
    except ValueError:  # an unknown dtype, or a size of 0
        return None


def family_for(a_dims: int, b_dims: int) -> Family:
    """The family whose operands have these dimensions; ValueError saying what tuner.matmul takes."""
    for family in families().values():
        if family.accepts(a_dims, b_dims):
            return family
    taken = " or ".join(family.operands for family in families().values())
    deepest = max(family.operand_dims for family in families().values())
    if 0 in (a_dims, b_dims):
        hint = "a scalar s is no operand: pass it as alpha=s"
    elif max(a_dims, b_dims) > deepest:
        hint = ("reshape a deeper stack S into one, as S.reshape(-1, *S.shape[-2:]) (np.broadcast_to first where "
                "A's and B's leading dimensions differ), and the result R back, as R.reshape(*S.shape[:-2], "
                "*R.shape[-2:])")
    else:
        hint = "reshape them (a vector v as v.reshape(1, -1) or v.reshape(-1, 1))"
    raise ValueError(f"tuner.matmul multiplies {taken}, but A is {a_dims}-D and B is {b_dims}-D; {hint}")


def chosen(args) -> Family:
    """The family that parsed `tuner search` arguments ask for: the matmul family unless another
    one's options are given."""
    return next((family for family in families().values() if family.chosen(args)), families()[DEFAULT])


def templates() -> tuple[str, ...]:
    """Every kernel template of every family, with those it extends, includes or imports, and the CUDA C
    they link: what the fingerprint hashes (never the report's page)."""
    from .source import template_closure  # here: tuner.source imports tuner.space, which imports this module

    return tuple(sorted({name for family in families().values()
                         for name in (*template_closure(family.template), *family.linked)}))
