"""Run tuner's verification of a few kernels under NVIDIA's compute-sanitizer, which checks every access.

    python bench/sanitized_kernels.py OUTDIR [--budget SECONDS] [--jobs N]

Verification checks values: on a GPU, which checks no bounds, a read past the end of A or B, or a
load guarded wrong whose value is then discarded, changes nothing it compares, and a write past C
is seen only inside its guard band. compute-sanitizer's memcheck reports each access outside an
allocation (with --padding, one that lands in the allocation after it too), and its racecheck the
shared-memory hazards between threads of a block. The kernels: the default of each precision and
family, the double-buffered ones (CUDA cores, tf32, float16-tc), and every configuration of the
records shipped in cache/records; each runs, in a process of its own under `compute-sanitizer
--tool memcheck` (the float32 default and double-buffered kernels under `--tool racecheck` too),
verify_config (the edge check: Family.verifications) and verify at an odd served shape (SERVED).
Failed API calls are not reported (--report-api-errors no), as in cuda-python's own sanitized
tests (NVIDIA/cuda-python#687): its bindings, which numba-cuda calls through, have made failing
calls that the sanitizer counted as errors (NVIDIA/cuda-python#562), and an error here is to be
the kernel's.

Each check's verdict comes from the sanitizer's summary lines ("ERROR SUMMARY: N errors", and
racecheck's own: the largest count where it prints both) and the child's verification. Checks run
--jobs at a time, each killed (timed out) at the end of --budget seconds, and none starts in its
last MIN_SECONDS, so that the whole fits its place in bench/gpu_check.sh e2e.
Writes OUTDIR/sanitized_kernels.json (provenance, the sanitizer's path and version, one row per
check) and each check's sanitizer output in OUTDIR/logs/, prints a table, and exits 1 if any check
found errors, printed no summary, timed out, left no result, failed verification, or did not start
within the budget. Where compute-sanitizer is not found (PATH, $CUDA_HOME, /usr/local/cuda*, the
nvidia-cuda-sanitizer-api wheel's nvidia/cu*/bin), or on Numba's CUDA simulator, which runs no GPU
code to check, it says so in one line, records it, marks every check "not run" and exits 0:
nothing was checked, and nothing passed.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance.py, which PYTHONSAFEPATH leaves off the path
from provenance import ROOT, provenance  # noqa: E402

import tuner  # noqa: E402
from tuner import cache, simulator  # noqa: E402
from tuner.backends import CUDA  # noqa: E402
from tuner.config import Config, Tiling, WarpConfig  # noqa: E402
from tuner.family import families  # noqa: E402
from tuner.families.batched import BatchedProblem  # noqa: E402
from tuner.formats import error_line  # noqa: E402
from tuner.problem import Problem  # noqa: E402
from tuner.space import Space  # noqa: E402

SERVED = {"matmul": Problem(29, 23, 13, "float32"), "batched": BatchedProblem(29, 23, 13, "float32", batch=2)}
# Shared-memory tiles written and read across a barrier each k-tile, and across two buffers.
RACECHECKED = ("float32-matmul-default", "float32-matmul-double-buffered")
# Where a CUDA toolkit keeps compute-sanitizer (bin/ links to compute-sanitizer/), and where the
# nvidia-cuda-sanitizer-api wheel puts it (nvidia/cu13/bin in 13.0.85) under site-packages.
TOOLKITS = "/usr/local/cuda*"
WHEEL = "nvidia/cu*/bin/compute-sanitizer"
OPTIONS = {
    "memcheck": ("--padding", "8192"),  # bytes after each allocation that no access may reach
    "racecheck": (),
}
# Every tool's last line; racecheck's own summary as well, its hazards of error severity.
SUMMARIES = (re.compile(r"ERROR SUMMARY: (\d+) errors?"),
             re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?"))
MIN_SECONDS = 10  # a check is not started with less of the budget left
TIMEOUT = 60  # seconds one check may take at most, its compiles under the sanitizer included


@dataclass(frozen=True)
class Kernel:
    """A configuration of a family and precision to verify under the sanitizer; `what` says where it comes from."""

    name: str
    what: str
    family: str
    precision: str
    config: Tiling

    def as_dict(self) -> dict:
        return {"name": self.name, "what": self.what, "family": self.family, "precision": self.precision,
                "config": asdict(self.config)}

    @classmethod
    def from_dict(cls, data: dict) -> "Kernel":
        space = Space.of(CUDA, data["precision"], data["family"])
        return cls(data["name"], data["what"], data["family"], data["precision"], space.config_type(**data["config"]))


def kernels() -> list[Kernel]:
    """The defaults, the double-buffered kernels and the shipped records' configurations, each once."""
    found = []
    for precision in CUDA.precisions():
        for family in families():
            default = Space.of(CUDA, precision, family).default()
            found.append(Kernel(f"{precision}-{family}-default", "the default", family, precision, default))
    # 8x4 register tiles: the least that the space double-buffers (32 accumulators); unroll_k 2 keeps
    # a k-loop trip within the space's 64 multiply-adds.
    double = replace(Config(), thread_m=8, unroll_k=2, double_buffer=True)
    found.append(Kernel("float32-matmul-double-buffered", "double-buffered", "matmul", "float32", double))
    for precision in ("tf32", "float16-tc"):
        found.append(Kernel(f"{precision}-matmul-double-buffered", "double-buffered", "matmul", precision,
                            WarpConfig(double_buffer=True)))
    for path in cache.record_paths(cache.shipped_dir()):
        record = cache.read_record(path)
        for rank, config in enumerate(record.configs):
            place = "best" if rank == 0 else f"runner-up-{rank}"
            found.append(Kernel(f"{path.stem}-{place}", f"{cache.record_id(cache.shipped_dir(), path)} {place}",
                                record.family, record.problem.dtype, config))
    unique = {}
    for kernel in found:
        unique.setdefault((kernel.family, kernel.precision, kernel.config), kernel)
    return list(unique.values())


def plan() -> list[tuple[Kernel, str]]:
    """Each check to run, in order: every kernel under memcheck, RACECHECKED under racecheck too, just after."""
    return [(kernel, tool) for kernel in kernels()
            for tool in ("memcheck", "racecheck") if tool == "memcheck" or kernel.name in RACECHECKED]


def find_sanitizer() -> Path | None:
    """compute-sanitizer from PATH, $CUDA_HOME, a toolkit under /usr/local, or the wheel; None if none is there."""
    candidates = [shutil.which("compute-sanitizer")]
    toolkits = ([os.environ["CUDA_HOME"]] if os.environ.get("CUDA_HOME") else []) + sorted(glob.glob(TOOLKITS))
    for toolkit in toolkits:
        candidates += [f"{toolkit}/bin/compute-sanitizer", f"{toolkit}/compute-sanitizer/compute-sanitizer"]
    candidates += sorted(found for entry in sys.path if entry for found in glob.glob(f"{entry}/{WHEEL}"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def error_count(output: str) -> int | None:
    """The largest count of errors in the sanitizer's summary lines ("ERROR SUMMARY: N errors", racecheck's
    summary), so that a racecheck printing both is failed by its hazards even if its ERROR SUMMARY does not
    count them; None where it printed none."""
    counts = [int(count) for summary in SUMMARIES for count in summary.findall(output)]
    return max(counts) if counts else None


def check(kernel: Kernel, kernels_dir: Path) -> dict:
    """The edge check's and the served shape's reasons ("" where right), and the device's description."""
    from tuner.kernel import load
    from tuner.measure import Operands, verify, verify_config
    from tuner.runtime import open_runtime

    runtime, space = open_runtime(CUDA), Space.of(CUDA, kernel.precision, kernel.family)
    edge = verify_config(runtime, space, kernel.config, kernels_dir)
    try:
        loaded = load(space, kernel.config, kernels_dir)
        operands = Operands.fresh(runtime, space, replace(SERVED[kernel.family], dtype=kernel.precision), seed=0)
        served = verify(runtime, loaded, operands, space.family.tolerance(space.precision))[1]
    except Exception as error:  # a fault on a GPU
        served = error_line(error)
    return {"edge": edge, "served": served, "device": runtime.device.as_dict()}


def verdict(row: dict) -> str:
    """What is wrong with a check's row, first thing first: "" when the sanitizer found no error and
    the kernel verified."""
    if row.get("not_run"):
        return f"not run: {row['not_run']}"
    if row["timed_out"]:
        return f"timed out after {row['seconds']:.0f} s"
    if row["errors"] is None:
        return f"no ERROR SUMMARY line (exit {row['exit']}): the sanitizer did not finish; see {row['log']}"
    if row["errors"]:
        return f"the sanitizer found {row['errors']} error{'s' * (row['errors'] != 1)}; see {row['log']}"
    if "verification" not in row:
        return f"the check's process left no result (exit {row['exit']}); see {row['log']}"
    wrong = [f"{name}: {reason}" for name, reason in row["verification"].items() if reason]
    return f"verification failed ({'; '.join(wrong)})" if wrong else ""


class Checks:
    """Runs checks under the sanitizer, each in a process group of its own: none starts with less than
    MIN_SECONDS left before the deadline, and each is killed at it (or after TIMEOUT)."""

    def __init__(self, sanitizer: Path, outdir: Path, scratch: Path, deadline: float):
        self.sanitizer, self.outdir, self.scratch, self.deadline = sanitizer, outdir, scratch, deadline
        self.running: set[subprocess.Popen] = set()
        self.lock, self.stopped = threading.Lock(), False

    def command(self, kernel: Kernel, tool: str, result: Path, kernels_dir: Path) -> list[str]:
        return [str(self.sanitizer), "--tool", tool, "--report-api-errors", "no", "--print-limit", "10",
                "--show-backtrace", "device", *OPTIONS[tool],
                sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(kernel.as_dict()),
                "--result", str(result), "--kernels", str(kernels_dir)]

    def run(self, kernel: Kernel, tool: str) -> dict:
        row = {**kernel.as_dict(), "tool": tool}
        if self.deadline - time.monotonic() < MIN_SECONDS:
            return {**row, "not_run": "the budget was spent before it started"}
        stem = f"{kernel.name}.{tool}"
        log, result, kernels_dir = (self.outdir / "logs" / f"{stem}.log", self.scratch / f"{stem}.json",
                                    self.scratch / stem)
        log.parent.mkdir(exist_ok=True)
        kernels_dir.mkdir()
        start = time.monotonic()
        with open(log, "w") as output, self.lock:
            if self.stopped:
                return {**row, "not_run": "stopped before it started"}
            process = subprocess.Popen(self.command(kernel, tool, result, kernels_dir), stdout=output,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.running.add(process)
        try:
            process.wait(timeout=min(TIMEOUT, self.deadline - time.monotonic()))
            timed_out = False
        except subprocess.TimeoutExpired:
            self.kill(process)
            timed_out = True
        finally:
            self.running.discard(process)
        text = log.read_text(errors="replace")
        row |= {"timed_out": timed_out, "exit": process.returncode, "seconds": round(time.monotonic() - start, 2),
                "errors": error_count(text), "log": str(log.relative_to(self.outdir)),
                "summary": [line.strip("= ") for line in text.splitlines() if "SUMMARY:" in line]}
        if result.exists():
            row |= json.loads(result.read_text())
        return row

    @staticmethod
    def kill(process: subprocess.Popen) -> None:
        """The sanitizer and the child it started (its process group), then reaped."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def stop(self) -> None:
        """Start no check more, and kill those running."""
        with self.lock:
            self.stopped = True
            running = list(self.running)
        for process in running:
            self.kill(process)


def sanitizer_version(sanitizer: Path) -> str:
    done = subprocess.run([str(sanitizer), "--version"], capture_output=True, text=True, timeout=30)
    lines = done.stdout.strip().splitlines()
    return next((line for line in lines if line.startswith("Version")), lines[-1] if lines else "")


def _cell(row: dict, name: str) -> str:
    return "-" if "verification" not in row else (row["verification"][name] or "passed")[:60]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--budget", type=float, default=65.0,
                        help="seconds the checks may take together; one still running then is killed")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="checks run at a time")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kernels", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        found = check(Kernel.from_dict(json.loads(args.child)), args.kernels)
        args.result.write_text(json.dumps({"verification": {"edge": found["edge"], "served": found["served"]},
                                           "device": found["device"]}))
        return
    if args.outdir is None:
        parser.error("give the directory to write sanitized_kernels.json in")
    args.outdir.mkdir(parents=True, exist_ok=True)
    planned, sanitizer = plan(), find_sanitizer()
    not_run = ("compute-sanitizer not found in PATH, $CUDA_HOME, /usr/local/cuda*/bin or an nvidia-cuda-sanitizer-api "
               "wheel's nvidia/cu*/bin; install the CUDA toolkit or that wheel" if sanitizer is None else
               "NUMBA_ENABLE_CUDASIM=1: Numba's CUDA simulator runs no GPU code for compute-sanitizer to check"
               if simulator.enabled() else "")
    if not_run:
        print(f"nothing checked: {not_run}")
        rows = [{**kernel.as_dict(), "tool": tool, "not_run": not_run} for kernel, tool in planned]
    else:
        scratch = Path(tempfile.mkdtemp(prefix="tuner-sanitized-"))  # kernel files and the children's results
        checks = Checks(sanitizer, args.outdir, scratch, time.monotonic() + args.budget)
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            try:
                rows = list(pool.map(lambda planned_check: checks.run(*planned_check), planned))
            finally:  # on SIGTERM too: no check starts after this, and none runs on
                pool.shutdown(wait=False, cancel_futures=True)
                checks.stop()
                shutil.rmtree(scratch, ignore_errors=True)
    for row in rows:
        row["verdict"] = verdict(row)
    device = next((row.pop("device") for row in rows if "device" in row), None)
    for row in rows:
        row.pop("device", None)
    wheel = ROOT / ".whl" / "COMMIT"
    command = " ".join(sys.argv if argv is None else [sys.argv[0], *argv])
    result = {**provenance(command, device["name"] if device else "unknown"),
              "device_description": device,
              "sanitizer": {"path": str(sanitizer), "version": sanitizer_version(sanitizer)} if sanitizer else None,
              "not_run": not_run or None,
              "tuner": {"imported_from": str(Path(tuner.__file__).parent),
                        "wheel_commit": wheel.read_text().strip() if wheel.exists() else None},
              "served": {name: problem.shape_text for name, problem in SERVED.items()},
              "budget_seconds": args.budget, "jobs": args.jobs,
              "rows": rows, "passed": None if not_run else not any(row["verdict"] for row in rows)}
    (args.outdir / "sanitized_kernels.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['device']}; sanitizer: {result['sanitizer']['version'] if sanitizer else 'not found'}; served: "
          + ", ".join(f"{name} {problem.shape_text}" for name, problem in SERVED.items()))
    print(f"{'kernel':40} {'tool':9} {'sanitizer':10} {'edge check':30} {'served shape':30} verdict")
    for row in rows:
        errors = row.get("errors")
        found = ("not run" if row.get("not_run") else "no summary" if errors is None
                 else f"{errors} error{'s' * (errors != 1)}")
        print(f"{row['name']:40} {row['tool']:9} {found:10} {_cell(row, 'edge'):30} {_cell(row, 'served'):30} "
              f"{'' if not_run else row['verdict']}")
    if not_run:
        print(f"not run: {not_run}; exit 0, and nothing passed")
    elif not result["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # bench/gpu_check.sh's timeout: stop the checks
    main()
