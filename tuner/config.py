"""The tunable parameters of one generated matmul kernel, and their stable identity."""
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Config:
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

    def __post_init__(self):
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type is bool and not isinstance(value, bool):
                raise TypeError(f"{field.name} must be True or False, not {value!r}")
            if field.type is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{field.name} must be an integer, not {value!r}")

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

    def describe(self) -> str:
        """NAME=VALUE pairs, as the command line takes them."""
        return " ".join(f"{name}={format_value(value)}" for name, value in self.as_dict().items())

    @classmethod
    def names(cls) -> list[str]:
        return [field.name for field in fields(cls)]


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


def parse_assignments(assignments: list[str], base: Config | None = None) -> Config:
    """Build a Config from NAME=VALUE strings, starting from `base` (the default config).

    Raises ValueError with a one-line message naming the valid names or values.
    """
    values = (base or Config()).as_dict()
    kinds = {field.name: field.type for field in fields(Config)}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {assignment!r}")
        if name not in kinds:
            raise ValueError(f"unknown parameter {name!r}; valid names: {', '.join(kinds)}")
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
    return Config(**values)
