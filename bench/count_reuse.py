"""What a counting compile worker (tuner/compile_ahead.py, mode "count") spends per configuration
before and after its count took the PTX from the IR of the kernel Numba compiled, on this machine
without a GPU.

    python bench/count_reuse.py OUT.json [NAME=VALUE ...]...

Each argument is one configuration of the float32 space, as `tuner resources` takes it (a
space-separated list in one argument; none: the default and two others). Numba's kernel is built
as Dispatcher.compile builds it for an H100 (the device is faked: typing, lowering and NVVM for
compute_90a, without the link on the GPU). Then the count runs twice each way, alternately:
afresh (compile_ptx: typed, lowered and NVVM'd again) and from the kernel's IR (NVVM again only).
The load average is recorded before and after, since other jobs slow the figures down.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from provenance import provenance

from tuner import resources
from tuner.backends import CUDA
from tuner.config import parse_assignments
from tuner.kernel import load
from tuner.space import Space

CONFIGS = ["", "block_m=32 block_n=32 thread_m=2 thread_n=2", "block_m=128 block_n=64 thread_m=8 thread_n=4"]


def _kernel(space, config):
    """Numba's compiled kernel of `config` as on an H100, and the seconds it took."""
    from numba.cuda.core import sigutils
    from numba.cuda.dispatcher import _Kernel

    function = load(space, config).function
    argtypes, _ = sigutils.normalize_signature(space.family.signature(space.precision))
    start = time.perf_counter()
    compiled = _Kernel(function.py_func, argtypes, **function.targetoptions)
    return compiled, time.perf_counter() - start


def _run(space, config) -> dict:
    compiled, kernel_seconds = _kernel(space, config)
    counts = {"afresh": [], "from_ir": []}
    for way in ("afresh", "from_ir") * 2:
        compiled.library._ptx_cache.pop(resources.ARCH, None)  # NVVM runs again each time
        start = time.perf_counter()
        counted = resources.count(space, config, compiled=compiled if way == "from_ir" else None)
        seconds = time.perf_counter() - start
        counts[way].append({"seconds": round(seconds, 2), "ptx_seconds": round(counted.ptx_seconds, 2),
                            "fma_fraction": counted.fma_fraction, "registers": counted.registers})
    before, after = (kernel_seconds + statistics.fmean(c["seconds"] for c in counts[way]) for way in counts)
    return {"config": config.describe(), "numba_kernel_seconds": round(kernel_seconds, 2), "counts": counts,
            "worker_seconds_before": round(before, 2), "worker_seconds_after": round(after, 2),
            "after_over_before": round(after / before, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("configs", nargs="*", default=CONFIGS)
    args = parser.parse_args()
    from numba.cuda.cudadrv import devices

    device = SimpleNamespace(compute_capability=resources.ARCH)  # an H100's
    devices._runtime.get_or_create_context = lambda devnum=None: SimpleNamespace(device=device)
    space = Space.of(CUDA, "float32")
    configs = [parse_assignments(text.split()) for text in args.configs]
    resources.count(space, configs[0])  # Numba's first-use costs, out of the figures
    load_before = os.getloadavg()
    runs = [_run(space, config) for config in configs]
    result = {**provenance(" ".join([Path(sys.executable).name] + sys.argv),
                           "no GPU: Numba's kernel built as for an H100, without its link"),
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "runs": runs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        print(f"{run['config']}: {run['worker_seconds_before']:.1f} s -> {run['worker_seconds_after']:.1f} s "
              f"({run['after_over_before']:.2f})")


if __name__ == "__main__":
    main()
