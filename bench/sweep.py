"""Measure the valid search space on the GPU, whole or an evenly spread part: the recorded truth
that search strategies are compared against offline.

    python bench/sweep.py OUTDIR [--dtype float32] [--shape 4096 4096 4096] [--budget SECONDS]
                          [--workers N] [--seed S] [--skip FILE ...]
    python bench/sweep.py TARGET.json.gz --export SWEEP.jsonl ...   # as a Kernel Tuner cache file

The valid configurations are taken in one seeded random order, so the part measured within the
budget is a uniform sample of the space, and a later run with --skip continues the same order.
Worker processes compile ahead, as `tuner search --compile-workers` does (tuner/compile_ahead.py:
the cubin goes into Numba's on-disk cache); the main process loads each kernel, verifies it
against the float64 reference as the search does (at the product's shape, and on small products
with edge tiles, alpha and beta: rows of sweeps before that check have no second verification),
and times it through the search's own measure.measure (device events, caches flushed before each
repetition), with the sweep's shorter protocol.

Writes OUTDIR/sweep-<backend>-<dtype>-<MxNxK>.jsonl: a header line (device and fingerprint,
versions, command, space size, order seed, protocol), then one line per configuration with its
status and reason, every repetition, the median, GFLOP/s, compile, load and verification
seconds, and registers, shared and local (spill) memory. Lines are flushed as they are measured,
and the run stops before the budget, so a run cut short still leaves a readable file.
"""
import argparse
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path

from tuner import DISTRIBUTION
from tuner.backends import get_backend
from tuner.compile_ahead import CompileAheadFailed, Compiled, CompilePool, default_workers
from tuner.config import Config
from tuner.devices import software
from tuner.kernel import kernel_dir
from tuner.measure import Operands, Protocol, measure
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.space import Space

# Fewer repetitions than a search (a sweep measures thousands of variants): one batch of five,
# a second if the median moved by more than 1%.
PROTOCOL = Protocol(warmup_seconds=0.01, batch=5, max_reps=10, stable=0.01)


def _measure(runtime, space, problem, config, operands, compiled: Compiled) -> dict:
    """Verify and time one configuration compiled ahead, through the search's own path
    (measure.measure), as one line of the sweep."""
    row = {"config": config.as_dict(), "status": "ok", "reason": "", "compile_seconds": round(compiled.seconds, 4)}
    if compiled.fatal:
        raise CompileAheadFailed(compiled.fatal)
    if compiled.error:
        return {**row, "status": "compile", "reason": compiled.error}
    run = measure(runtime, space, problem, config, operands, PROTOCOL)
    measurement = run.measurement
    row.update({"status": measurement.status, "reason": measurement.reason,
                "load_seconds": round(run.phases["compile"], 4), "registers": None, "shared_bytes": None,
                "local_bytes": None} | run.resources)
    if "verify" in run.phases:
        row.update(verification_seconds=round(run.phases["verify"], 4), relative_error=measurement.relative_error)
    if measurement.ok:
        row.update(times=list(run.times), median_seconds=measurement.seconds, gflops=measurement.gflops)
    return row


def _done(paths: list[str]) -> set[str]:
    """Configurations already measured in earlier sweeps' files."""
    keys = set()
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if "config" in row:
                keys.add(json.dumps(row["config"], sort_keys=True))
    return keys


FAILED = {"compile": "CompilationFailedConfig", "launch": "RuntimeFailedConfig", "wrong": "RuntimeFailedConfig"}


def export(paths: list[Path], target: Path) -> None:
    """Merge sweep files of one device and problem into a gzipped Kernel Tuner cache file.

    Kernel Tuner's layout: tune_params (the domains) and a cache keyed by the comma-joined values,
    each entry holding its parameters, `time` (mean ms) and `times` (ms), or a failure string.
    Statically invalid combinations are entered as "InvalidConfig", and booleans are written as 0
    and 1. Kernel Tuner opens cache files with a plain open(): gunzip a copy for it. A sampled
    sweep leaves valid configurations out, which Kernel Tuner's simulation mode refuses when it
    reaches one; the project's own replay takes the sample as the space.
    """
    import gzip

    headers, rows = [], {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if "header" in row:
                headers.append(row["header"])
            else:
                rows[json.dumps(row["config"], sort_keys=True)] = row
    fingerprints = {header["device"]["fingerprint"] for header in headers}
    problems = {header["problem"] for header in headers}
    assert len(fingerprints) == 1 and len(problems) == 1, f"mixed sweeps: {fingerprints} {problems}"
    header = headers[0]
    dtype, _, shape = header["problem"].rpartition("-")  # a dtype may hold a dash: float16-tc
    backend = header["device"]["backend"]
    space = Space.of(get_backend(backend), dtype)
    names = list(space.domains())
    cache = {}
    for values in itertools.product(*space.domains().values()):
        config = Config(**dict(zip(names, values)))
        numeric = {name: int(value) for name, value in config.as_dict().items()}
        key = ",".join(str(numeric[name]) for name in names)
        row = rows.get(json.dumps(config.as_dict(), sort_keys=True))
        # Kernel Tuner's simulation mode reads these on every entry, failed ones included.
        common = {**numeric, "compile_time": 0, "verification_time": 0, "benchmark_time": 0, "strategy_time": 0,
                  "framework_time": 0, "timestamp": header["started"]}
        if space.violations(config):
            cache[key] = {**common, "time": "InvalidConfig"}
        elif row is None:
            continue  # valid but not measured: a sample leaves these out
        elif row["status"] != "ok":
            cache[key] = {**common, "time": FAILED[row["status"]], "reason": row["reason"],
                          "compile_time": row["compile_seconds"] * 1e3}
        else:
            times = [seconds * 1e3 for seconds in row["times"]]
            cache[key] = {**common, "time": statistics.fmean(times), "times": times,
                          "compile_time": (row["compile_seconds"] + row["load_seconds"]) * 1e3,
                          "verification_time": row["verification_seconds"] * 1e3,
                          "benchmark_time": sum(times), "GFLOP/s": row["gflops"],
                          "registers": row["registers"], "local_bytes": row["local_bytes"]}
    m, n, k = (int(size) for size in shape.split("x"))
    document = {"device_name": header["device"]["name"], "kernel_name": f"tuner_matmul_{backend}_{dtype}",
                "problem_size": [m, n, k], "tune_params_keys": names,
                "tune_params": {name: [int(value) for value in domain] for name, domain in space.domains().items()},
                "objective": "time", "tuner_headers": headers, "cache": cache}
    with gzip.open(target, "wt") as file:
        json.dump(document, file)
    print(f"{target}: {len(rows)} measured of {header['space_size']} valid configurations, "
          f"{sum(entry['time'] == 'InvalidConfig' for entry in cache.values())} invalid combinations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--shape", nargs=3, type=int, default=[4096, 4096, 4096])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds to measure for (default 480)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="compiling processes, each with its own CUDA context (default: as tuner search)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order (keep it across runs)")
    parser.add_argument("--skip", nargs="*", default=[], help="earlier sweep files whose configurations to skip")
    parser.add_argument("--export", nargs="+", type=Path, metavar="SWEEP",
                        help="merge these sweep files into OUTDIR as a Kernel Tuner cache file, and stop")
    args = parser.parse_args()
    if args.export:
        export(args.export, args.outdir)
        return
    started = time.monotonic()
    runtime = open_runtime(get_backend(args.backend))
    problem = Problem(*args.shape, dtype=args.dtype)
    space = Space.of(runtime.backend, args.dtype)
    order = list(space)
    random.Random(args.seed).shuffle(order)
    done = _done(args.skip)
    todo = [config for config in order if json.dumps(config.as_dict(), sort_keys=True) not in done]
    operands = Operands.fresh(runtime, space, problem, args.seed)
    args.outdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = args.outdir / f"sweep-{args.backend}-{args.dtype}-{problem.m}x{problem.n}x{problem.k}-{stamp}.jsonl"
    header = {"header": {
        "device": runtime.device.as_dict(), "clock": runtime.clock, "problem": problem.key,
        "versions": software(("numba", "numba-cuda", "numpy", DISTRIBUTION)), "python": sys.version.split()[0],
        "command": " ".join(sys.argv), "space_size": len(order), "already_measured": len(done),
        "order_seed": args.seed, "protocol": PROTOCOL.__dict__, "workers": args.workers,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    measured, launch_failures, setup = 0, 0, time.monotonic() - started
    with open(path, "a") as out, CompilePool(args.backend, args.dtype, str(kernel_dir()), runtime.simulated,
                                             args.workers) as pool:
        out.write(json.dumps(header) + "\n")
        ahead = 3 * args.workers
        for index, config in enumerate(todo):
            for later in todo[index:index + ahead]:
                pool.submit(json.dumps(later.as_dict(), sort_keys=True), later.as_dict())
            elapsed = time.monotonic() - started
            if elapsed + 2 * (elapsed - setup) / max(measured, 1) > args.budget:  # room for two more
                break
            compiled = pool.result(json.dumps(config.as_dict(), sort_keys=True))
            row = _measure(runtime, space, problem, config, operands, compiled)
            out.write(json.dumps(row) + "\n")
            out.flush()
            measured += 1
            launch_failures = launch_failures + 1 if row["status"] == "launch" else 0
            if launch_failures >= 3:  # a faulted CUDA context fails every later launch too
                print(f"stopping: 3 launches in a row failed, the last with {row['reason']}")
                break
    print(f"measured {measured} of {len(todo)} configurations left ({len(order)} valid, {len(done)} measured "
          f"before) in {time.monotonic() - started:.0f} s: {path}")


if __name__ == "__main__":
    main()
