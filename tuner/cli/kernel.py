"""`tuner render`, `space` and `resources`: one configuration's source, the space's domains, and
ptxas's static resource figures of one configuration."""
import argparse
import json
import sys

from ..backends import get_backend
from ..config import Config, Tiling, WarpConfig, format_value, parse_assignments
from ..family import DEFAULT, families
from ..space import SEED, InvalidConfig, Space
from .arguments import DTYPE_HELP, add_backend


def _space(args) -> Space:
    return Space.of(get_backend(args.backend), args.dtype, getattr(args, "family", DEFAULT))


def _config(args, space: Space) -> Tiling:
    """The configuration the arguments name, if it breaks no hard rule; one the search's
    heuristics prune is taken, with a note on stderr saying why the search skips it."""
    base = SEED if args.seed_kernel else space.config_type()
    if not isinstance(base, space.config_type):
        raise InvalidConfig(f"the seed kernel multiplies on the CUDA cores, not in {space.precision.name}; "
                            "leave out --seed-kernel, or choose float32, float64 or float16")
    config = space.check(parse_assignments(args.assignments, base), rules_only=True)
    for reason in space.pruned_by(config):
        print(f"tuner: note: the search prunes this configuration: {reason}", file=sys.stderr)
    return config


def _render(args) -> None:
    from ..source import render

    space = _space(args)
    sys.stdout.write(render(space, _config(args, space)))


def _describe_space(args) -> None:
    """The domains at once, then the size of the valid space, which checks every configuration the
    domains make (over a minute for a CUDA-core space: a progress bar where stderr is a terminal)."""
    from tqdm import tqdm

    space = _space(args)
    print(f"backend={space.backend.name} dtype={space.precision.name} limits={space.backend.limits}")
    for name, domain in space.domains().items():
        print(f"  {name}: {', '.join(map(format_value, domain))}")
    sys.stdout.flush()

    def follow(candidates, total):
        return tqdm(candidates, total=total, desc="checking configurations", unit=" configurations", file=sys.stderr,
                    leave=False, dynamic_ncols=True, disable=not sys.stderr.isatty())

    print(f"valid configurations: {space.size(follow)}")
    if isinstance(SEED, space.config_type):
        print(f"seed kernel (fast_matmul, TPB=16): {SEED.describe(space.backend)}")


def _resources(args) -> None:
    from ..resources import count

    space = _space(args)
    config = _config(args, space)
    resources = count(space, config)
    if args.json:
        print(json.dumps({"config": config.as_dict(), **resources.as_dict()}))
        return
    unit = "HMMA" if space.precision.tensor_cores else "FMA"
    fma = (f"{unit} per k-tile={resources.k_tile_multiply_adds:g} fma_fraction={resources.fma_fraction:.3f}"
           if resources.fma_fraction is not None else f"fma_fraction=none ({resources.fma_fraction_missing})")
    print(f"registers={resources.registers} stack={resources.stack_bytes}B "
          f"spill stores={resources.spill_store_bytes}B spill loads={resources.spill_load_bytes}B "
          f"shared={resources.shared_bytes}B {'compile_link' if space.precision.tensor_cores else 'compile_ptx'}="
          f"{resources.ptx_seconds:.2f}s "
          f"compile={resources.compile_seconds:.2f}s {fma}{'  SPILLS' if resources.spills else ''}")


def _add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend(parser)
    parser.add_argument("--dtype", default="float32", help=DTYPE_HELP)
    parser.add_argument("--family", choices=tuple(families()), default=DEFAULT,
                        help=f"the kernel family (default {DEFAULT})")
    parser.add_argument("--seed-kernel", action="store_true", help="start from the seed kernel's configuration")
    parser.add_argument("assignments", nargs="*", metavar="NAME=VALUE",
                        help=f"parameters to change from the default: {', '.join(Config.names())}; for "
                             f"tf32 and float16-tc: {', '.join(WarpConfig.names())}")


def add_parsers(subparsers) -> None:
    render = subparsers.add_parser("render", help="print the generated source of one configuration")
    _add_kernel_arguments(render)
    render.set_defaults(run=_render)

    space = subparsers.add_parser("space", help="show the parameter domains and the size of the valid space")
    add_backend(space)
    space.add_argument("--dtype", default="float32", help=DTYPE_HELP)
    space.set_defaults(run=_describe_space)

    resources = subparsers.add_parser(
        "resources", help="compile one configuration to PTX for sm_90 and print ptxas's resource report")
    _add_kernel_arguments(resources)
    resources.add_argument("--json", action="store_true", help="print one JSON object")
    resources.set_defaults(run=_resources)
