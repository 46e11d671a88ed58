"""The tunable parameters of one generated matmul kernel, and their stable identity: `Config` for
kernels whose threads multiply on the CUDA cores, `WarpConfig` for tensor-core kernels, whose
warps multiply through mma.sync."""
from dataclasses import asdict, dataclass, fields

from .dtypes import PRECISIONS

WARP = 32  # threads of an NVIDIA warp, which issue one mma.sync together


class Tiling:
    """What both kinds of configuration share: block tiles of C staged through shared memory in
    k-tiles, copied by every thread of the block. Subclasses are frozen dataclasses with the fields
    block_m, block_n, block_k, pad, transpose_a, prefetch and double_buffer, and say `threads`."""

    max_registers = 0  # no register cap unless a subclass tunes one
    min_blocks = 0  # launch bounds promise only the block size unless a subclass tunes more

    def __post_init__(self):
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type is bool and not isinstance(value, bool):
                raise TypeError(f"{field.name} must be True or False, not {value!r}")
            if field.type is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{field.name} must be an integer, not {value!r}")

    @property
    def threads(self) -> int:
        """Threads per block."""
        raise NotImplementedError

    @property
    def a_tile_shape(self) -> tuple[int, int]:
        """Shape of the A tile in shared memory, padding included."""
        if self.transpose_a:
            return (self.block_k, self.block_m + self.pad)
        return (self.block_m, self.block_k + self.pad)

    @property
    def b_tile_shape(self) -> tuple[int, int]:
        """Shape of the B tile in shared memory, padding included."""
        return (self.block_k, self.block_n + self.pad)

    @property
    def loads_per_thread(self) -> tuple[int, int]:
        """Elements of the A tile and of the B tile each thread copies per k-tile."""
        return (self.block_m * self.block_k // self.threads, self.block_k * self.block_n // self.threads)

    def as_dict(self) -> dict:
        return asdict(self)

    def shown(self, backend=None) -> dict:
        """The parameters as printed for `backend` (all of them for none): without those its compiler
        lacks where they hold the one value its kernels take (Backend.fixed)."""
        fixed = backend.fixed if backend else {}
        return {name: value for name, value in self.as_dict().items() if name not in fixed or value != fixed[name]}

    def describe(self, backend=None) -> str:
        """NAME=VALUE pairs, as the command line takes them, of the parameters shown for `backend`."""
        return " ".join(f"{name}={format_value(value)}" for name, value in self.shown(backend).items())

    @classmethod
    def names(cls) -> list[str]:
        return [field.name for field in fields(cls)]


@dataclass(frozen=True)
class Config(Tiling):
    """One point of the search space: everything the template needs besides backend and dtype.

    A block of (block_m / thread_m) x (block_n / thread_n) threads computes a block_m x block_n
    tile of C, stepping through K in tiles of block_k; each thread accumulates a
    thread_m x thread_n register tile whose rows and columns are strided by the thread grid
    (threads_m x threads_n), so neighbouring threads touch neighbouring elements.
    """

    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    thread_m: int = 4
    thread_n: int = 4
    unroll_k: int = 4  # copies of the k-step per loop trip; block_k means fully unrolled
    pad: int = 1  # extra elements per shared-memory row, against bank conflicts
    transpose_a: bool = False  # keep the A tile k-major (block_k x block_m) in shared memory
    prefetch: bool = True  # load the next k-tile into registers while computing this one
    max_registers: int = 0  # per-thread register cap passed to the compiler; 0 leaves it free
    # Each thread's fragments as groups of 4 contiguous rows and columns, read from shared memory as
    # vectors (ld.shared.v4 for float32); False strides them by the thread grid, as before it existed.
    vector_fragments: bool = False
    min_blocks: int = 0  # blocks per SM promised in the launch bounds; 0 promises only the block size
    double_buffer: bool = False  # two buffers of each shared tile: one barrier per k-tile instead of two

    @property
    def threads_m(self) -> int:
        """Threads along the rows of the block tile."""
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        """Threads along the columns of the block tile."""
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.threads_m * self.threads_n

    @property
    def fragment_rows(self) -> list[int]:
        """Offsets of this thread's rows from its first one, within the block tile."""
        return _fragment_offsets(self.thread_m, self.threads_m, self.vector_fragments)

    @property
    def fragment_cols(self) -> list[int]:
        """Offsets of this thread's columns from its first one, within the block tile."""
        return _fragment_offsets(self.thread_n, self.threads_n, self.vector_fragments)


@dataclass(frozen=True)
class WarpConfig(Tiling):
    """One point of the tensor-core space: each warp computes a warp_m x warp_n tile of the
    block_m x block_n block tile from mma.sync fragments (m16n8 each) read out of the shared tiles,
    so a block has (block_m / warp_m) x (block_n / warp_n) warps; the k-tile is block_k deep."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    warp_m: int = 32
    warp_n: int = 32
    pad: int = 4  # extra elements per shared-memory row, against bank conflicts of the fragment loads
    transpose_a: bool = False
    prefetch: bool = True
    double_buffer: bool = False

    @property
    def warps_m(self) -> int:
        """Warps along the rows of the block tile."""
        return self.block_m // self.warp_m

    @property
    def warps_n(self) -> int:
        """Warps along the columns of the block tile."""
        return self.block_n // self.warp_n

    @property
    def threads(self) -> int:
        """Threads per block: a warp per warp tile."""
        return WARP * self.warps_m * self.warps_n


def config_type(dtype: str) -> type[Tiling]:
    """The configuration class of the precision called `dtype`: WarpConfig where it runs on the
    tensor cores, else Config."""
    return WarpConfig if PRECISIONS[dtype].tensor_cores else Config


VECTOR = 4  # elements in one group of contiguous fragment rows or columns


def _fragment_offsets(count: int, threads: int, vector: bool) -> list[int]:
    """Strided by the thread grid; or in groups of VECTOR contiguous ones, the groups strided by
    VECTOR times the thread grid (the first one of thread t is then VECTOR * t)."""
    if not vector:
        return [i * threads for i in range(count)]
    return [i % VECTOR + i // VECTOR * VECTOR * threads for i in range(count)]


def format_value(value) -> str:
    """A parameter value as the command line writes it: true/false for booleans."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_assignments(assignments: list[str], base: Tiling | None = None) -> Tiling:
    """Build a configuration from NAME=VALUE strings, starting from `base` (by default Config()),
    of its class.

    Raises ValueError with a one-line message naming the valid names or values, or the name
    given twice.
    """
    base = base or Config()
    values = base.as_dict()
    kinds = {field.name: field.type for field in fields(base)}
    given = set()
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {assignment!r}")
        if name not in kinds:
            raise ValueError(f"unknown parameter {name!r}; valid names: {', '.join(kinds)}")
        if name in given:
            raise ValueError(f"{name} is given twice; give each parameter once")
        given.add(name)
        if kinds[name] is bool:
            truth = {"true": True, "1": True, "false": False, "0": False}
            if text.lower() not in truth:
                raise ValueError(f"{name} must be true or false, not {text!r}")
            values[name] = truth[text.lower()]
        else:
            try:
                values[name] = int(text)
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {text!r}") from None
    return type(base)(**values)
