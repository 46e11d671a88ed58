"""The tensor-core search space: warp tiles of mma.sync fragments, their domains and rules.

A block of warps computes a block_m x block_n tile of C; each warp a warp_m x warp_n tile of
m16n8 fragments (tuner/mma.py), stepping through the k-tile in the mma's k (8 for tf32, 16 for
float16-tc). The k-tile is staged in shared memory as for the CUDA-core kernels (same template,
same copies), so pad, transpose_a, prefetch and double_buffer mean what they mean there.
"""
from .config import WarpConfig
from .space import MAX_LOADS_PER_THREAD, Space

DOMAINS = {
    "block_m": (32, 64, 128, 256),
    "block_n": (32, 64, 128, 256),
    "block_k": (8, 16, 32, 64),
    "warp_m": (16, 32, 64, 128),
    "warp_n": (8, 16, 32, 64, 128),
    "pad": (0, 4, 8),
    "transpose_a": (False, True),
    "prefetch": (False, True),
    "double_buffer": (False, True),
}

# mma.sync calls one k-tile of one warp may unroll into (the template unrolls the whole k-tile):
# Numba's front end and NVVM compile long straight-line code slowly (docs/kernels.md).
MAX_UNROLLED_MMAS = 64

# Registers a warp-tile kernel needs besides its fragments and staging: indices, tile and fragment
# addresses, bounds. Set so that the estimate excludes the 1,024-thread kernel that spilled under
# its 64-register budget in the sample of bench/results/compile_space_cuda_tf32.jsonl.
WARP_REGISTER_OVERHEAD = 40

# Accumulators per thread beyond which ptxas spilled: with scalar fragment loads, warp tiles of 128
# accumulators (64x64, 128x32, 32x128) spilled in 2 of the 7 sampled and in 2 more tried (docs/kernels.md).
MAX_ACCUMULATORS = 64


class WarpSpace(Space):
    """The valid tensor-core configurations of one family for one backend and one precision."""

    config_type = WarpConfig

    @property
    def shape(self):
        """The mma.sync shape the kernels call (tuner/mma.py, which imports Numba's CUDA module: so
        a tensor-core space is for a process that has chosen between GPU and simulator)."""
        from .mma import SHAPES

        return SHAPES[self.precision.tensor_cores]

    def domains(self) -> dict[str, tuple]:
        return dict(DOMAINS)

    def multiply_adds(self, config: WarpConfig) -> int:
        """mma.sync calls (HMMA instructions) per k-tile per warp."""
        shape = self.shape
        return (config.block_k // shape.k) * (config.warp_m // shape.m) * (config.warp_n // shape.n)

    def accumulators(self, config: WarpConfig) -> int:
        """float32 accumulators per thread: its share of the warp tile."""
        shape = self.shape
        return (config.warp_m // shape.m) * (config.warp_n // shape.n) * shape.c_count

    def registers(self, config: WarpConfig) -> int:
        """An estimate of the 32-bit registers per thread: accumulators, the A and B fragments of one
        k-step (two float16 to a register), staging. A lower bound; ptxas's count comes from the resources."""
        shape, size = self.shape, self.precision.input_bytes
        fragments = (config.warp_m // shape.m * shape.a_count + config.warp_n // shape.n * shape.b_count) * size
        staged = sum(config.loads_per_thread) * max(size, 4)
        return (self.accumulators(config) + -(-fragments // 4) + (staged // 4 if config.prefetch else 0)
                + WARP_REGISTER_OVERHEAD)

    def broken_rules(self, config: WarpConfig) -> list[str]:
        """The hard rules `config` breaks: the mma's shape, how warps tile the block, and the backend's limits."""
        reasons = self._outside_domains(config)
        if reasons:
            return reasons
        shape = self.shape
        if config.block_k % shape.k:
            return [f"block_k={config.block_k} is not a multiple of the {shape.k}-deep k-step of "
                    f"{self.precision.name}'s m{shape.m}n{shape.n}k{shape.k} mma"]
        if config.block_m % config.warp_m or config.block_n % config.warp_n:
            return ["warp_m must divide block_m and warp_n must divide block_n"]
        return self._over_limits(config, self.registers(config), "the warp tile")

    def pruned_by(self, config: WarpConfig) -> list[str]:
        """What the search skips although it would run: too long to compile, or spilling."""
        reasons = []
        if self.accumulators(config) > MAX_ACCUMULATORS:
            reasons.append(f"the {config.warp_m}x{config.warp_n} warp tile takes {self.accumulators(config)} "
                           f"accumulators per thread, over {MAX_ACCUMULATORS}: such tiles spilled registers")
        if max(config.loads_per_thread) > MAX_LOADS_PER_THREAD:
            reasons.append(f"each of {config.threads} threads would copy {max(config.loads_per_thread)} "
                           f"elements of a tile per k-tile, over {MAX_LOADS_PER_THREAD}")
        mmas = self.multiply_adds(config)
        if mmas > MAX_UNROLLED_MMAS:
            reasons.append(f"the k-tile unrolls into {mmas} mma calls per warp, over {MAX_UNROLLED_MMAS}; "
                           "compiling them takes too long")
        return reasons

    def starts(self, simulated: bool = False) -> tuple[WarpConfig, ...]:
        """Configurations a search measures first, on a GPU or not (the seed kernel has no
        tensor-core form, and no tensor-core flagship is named)."""
        return (self.default(),)
