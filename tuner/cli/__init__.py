"""The `tuner` command line: kernel commands here, cache and search commands in cli/commands.py."""
import argparse
import json
import sys
import warnings
from importlib import metadata

from .. import DISTRIBUTION
from ..backends import BACKENDS, get_backend
from ..config import Config, format_value, parse_assignments
from ..space import SEED, Space
from . import commands


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake in one line instead of a usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _space(args) -> Space:
    return Space.of(get_backend(args.backend), args.dtype)


def _config(args, space: Space) -> Config:
    base = SEED if args.seed_kernel else Config()
    return space.check(parse_assignments(args.assignments, base))


def _render(args) -> None:
    from ..source import render

    space = _space(args)
    sys.stdout.write(render(space, _config(args, space)))


def _describe_space(args) -> None:
    space = _space(args)
    print(f"backend={space.backend.name} dtype={space.precision.name} limits={space.backend.limits}")
    for name, domain in space.domains().items():
        print(f"  {name}: {', '.join(map(format_value, domain))}")
    print(f"valid configurations: {space.size()}")
    print(f"seed kernel (fast_matmul, TPB=16): {SEED.describe()}")


def _resources(args) -> None:
    from ..resources import report

    space = _space(args)
    config = _config(args, space)
    resources = report(space, config)
    if args.json:
        print(json.dumps({"config": config.as_dict(), **resources.as_dict()}))
        return
    fma = (f"fma_fraction={resources.fma_fraction:.3f}" if resources.fma_fraction is not None
           else f"fma_fraction=none ({resources.fma_fraction_missing})")
    print(f"registers={resources.registers} stack={resources.stack_bytes}B "
          f"spill stores={resources.spill_store_bytes}B spill loads={resources.spill_load_bytes}B "
          f"shared={resources.shared_bytes}B compile_ptx={resources.ptx_seconds:.2f}s "
          f"compile={resources.compile_seconds:.2f}s {fma}{'  SPILLS' if resources.spills else ''}")


def _add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", required=True, choices=tuple(BACKENDS))
    parser.add_argument("--dtype", default="float32", help="float32 (default), float64 or float16 (cuda only)")
    parser.add_argument("--seed-kernel", action="store_true", help="start from the seed kernel's configuration")
    parser.add_argument("assignments", nargs="*", metavar="NAME=VALUE",
                        help=f"parameters to change from the default: {', '.join(Config.names())}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tuner", description="Code-generation autotuner for tiled matmul in Numba.")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {metadata.version(DISTRIBUTION)} ({DISTRIBUTION})")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    render = subparsers.add_parser("render", help="print the generated source of one configuration")
    _add_kernel_arguments(render)
    render.set_defaults(run=_render)

    space = subparsers.add_parser("space", help="show the parameter domains and the size of the valid space")
    space.add_argument("--backend", required=True, choices=tuple(BACKENDS))
    space.add_argument("--dtype", default="float32")
    space.set_defaults(run=_describe_space)

    resources = subparsers.add_parser(
        "resources", help="compile one configuration to PTX for sm_90 and print ptxas's resource report")
    _add_kernel_arguments(resources)
    resources.add_argument("--json", action="store_true", help="print one JSON object")
    resources.set_defaults(run=_resources)
    commands.add_parsers(subparsers)
    return parser


def is_user_error(error: Exception) -> bool:
    """Whether `error` is a mistake or a missing piece the user can fix, shown as one line."""
    from ..resources import ReportUnavailable
    from ..runtime import RuntimeUnavailable

    return isinstance(error, (ValueError, OSError, ImportError, RuntimeUnavailable, ReportUnavailable))


def explain(error: Exception) -> str:
    """The one line for a user error, with what to do where the error does not say it."""
    if isinstance(error, ImportError):
        return f"{error} (install tuner with its backend's extra: pip install -e '.[cuda]', or '.[roc]')"
    if isinstance(error, OSError):
        return f"{error} (check --cache-dir, TUNER_CACHE_DIR, TUNER_KERNEL_DIR and disk space)"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """tuner's warnings (which start with "tuner: ") as the line they say; others as Python shows them."""
    if str(message).startswith("tuner: "):
        return f"{message}\n"
    return _python_warning(message, category, filename, lineno, line)


_python_warning = warnings.formatwarning


def main(argv=None) -> int:
    from ..stopping import Terminated
    from ..storage import redacted

    args = build_parser().parse_args(argv)
    warnings.formatwarning = _one_line_warning
    try:
        return args.run(args) or 0
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, Terminated)
        print(f"tuner {args.command}: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as error:
        if not is_user_error(error):
            raise
        print(f"tuner {args.command}: error: {redacted(explain(error), getattr(args, 'storage', None) or '')}",
              file=sys.stderr)
        return 2
