"""Where a CPU-side measurement came from: the command, the date, the host and the versions."""
import os
import platform
import time
from importlib.metadata import version


def provenance(command: str, device: str) -> dict:
    """The header every bench/results JSON of a CPU-side measurement starts with."""
    return {
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": device,
        "host": {"machine": platform.machine(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": {name: version(name) for name in ("numba", "numba-cuda", "llvmlite")},
    }
