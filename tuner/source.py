"""Render a validated configuration into the Numba source text of its kernel."""
from functools import cache
from importlib.resources import files

import jinja2
from jinja2 import meta

from .config import VECTOR, Config, Tiling, WarpConfig
from .space import Space

SHARED_ALIGNMENT = 16  # bytes: what a 16-byte vector load from shared memory needs


@cache
def _environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(lambda name: files("tuner.templates").joinpath(name).read_text())
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def template_closure(name: str) -> set[str]:
    """The template `name` with every template it extends, includes or imports, at any depth (a
    name computed as it renders cannot be followed: the templates use none)."""
    found, ahead = set(), [name]
    while ahead:
        current = ahead.pop()
        if current not in found:
            found.add(current)
            ahead += _references(current)
    return found


@cache
def _references(name: str) -> tuple[str, ...]:
    """The templates the installed template `name` extends, includes or imports by name, parsed once
    per process: the fingerprint of each device described asks again."""
    environment = _environment()
    source, _, _ = environment.loader.get_source(environment, name)
    return tuple(named for named in meta.find_referenced_templates(environment.parse(source)) if named)


def _tile_loads(threads: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """Constant (row, column) offsets of each load a thread makes to fill a rows x cols tile.

    Load l of thread t copies element t + l * threads in row-major order. When threads divides
    rows * cols and one of threads and cols divides the other (as powers of two do), that is
    (t // cols + dr, t % cols + dc) for constants (dr, dc).
    """
    assert (rows * cols) % threads == 0 and (threads % cols == 0 or cols % threads == 0)
    return [divmod(load * threads, cols) for load in range(rows * cols // threads)]


def jit_options(space: Space, config: Tiling, simulated: bool = False) -> str:
    """The keyword arguments of the kernel's jit decorator. A tensor-core kernel is linked with
    the mma wrappers by link-time optimisation, which inlines them (the simulator takes no `lto`),
    and is not cached on disk: Numba cannot pickle a kernel with linked code."""
    if not space.precision.tensor_cores:
        options = ["cache=True"]
    else:
        options = [] if simulated else ["lto=True"]
    launch_bounds = launch_bounds_of(space, config)
    if launch_bounds:
        options.append(f"launch_bounds={launch_bounds}")
    if config.max_registers:
        options.append(f"max_registers={config.max_registers}")
    return ", ".join(options)


def launch_bounds_of(space: Space, config: Tiling) -> int | tuple[int, int] | None:
    """Threads per block to promise the compiler, with the blocks per SM where min_blocks asks
    for them, where the backend takes launch bounds.

    Not with max_registers: ptxas silently drops a register cap when launch bounds are present.
    """
    if space.backend.launch_bounds and not config.max_registers:
        return (config.threads, config.min_blocks) if config.min_blocks else config.threads
    return None


def _thread_tiles(config: Config, simulated: bool) -> dict:
    """What the template needs of threads that multiply register tiles on the CUDA cores.
    `simulated` drops the shared arrays' alignment, which Numba's simulator refuses."""
    return dict(mma="", threads_m=config.threads_m, threads_n=config.threads_n, fragment_rows=config.fragment_rows,
                fragment_cols=config.fragment_cols, vector=VECTOR,
                alignment=f", alignment={SHARED_ALIGNMENT}" if config.vector_fragments and not simulated else "")


def _warp_tiles(space: Space, config: WarpConfig) -> dict:
    """What the template needs of warps that multiply mma.sync fragments: the shape, the warp's
    m16n8 tiles, and each fragment element's place relative to the thread's first one (its place
    for lane 0, since the PTX ISA's layouts move with groupID and threadID_in_group alike)."""
    from . import mma  # imports Numba's CUDA module: only once a tensor-core kernel is rendered

    shape = space.shape
    return dict(mma=shape.name, mma_k=shape.k, packed=shape.packed, alignment="", warps_n=config.warps_n,
                tiles_m=config.warp_m // shape.m, tiles_n=config.warp_n // shape.n,
                a_offsets=mma.a_layout(shape, 0), b_offsets=mma.b_layout(shape, 0), c_offsets=mma.c_layout(shape, 0))


def render(space: Space, config: Tiling, simulated: bool = False) -> str:
    """The kernel source for `config`, which must break no hard rule of `space` (checked here);
    a configuration the search's heuristics prune still renders. `simulated` renders for Numba's
    simulator: what it refuses (alignment of shared arrays, lto) is left out, and only that."""
    space.check(config, rules_only=True)
    precision = space.precision
    context = dict(
        config.as_dict(),
        template=space.family.template,
        params=list(config.shown(space.backend).items()),
        backend=space.backend.name,
        module=space.backend.module,
        dtype=precision.name,
        input=precision.input,
        accumulate=precision.accumulate,
        types=sorted({precision.input, precision.accumulate, "uint64"}),
        jit_options=jit_options(space, config, simulated),
        threads=config.threads,
        buffers="2, " if config.double_buffer else "",
        read="s, " if config.double_buffer else "",
        write="t, " if config.double_buffer else "",
        a_shape=config.a_tile_shape,
        a_loads=_tile_loads(config.threads, config.block_m, config.block_k),
        b_loads=_tile_loads(config.threads, config.block_k, config.block_n),
        **(_warp_tiles(space, config) if precision.tensor_cores else _thread_tiles(config, simulated)),
    )
    return _environment().get_template(space.family.template).render(context)
