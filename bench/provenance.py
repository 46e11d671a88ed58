"""Where a CPU-side measurement came from: the command, the date, the host, the commit and the versions."""
import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the project's measurements depend on: the kernels' toolchain, the searches' libraries.
PACKAGES = ("numba", "numba-cuda", "llvmlite", "numpy", "jinja2", "optuna", "kernel_tuner")


def commit() -> str:
    """The checked-out commit, marked where the code measured (tuner/ or bench/) differs from it;
    "unknown" outside a git checkout, or without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "tuner", "bench"], cwd=ROOT,
                               capture_output=True).returncode == 0
    except OSError:
        return "unknown"
    if head.returncode:
        return "unknown"
    return head.stdout.strip() + ("" if clean else " (tuner/ or bench/ modified)")


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance(command: str, device: str) -> dict:
    """The header every bench/results JSON of a CPU-side measurement starts with; a package that is
    not installed is left out of its versions."""
    return {
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": device,
        "host": {"machine": platform.machine(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "commit": commit(),
        "versions": {name: found for name in PACKAGES if (found := _version(name))},
    }
