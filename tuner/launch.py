"""The command line of a Python process of tuner's own (a compile worker, a `--devices` worker). It
imports the tuner package this process runs, never one in the current directory, which `python -m`
would search first: a `tuner/` (or an `nvidia/` holding a ptxas) planted there would run as tuner."""
import sys
from pathlib import Path

# Put the folder of this tuner package where `python -c` puts the current directory, then run the module as -m would.
_RUN = ("import runpy, sys; sys.path[0] = sys.argv.pop(1); "
        "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def python_module(module: str) -> list[str]:
    """`python -m module` (arguments follow), with this tuner package in place of the current directory."""
    return [sys.executable, "-c", _RUN, str(Path(__file__).resolve().parents[1]), module]
