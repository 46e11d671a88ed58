"""Measure the valid search space on the GPU, whole or an evenly spread part: the recorded truth
that search strategies are compared against offline.

    python bench/sweep.py OUTDIR [--dtype float32] [--shape 4096 4096 4096] [--budget SECONDS]
                          [--workers N] [--seed S] [--skip FILE ...]
    python bench/sweep.py TARGET.json.gz --export SWEEP.jsonl ...   # as a Kernel Tuner cache file

The valid configurations are taken in one seeded random order, so the part measured within the
budget is a uniform sample of the space, and a later run with --skip continues the same order.
Worker processes compile ahead (`dispatcher.compile` stores the cubin in Numba's on-disk cache);
the main process loads each kernel, verifies it once against the float64 reference, and times
it with the search's protocol (device events, L2 flushed before each repetition).

Writes OUTDIR/sweep-<backend>-<dtype>-<MxNxK>.jsonl: a header line (device and fingerprint,
versions, command, space size, order seed, protocol), then one line per configuration with its
status and reason, every repetition, the median, GFLOP/s, compile, load and verification
seconds, and registers, shared and local (spill) memory. Lines are flushed as they are measured,
and the run stops before the budget, so a run cut short still leaves a readable file.
"""
import argparse
import concurrent.futures
import concurrent.futures.process
import itertools
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path

from tuner.backends import get_backend
from tuner.config import Config
from tuner import DISTRIBUTION
from tuner.devices import software
from tuner.kernel import load
from tuner.measure import TOLERANCE, Operands, Protocol, time_launch, verify
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.space import Space

# Fewer repetitions than a search (a sweep measures thousands of variants): one batch of five,
# a second if the median moved by more than 1%.
PROTOCOL = Protocol(warmup_seconds=0.01, batch=5, max_reps=10, stable=0.01)


def _compile(backend: str, dtype: str, config: dict) -> tuple[float, str]:
    """In a worker: compile one configuration into Numba's disk cache; (seconds, error)."""
    start = time.perf_counter()
    try:
        load(Space.of(get_backend(backend), dtype), Config(**config)).compile()
    except Exception as error:  # the variant's failure, recorded
        return time.perf_counter() - start, f"{type(error).__name__}: {str(error).strip()[:300]}"
    return time.perf_counter() - start, ""


def _resources(compiled) -> dict:
    """Registers, shared and local (spill and stack) memory of a compiled kernel; None simulated."""
    if compiled is None:
        return {"registers": None, "shared_bytes": None, "local_bytes": None}
    return {"registers": compiled.regs_per_thread, "shared_bytes": compiled.shared_mem_per_block,
            "local_bytes": compiled.local_mem_per_thread}


def _measure(runtime, space, problem, config, operands, compiled: tuple[float, str]) -> dict:
    """Load (from the disk cache), verify and time one configuration."""
    compile_seconds, error = compiled
    row = {"config": config.as_dict(), "status": "ok", "reason": "", "compile_seconds": round(compile_seconds, 4)}
    if error:
        return {**row, "status": "compile", "reason": error}
    start = time.perf_counter()
    try:
        kernel = load(space, config)
        compiled = kernel.compile()
    except Exception as failure:
        return {**row, "status": "compile", "reason": f"{type(failure).__name__}: {failure}"[:300]}
    row["load_seconds"] = round(time.perf_counter() - start, 4)
    row.update(_resources(compiled))
    precision = space.precision
    try:
        start = time.perf_counter()
        relative_error, wrong = verify(runtime, kernel, operands, TOLERANCE[precision.accumulate])
        row["verification_seconds"] = round(time.perf_counter() - start, 4)
        row["relative_error"] = relative_error
        if wrong:
            return {**row, "status": "wrong", "reason": wrong}
        C = runtime.module.device_array(operands.reference.shape, dtype=precision.output)
        times = time_launch(runtime, kernel.bind(operands.A, operands.B, C), PROTOCOL)
    except Exception as failure:
        return {**row, "status": "launch", "reason": f"{type(failure).__name__}: {failure}"[:300]}
    median = statistics.median(times)
    return {**row, "times": times, "median_seconds": median, "gflops": problem.flops / median / 1e9}


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
    backend, dtype = header["device"]["backend"], header["problem"].split("-")[0]
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
    m, n, k = (int(size) for size in header["problem"].split("-")[1].split("x"))
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
    parser.add_argument("--workers", type=int, default=max(1, min(15, len(os.sched_getaffinity(0)) - 1)),
                        help="compiling processes, each with its own CUDA context (default: cores - 1, at most 15)")
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
    context = multiprocessing.get_context("spawn")
    with open(path, "a") as out, concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        out.write(json.dumps(header) + "\n")
        ahead = 3 * args.workers
        futures = {}
        for index, config in enumerate(todo):
            for later in todo[index:index + ahead]:
                if later not in futures:
                    futures[later] = pool.submit(_compile, args.backend, args.dtype, later.as_dict())
            elapsed = time.monotonic() - started
            if elapsed + 2 * (elapsed - setup) / max(measured, 1) > args.budget:  # room for two more
                break
            try:
                compiled = futures.pop(config).result()
            except concurrent.futures.process.BrokenProcessPool as error:
                print(f"stopping: a compiling process died ({error})")
                break
            row = _measure(runtime, space, problem, config, operands, compiled)
            out.write(json.dumps(row) + "\n")
            out.flush()
            measured += 1
            launch_failures = launch_failures + 1 if row["status"] == "launch" else 0
            if launch_failures >= 3:  # a faulted CUDA context fails every later launch too
                print(f"stopping: 3 launches in a row failed, the last with {row['reason']}")
                break
        pool.shutdown(cancel_futures=True)
    print(f"measured {measured} of {len(todo)} configurations left ({len(order)} valid, {len(done)} measured "
          f"before) in {time.monotonic() - started:.0f} s: {path}")


if __name__ == "__main__":
    main()
