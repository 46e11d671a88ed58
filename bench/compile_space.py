"""Compile every valid configuration of a CUDA space to PTX for sm_90 and record ptxas's report.

No GPU needed. Configurations that differ only in their max_registers cap share their PTX (the
cap is a ptxas option; capped kernels are compiled without launch bounds, uncapped ones with),
so each PTX is compiled once and assembled once per cap. A tensor-core configuration (--dtype
tf32 or float16-tc) is linked with the mma wrappers (tuner.resources.count), and its record says
how many HMMA one interior k-tile issues. The order is shuffled
with a fixed seed, so a run cut short is a uniform sample; rerunning resumes where it stopped.

    python bench/compile_space.py --dtype float32 --workers 2
    python bench/compile_space.py --dtype float32 --summary     # summarize what is recorded
    python bench/compile_space.py --dtype float32 --changed vector_fragments --changed min_blocks \
        --changed double_buffer --limit 60 --out bench/results/compile_space_cuda_float32_issue17.jsonl
                                          # a uniform sample of the configurations using issue 17's options

Output: JSON lines, a header with versions and the command, then one record per configuration.
"""
import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

from tuner.backends import get_backend
from tuner.config import Config, Tiling
from tuner.resources import CountUnavailable, assemble, compile_ptx, count, ptxas_path, parse_ptxas
from tuner.space import Space


def _header(args) -> dict:
    ptxas = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True).stdout
    return {
        "kind": "header",
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "backend": args.backend,
        "dtype": args.dtype,
        "arch": "sm_90",
        "host": {"machine": platform.machine(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": {name: version(name) for name in ("numba", "numba-cuda", "llvmlite", "jinja2")},
        "ptxas": ptxas.strip().splitlines()[-1],
        "device": "none: static compile on the CPU (compile_ptx + ptxas), no GPU involved",
    }


def _compile_group(backend: str, dtype: str, configs: list[dict]) -> list[dict]:
    """Compile the PTX `configs` share and assemble it for each of their max_registers caps."""
    space = Space.of(get_backend(backend), dtype)
    configs = [space.config_type(**values) for values in configs]
    if space.precision.tensor_cores:
        return [_linked(space, config) for config in configs]
    records = []
    try:
        ptx, seconds = compile_ptx(space, configs[0])
    except Exception as error:  # a compile failure is a result to record, whatever raised it
        return [{"config": c.as_dict(), "error": f"compile_ptx: {type(error).__name__}: {error}"[:500]}
                for c in configs]
    for config in configs:
        try:
            resources = parse_ptxas(assemble(ptx, max_registers=config.max_registers), seconds)
            records.append({"config": config.as_dict(), **resources.as_dict()})
        except CountUnavailable as error:
            records.append({"config": config.as_dict(), "error": str(error)[:500]})
    return records


def _linked(space: Space, config: Tiling) -> dict:
    """A tensor-core configuration compiled, linked and counted, or the error that stopped it."""
    try:
        return {"config": config.as_dict(), **count(space, config).as_dict()}
    except Exception as error:  # a compile failure is a result to record, whatever raised it
        return {"config": config.as_dict(), "error": f"{type(error).__name__}: {error}"[:500]}


def _ptx_key(config: Tiling) -> tuple[Tiling, bool]:
    """What decides a configuration's PTX: everything but the cap's value, and whether it has one."""
    if not isinstance(config, Config):
        return config, False
    return replace(config, max_registers=0), bool(config.max_registers)


def _groups(space: Space, seed: int, changed: list[str]) -> list[list[Config]]:
    """The configurations by PTX, in a seeded random order; only those where one of the `changed`
    parameters differs from its default, if any are named."""
    groups: dict[tuple, list[Config]] = {}
    default = space.config_type()
    for config in space:
        if changed and all(getattr(config, name) == getattr(default, name) for name in changed):
            continue
        groups.setdefault(_ptx_key(config), []).append(config)
    ordered = list(groups.values())
    random.Random(seed).shuffle(ordered)
    return ordered


def _read(path: Path) -> list[dict]:
    """The recorded lines; a last line cut short by a killed run is dropped (it is redone)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()
    return [json.loads(line) for line in lines if line.strip()]


def _wilson(hits: int, total: int) -> list[float]:
    """95% Wilson interval of a proportion: what the sample says about the whole space."""
    if not total:
        return [0.0, 1.0]
    z, p = 1.96, hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * (p * (1 - p) / total + z * z / (4 * total * total)) ** 0.5 / (1 + z * z / total)
    return [round(centre - half, 4), round(centre + half, 4)]


def summarize(path: Path, space: Space, space_size: int) -> dict:
    """Coverage of the `space_size` configurations sampled from, compile time per distinct PTX, and
    spills, over the records still valid in `space`."""
    lines = _read(path)
    records = [r for r in lines if r.get("kind") != "header" and not space.violations(space.config_type(**r["config"]))]
    done = [r for r in records if "error" not in r]
    times = sorted({_ptx_key(space.config_type(**r["config"])): r["ptx_seconds"] for r in done}.values())
    quantile = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 3) if times else None  # noqa: E731
    capped = [r for r in done if r["config"].get("max_registers")]
    uncapped = [r for r in done if not r["config"].get("max_registers")]
    spilling = sum(r["spills"] for r in done)
    return {
        "file": path.name,
        "headers": [r for r in lines if r.get("kind") == "header"][-1:],
        "valid_configurations": space_size,
        "recorded": len(records),
        "coverage": round(len(records) / space_size, 4),
        "failed": len(records) - len(done),
        "distinct_ptx_compiled": len(times),
        "ptx_seconds": {"median": quantile(0.5), "mean": round(statistics.fmean(times), 3) if times else None,
                        "p90": quantile(0.9), "max": quantile(1.0)},
        "spilling": spilling,
        "spilling_fraction_95ci": _wilson(spilling, len(done)),
        "spilling_uncapped": [sum(r["spills"] for r in uncapped), len(uncapped)],
        "spilling_capped": [sum(r["spills"] for r in capped), len(capped)],
        "registers_max": max((r["registers"] for r in done), default=None),
        "without_multiply_adds_in_k_loop": sum(not r.get("k_tile_multiply_adds") for r in done),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="stop after this many PTX compiles")
    parser.add_argument("--out", type=Path,
                        help="JSON-lines file (default bench/results/compile_space_<backend>_<dtype>.jsonl)")
    parser.add_argument("--summary", action="store_true", help="only summarize the recorded file")
    parser.add_argument("--changed", action="append", default=[], choices=Config.names(), metavar="NAME",
                        help="only configurations where this parameter (or another one named) is not its default")
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "results" / f"compile_space_{args.backend}_{args.dtype}.jsonl"
    space = Space.of(get_backend(args.backend), args.dtype)
    groups = _groups(space, args.seed, args.changed)
    space_size = sum(len(g) for g in groups)
    if not args.summary:
        done = {json.dumps(r["config"], sort_keys=True) for r in _read(out) if r.get("kind") != "header"}
        todo = [g for g in groups if json.dumps(g[0].as_dict(), sort_keys=True) not in done][: args.limit]
        out.parent.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
        print(f"{space_size} valid configurations in {len(groups)} distinct PTX; compiling {len(todo)}", flush=True)
        if out.exists() and not out.read_text().endswith("\n"):
            out.write_text("".join(line + "\n" for line in map(json.dumps, _read(out))))
        with out.open("a") as sink:
            sink.write(json.dumps(_header(args)) + "\n")
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
                futures = [pool.submit(_compile_group, args.backend, args.dtype, [c.as_dict() for c in g])
                           for g in todo]
                for count, future in enumerate(concurrent.futures.as_completed(futures), 1):
                    for record in future.result():
                        sink.write(json.dumps(record) + "\n")
                    sink.flush()
                    if count % 50 == 0:
                        print(f"{count}/{len(todo)} compiled", flush=True)
    summary = summarize(out, space, space_size)
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
