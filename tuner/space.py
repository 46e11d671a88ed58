"""The search space as data: each parameter's domain and the rules a valid configuration obeys.

A configuration that breaks a hard rule (a backend limit, a template precondition) cannot run; one
that a heuristic prunes (too slow to compile, or bound to lose) can, but the search skips it. Both
are said here, with the reason, before anything compiles.
"""
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import ClassVar

from .backends import Backend
from .config import VECTOR, Config, Tiling, format_value
from .dtypes import PRECISIONS, Precision
from .family import Family, get_family

DOMAINS = {
    "block_m": (16, 32, 64, 128),
    "block_n": (16, 32, 64, 128),
    "block_k": (8, 16, 32),
    "thread_m": (1, 2, 4, 8),
    "thread_n": (1, 2, 4, 8),
    "unroll_k": (1, 2, 4, 8, 16, 32),
    "pad": (0, 1, 4),
    "transpose_a": (False, True),
    "prefetch": (False, True),
    "max_registers": (0, 64, 128),
    "vector_fragments": (False, True),
    "min_blocks": (0, 1, 2),
    "double_buffer": (False, True),
}

# The seed's fast_matmul (TPB=16): 16x16 threads, one output each, 16-wide k-tiles, no extras.
SEED = Config(
    block_m=16, block_n=16, block_k=16, thread_m=1, thread_n=1, unroll_k=1, pad=0,
    transpose_a=False, prefetch=False, max_registers=0, vector_fragments=False, min_blocks=0,
    double_buffer=False,
)

# Per dtype, the configuration with the highest static ceiling that compiles without spills, among
# bench/ceilings.py's candidates (docs/kernels.md): a search measures it among the first.
_VECTOR_8X8 = Config(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8, unroll_k=16, pad=4,
                     transpose_a=True, prefetch=True, vector_fragments=True)
FLAGSHIPS = {"float32": _VECTOR_8X8, "float64": replace(_VECTOR_8X8, min_blocks=1)}

# Registers a kernel needs besides its tiles: indices, pointers, bounds and loop counters.
REGISTER_OVERHEAD = 24

# Multiply-adds one trip of the k loop may emit. Numba's front end compiles long straight-line
# code slowly: an 8x8 tile took 6 s at 64 per trip and 20 s at 1024, for no fewer registers
# (bench/results/unroll_compile_time.json). GPU timings may justify raising it.
MAX_UNROLLED_MULTIPLY_ADDS = 64

# Multiply-adds a fully unrolled k-tile may emit, for vector fragments, where removing the k loop
# is what lifts the FMA share of the issued instructions (docs/kernels.md has the compile times).
MAX_FULLY_UNROLLED_MULTIPLY_ADDS = 1024

# Accumulators per thread from which launch bounds and double buffering can pay: such a tile takes
# 128 registers or more, so an SM holds at most two blocks of 256 threads, too few to hide a
# barrier, and ptxas's own register choice is where the 8x8 tile spilled
# (bench/results/ceilings_float32.json).
LARGE_TILE = 32

# Elements of each tile one thread may copy per k-tile. Every copy is a guarded load, and with
# prefetch also a live register: 32-thread blocks copying 64 took over 30 s to compile and spilled.
MAX_LOADS_PER_THREAD = 16


class InvalidConfig(ValueError):
    """A configuration that breaks a rule of the space; the message says which."""


def words(nbytes: int) -> int:
    """32-bit registers one value of `nbytes` takes."""
    return max(1, nbytes // 4)


@dataclass(frozen=True)
class Space:
    """The valid kernel configurations of one family for one backend and one precision, on the
    CUDA cores (Space.of gives the tensor-core space, warp_space.py, for a precision that asks for it)."""

    backend: Backend
    precision: Precision
    family: Family
    config_type: ClassVar[type[Tiling]] = Config

    @classmethod
    def of(cls, backend: Backend, dtype: str, family: str = "matmul") -> "Space":
        """The space of `dtype` (a precision's name) on `backend`; InvalidConfig saying which it takes."""
        precisions = backend.precisions()
        if dtype not in precisions:
            why = ("is not a precision tuner knows" if dtype not in PRECISIONS else
                   f"runs on NVIDIA's tensor cores (mma.sync), which {backend.name} has no access to"
                   if PRECISIONS[dtype].tensor_cores else f"is not supported on {backend.name}")
            raise InvalidConfig(f"dtype {dtype!r} {why}; choose one of: {', '.join(precisions)}")
        precision = PRECISIONS[dtype]
        if precision.tensor_cores:
            from .warp_space import WarpSpace
            return WarpSpace(backend, precision, get_family(family))
        return Space(backend, precision, get_family(family))

    def domains(self) -> dict[str, tuple]:
        """Each parameter's possible values on this backend."""
        return {**DOMAINS, **{name: (value,) for name, value in self.backend.fixed.items()}}

    def shared_memory(self, config: Config) -> int:
        """Bytes of shared memory the A and B tiles take, padding and second buffers included."""
        (a_rows, a_cols), (b_rows, b_cols) = config.a_tile_shape, config.b_tile_shape
        buffers = 2 if config.double_buffer else 1
        return buffers * (a_rows * a_cols + b_rows * b_cols) * self.precision.input_bytes

    def registers(self, config: Config) -> int:
        """An estimate of the 32-bit registers per thread: accumulators, fragments, staging.

        A lower bound for the rules; the compiler's own count comes from the resource report.
        """
        accumulate = words(self.precision.accumulate_bytes)
        tile = config.thread_m * config.thread_n * accumulate
        fragments = (config.thread_m + config.thread_n) * accumulate
        staged = sum(config.loads_per_thread) * words(self.precision.input_bytes)
        return tile + fragments + (staged if config.prefetch else 0) + REGISTER_OVERHEAD

    def multiply_adds(self, config: Config) -> int:
        """Multiply-add instructions per k-tile per thread."""
        return config.thread_m * config.thread_n * config.block_k

    def violations(self, config: Config) -> list[str]:
        """Every reason the search skips `config`, as one-line reasons: the rules it breaks, then the
        heuristics that prune it; empty when it is in the space."""
        broken, pruned = self.reasons(config)
        return broken + pruned

    def reasons(self, config: Config) -> tuple[list[str], list[str]]:
        """The hard rules `config` breaks, and the heuristics that prune it (asked only of a
        configuration that breaks none, which they may not be able to describe)."""
        broken = self.broken_rules(config)
        return broken, [] if broken else self.pruned_by(config)

    def broken_rules(self, config: Config) -> list[str]:
        """The hard rules `config` breaks: the backend's limits and features, and what the template
        assumes. A configuration that breaks none can be rendered, compiled and launched."""
        limits = self.backend.limits
        if config.max_registers and not self.backend.max_registers:
            return [f"max_registers is not available on {self.backend.name}: its compiler takes no register cap"]
        if config.min_blocks and not self.backend.launch_bounds:
            return [f"min_blocks is not available on {self.backend.name}: its compiler takes no launch bounds"]
        if config.vector_fragments and not self.backend.shared_alignment:
            return [f"vector_fragments is not available on {self.backend.name}: its shared arrays take no "
                    "alignment, which vector loads need"]
        reasons = self._outside_domains(config)
        if reasons:
            return reasons
        sizes = (config.block_m, config.block_n, config.block_k, config.thread_m, config.thread_n)
        if any(size & (size - 1) for size in sizes):
            # The template's tile copies use constant offsets, which needs power-of-two sizes.
            return ["block and thread tile sizes must be powers of two"]
        if config.block_m % config.thread_m or config.block_n % config.thread_n:
            return ["thread_m must divide block_m and thread_n must divide block_n"]
        threads = config.threads
        if threads % limits.warp_size:
            reasons.append(f"{threads} threads per block is not a multiple of the "
                           f"{limits.warp_size}-wide warp of {self.backend.name}")
        if config.block_k % config.unroll_k:
            reasons.append(f"unroll_k={config.unroll_k} does not divide block_k={config.block_k}")
        registers = self.registers(config)
        reasons += self._over_limits(config, registers, "the register tile")
        if config.max_registers:
            if config.max_registers < registers:
                reasons.append(f"max_registers={config.max_registers} is below the about "
                               f"{registers} registers the register tile needs")
            if config.max_registers * threads > limits.registers_per_block:
                reasons.append(f"max_registers={config.max_registers} x {threads} threads exceeds "
                               f"the {limits.registers_per_block} registers of a block")
        return reasons + self._vector_violations(config) + self._launch_bounds_violations(config, registers)

    def _outside_domains(self, config: Tiling) -> list[str]:
        """The parameters whose value is not in its domain."""
        return [f"{name}={format_value(getattr(config, name))} is not one of {', '.join(map(format_value, domain))}"
                for name, domain in self.domains().items() if getattr(config, name) not in domain]

    def _over_limits(self, config: Tiling, registers: int, holder: str) -> list[str]:
        """The block's threads, shared memory and `registers` per thread (those `holder` needs, in
        words) against the backend's limits, and whether the tiles split evenly over the threads."""
        limits, threads = self.backend.limits, config.threads
        reasons = []
        if threads > limits.max_threads_per_block:
            reasons.append(f"{threads} threads per block exceeds the limit of {limits.max_threads_per_block}")
        if (config.block_m * config.block_k) % threads or (config.block_k * config.block_n) % threads:
            reasons.append(f"the A and B tiles do not split evenly over {threads} threads")
        shared = self.shared_memory(config)
        if shared > limits.shared_memory_per_block:
            reasons.append(f"{shared} bytes of shared memory exceeds the limit of {limits.shared_memory_per_block}")
        if registers > limits.registers_per_thread:
            reasons.append(f"{holder} needs about {registers} registers per thread, "
                           f"over the limit of {limits.registers_per_thread}")
        elif registers * threads > limits.registers_per_block:
            reasons.append(f"{threads} threads x about {registers} registers exceed the "
                           f"{limits.registers_per_block} registers of a block")
        return reasons

    def pruned_by(self, config: Config) -> list[str]:
        """The heuristics that keep `config` out of the search although it would run: what costs
        too long to compile, or was measured or reasoned to lose (each says why)."""
        reasons = []
        if not config.vector_fragments and config.pad == VECTOR:
            reasons.append(f"pad={config.pad} is for vector fragments; use pad 0 or 1")
        if config.threads and max(config.loads_per_thread) > MAX_LOADS_PER_THREAD:
            reasons.append(f"each of {config.threads} threads would copy {max(config.loads_per_thread)} "
                           f"elements of a tile per k-tile, over {MAX_LOADS_PER_THREAD}")
        reasons += [f"{name} is for register tiles of {LARGE_TILE} or more accumulators, not "
                    f"{config.thread_m}x{config.thread_n}: smaller ones leave an SM blocks enough to hide barriers"
                    for name in ("min_blocks", "double_buffer") if getattr(config, name)
                    and config.thread_m * config.thread_n < LARGE_TILE]
        if max(config.thread_m, config.thread_n) > 2 * min(config.thread_m, config.thread_n):
            reasons.append(f"the {config.thread_m}x{config.thread_n} register tile is elongated beyond 2:1: "
                           "it loads more operands per multiply-add than a squarer one")
        unrolled = config.thread_m * config.thread_n * config.unroll_k
        if config.unroll_k == config.block_k and config.vector_fragments:
            if unrolled > MAX_FULLY_UNROLLED_MULTIPLY_ADDS:
                reasons.append(f"unroll_k={config.unroll_k} unrolls the k-tile into {unrolled} multiply-adds, "
                               f"over {MAX_FULLY_UNROLLED_MULTIPLY_ADDS}; compiling them takes too long")
        elif unrolled > MAX_UNROLLED_MULTIPLY_ADDS:
            reasons.append(f"unroll_k={config.unroll_k} emits {unrolled} multiply-adds per k-loop trip, "
                           f"over {MAX_UNROLLED_MULTIPLY_ADDS}; compiling them takes too long")
        return reasons

    @staticmethod
    def _vector_violations(config: Config) -> list[str]:
        """What vector fragments (and pad=4, which is theirs) need of the tile layout."""
        if not config.vector_fragments:
            return []
        reasons = []
        if not config.transpose_a:
            reasons.append("vector_fragments needs transpose_a=true: a thread's rows are contiguous only in "
                           "a k-major A tile")
        if config.thread_m % VECTOR or config.thread_n % VECTOR:
            reasons.append(f"vector_fragments needs thread_m and thread_n to be multiples of {VECTOR}")
        if config.pad % VECTOR:
            reasons.append(f"pad={config.pad} misaligns the vector loads of each tile row; use pad 0 or {VECTOR}")
        return reasons

    def _launch_bounds_violations(self, config: Config, registers: int) -> list[str]:
        """What a promise of min_blocks in the launch bounds needs."""
        if not config.min_blocks:
            return []
        if config.max_registers:
            return ["min_blocks needs launch bounds, which max_registers turns off"]
        # Two blocks of at most 1024 threads fit an SM's 2048; its registers (as many as a block may
        # use) are what a promise of min_blocks can break.
        limits = self.backend.limits
        if config.min_blocks * config.threads * registers > limits.registers_per_block:
            return [f"min_blocks={config.min_blocks} x {config.threads} threads x about {registers} registers "
                    f"exceed the {limits.registers_per_block} registers of an SM"]
        return []

    def check(self, config: Config, rules_only: bool = False) -> Config:
        """`config` if it is in the space (or, with `rules_only`, breaks no hard rule, so that it can
        be rendered and run); otherwise InvalidConfig naming the first reason."""
        reasons = self.broken_rules(config) if rules_only else self.violations(config)
        if reasons:
            raise InvalidConfig(reasons[0])
        return config

    def default(self) -> Tiling:
        """The configuration run where none is tuned: the configuration class's defaults, within
        every backend's limits (Config: 64x64 block tiles of 4x4 per thread, 256 threads, 8.5 KB of
        float32 shared memory; WarpConfig: 64x64 block tiles of four 32x32 warp tiles, 128 threads)."""
        return self.check(self.config_type())

    def starts(self, simulated: bool = False) -> tuple[Tiling, ...]:
        """Configurations a search measures first, after those of earlier records: the default, the
        seed's kernel, and on a GPU the dtype's flagship where this backend can run it (the
        simulator, one Python thread per GPU thread, takes minutes over its 256 threads)."""
        flagship = None if simulated else FLAGSHIPS.get(self.precision.name)
        return (self.default(), SEED) + ((flagship,) if flagship and not self.violations(flagship) else ())

    def candidates(self) -> Iterator[Tiling]:
        """Every configuration the domains make (combinations() of them), valid or not, in a stable order."""
        domains = self.domains()
        for values in itertools.product(*domains.values()):
            yield self.config_type(**dict(zip(domains, values)))

    def combinations(self) -> int:
        """How many configurations the domains make, valid or not."""
        return math.prod(map(len, self.domains().values()))

    def __iter__(self):
        """Every valid configuration, in a stable order."""
        return (config for config in self.candidates() if not self.violations(config))

    def size(self, follow=None) -> int:
        """The number of valid configurations, each checked: over a minute for a CUDA-core space on two
        cores. `follow(candidates, total)` wraps the candidates (a progress bar)."""
        candidates = self.candidates() if follow is None else follow(self.candidates(), self.combinations())
        return sum(1 for config in candidates if not self.violations(config))
