"""Plant realistic bugs in rendered kernels and check that the tuner's verification fails each one.

    python bench/verification_mutants.py OUTDIR

Each mutation is an exact text replacement in the kernel that tuner.kernel.render gives for its
configuration (every occurrence replaced): a store guard of one too many, in rows and in columns;
C's columns stored, or B's read, up to the other dimension's size; the last partial k-tile skipped;
beta ignored; in the batched family, A never broadcast; in a double-buffered kernel (DOUBLE_BUFFERED),
k-tile kt read from buffer kt, not kt & 1, which only a third k-tile shows; and in a tensor-core
(tf32) kernel (WARP_TILED), whose mma calls the simulator emulates, its own store guard of one row
too many and its C fragments' columns one apart, not two. Text that no longer occurs in the rendered
source makes the mutation stale, never caught. Each mutant, and the unmutated kernel of each
family, precision and configuration (a control, which must pass), is checked in a process of its
own (a faulting kernel cannot spoil the next one's context) by verify_config (the edge check:
Family.verifications) and by verify at an odd served shape (SERVED, alpha 1 and beta 0), recording
for each whether it failed the kernel, its reason, and whether the launch raised. On the simulator
an out-of-bounds access raises IndexError; a GPU checks no bounds, so there a mutant that writes
only past the end of C must be failed by verify's guard band ("wrote past the end of C"). Writes
OUTDIR/verification_mutants.json (provenance, the device's description, one row per mutation,
with its configuration), prints a table, and exits 1 if a control fails, a mutant passes both
checks, a mutation is stale, a check process dies, or on a GPU the guard band does not fail the
mutants that write past C.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance.py, which PYTHONSAFEPATH leaves off the path
from provenance import ROOT, provenance  # noqa: E402

import tuner  # noqa: E402
from tuner.backends import CUDA  # noqa: E402
from tuner.config import Config, Tiling, WarpConfig  # noqa: E402
from tuner.families.batched import BatchedProblem  # noqa: E402
from tuner.formats import error_line  # noqa: E402
from tuner.problem import Problem  # noqa: E402
from tuner.simulator import describes  # noqa: E402
from tuner.source import render  # noqa: E402
from tuner.space import Space  # noqa: E402

# 32 threads on 16x16 blocks and 8-deep k-tiles: cheap to simulate; edge tiles in every dimension of
# the edge check's products (17x18x19 and 18x17x9 here) and of SERVED.
CONFIG = Config(block_m=16, block_n=16, block_k=8, thread_m=4, thread_n=2)
# The same tiles double-buffered (which the search prunes at this size, though it computes right):
# the edge check's first product has 3 k-tiles, SERVED only 2.
DOUBLE_BUFFERED = replace(CONFIG, double_buffer=True)
# One warp of 2x4 m16n8k8 tf32 tiles: the least block the tensor-core space's domains allow.
WARP_TILED = WarpConfig(block_m=32, block_n=32, block_k=8, warp_m=32, warp_n=32)
SERVED = {"matmul": Problem(29, 23, 13, "float32"), "batched": BatchedProblem(29, 23, 13, "float32", batch=2)}
PAST_THE_END = "wrote past the end of C"  # verify's reason when its guard band changed


@dataclass(frozen=True)
class Mutation:
    """A bug planted in the kernel of `family`, `precision` and `config` by replacing every `old` in
    its source with `new`."""

    name: str
    family: str
    what: str
    old: str = ""
    new: str = ""
    past_the_end: bool = False  # writes past the end of C: on a GPU the guard band must fail it
    precision: str = "float32"
    config: Tiling = CONFIG

    @property
    def control(self) -> bool:
        return not self.old


MUTATIONS = (
    Mutation("control", "matmul", "the kernel as rendered"),
    Mutation("rows-one-too-many", "matmul", "C stored at rows r <= M", "< Mu:", "<= Mu:", past_the_end=True),
    Mutation("columns-one-too-many", "matmul", "C stored at columns q <= N", "< Nu:", "<= Nu:", past_the_end=True),
    Mutation("c-columns-bound-by-m", "matmul", "C's columns stored below M, not N", "< Nu:", "< Mu:"),
    Mutation("b-columns-bound-by-m", "matmul", "B's columns read below M, not N (zero above)",
             "cb < Nu else", "cb < Mu else"),
    Mutation("last-k-tile-skipped", "matmul", "the k-tiles counted as K // block_k, the partial last one skipped",
             f"range((K + {CONFIG.block_k - 1}) // {CONFIG.block_k})", f"range(K // {CONFIG.block_k})"),
    Mutation("beta-ignored", "matmul", "C = alpha A @ B whatever beta", "if beta == 0:", "if True:"),
    Mutation("batched-control", "batched", "the kernel as rendered"),
    Mutation("a-never-broadcast", "batched", "layer z reads A3[z], even from a stack of one",
             "A = A3[z if A3.shape[0] > 1 else 0]", "A = A3[z]"),
    Mutation("double-buffered-control", "matmul", "the kernel as rendered", config=DOUBLE_BUFFERED),
    Mutation("buffer-not-alternated", "matmul", "k-tile kt read from buffer kt, not kt & 1 (right for 2 k-tiles)",
             "s = uint64(kt & 1)", "s = uint64(kt)", config=DOUBLE_BUFFERED),
    Mutation("tensor-core-control", "matmul", "the kernel as rendered", precision="tf32", config=WARP_TILED),
    Mutation("tensor-core-rows-one-too-many", "matmul", "C's fragments stored at rows r <= M",
             " < Mu and cn", " <= Mu and cn", past_the_end=True, precision="tf32", config=WARP_TILED),
    Mutation("tensor-core-fragment-columns", "matmul", "each thread's C columns 1 apart, not 2 (PTX: 2 * threadID)",
             "member * uint64(2)", "member", precision="tf32", config=WARP_TILED),
)


def space_of(mutation: Mutation) -> Space:
    return Space.of(CUDA, mutation.precision, mutation.family)


def occurrences(mutation: Mutation) -> int:
    """How often the mutation's text occurs in its kernel as rendered now."""
    return render(space_of(mutation), mutation.config).count(mutation.old) if mutation.old else 0


def _outcome(reason: str, raised: bool) -> dict:
    return {"failed": bool(reason), "reason": reason, "raised": raised}


def check(mutation: Mutation, kernels: Path) -> dict:
    """The edge check's and the served shape's verdicts on the mutant, and the device's description."""
    import tuner.kernel
    from tuner.measure import Operands, verify, verify_config
    from tuner.runtime import open_runtime

    rendered = tuner.kernel.render

    def mutated(*args, **keywords) -> str:
        return rendered(*args, **keywords).replace(mutation.old, mutation.new)

    if not mutation.control:
        tuner.kernel.render = mutated  # verify_config loads (renders) the kernel itself
    runtime, space = open_runtime(CUDA), space_of(mutation)
    reason = verify_config(runtime, space, mutation.config, kernels)
    # verify_edges's reasons name the product they fail at; any other is an error verify_config caught.
    edge = _outcome(reason, bool(reason) and not reason.startswith("at "))
    problem = replace(SERVED[mutation.family], dtype=mutation.precision)
    try:
        kernel = tuner.kernel.load(space, mutation.config, kernels)
        operands = Operands.fresh(runtime, space, problem, seed=0)
        served = _outcome(verify(runtime, kernel, operands, space.family.tolerance(space.precision))[1], False)
    except Exception as error:  # an out-of-bounds access on the simulator, a fault on a GPU
        served = _outcome(error_line(error), True)
    return {"edge": edge, "served": served, "device": runtime.device.as_dict()}


def _run_child(mutation: Mutation, kernels: Path) -> dict:
    """check() in a process of its own: its row, or what the process left when it died."""
    done = subprocess.run([sys.executable, __file__, "--child", mutation.name, "--kernels", str(kernels)],
                          capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode or not last.startswith("{"):
        return {"died": f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [last])[-1]}"}
    return json.loads(last)


def verdict(mutation: Mutation, row: dict, simulated: bool) -> str:
    """What is wrong with the result for `mutation`: "" when the control passes or the mutant is caught."""
    if row.get("stale"):
        return "stale: its text no longer occurs in the rendered kernel"
    if "died" in row:
        return f"the check's process died ({row['died']})"
    caught = row["edge"]["failed"] or row["served"]["failed"]
    if mutation.control:
        return "the unmutated kernel failed" if caught else ""
    if not caught:
        return "not caught"
    if mutation.past_the_end and not simulated and not any(
            PAST_THE_END in row[name]["reason"] for name in ("edge", "served")):
        return "the guard band did not fail it"
    return ""


def _cell(outcome: dict) -> str:
    if not outcome["failed"]:
        return "passed"
    return (("raised " if outcome["raised"] else "") + outcome["reason"])[:100]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--child", choices=[mutation.name for mutation in MUTATIONS], help=argparse.SUPPRESS)
    parser.add_argument("--kernels", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(check(next(mutation for mutation in MUTATIONS if mutation.name == args.child), args.kernels)))
        return
    if args.outdir is None:
        parser.error("give the directory to write verification_mutants.json in")
    kernels = Path(tempfile.mkdtemp(prefix="tuner-mutant-kernels-"))
    rows, device = [], None
    try:
        for mutation in MUTATIONS:
            start = time.perf_counter()
            count = occurrences(mutation)
            row = {**asdict(mutation), "occurrences": count}
            if mutation.control or count:
                row |= _run_child(mutation, kernels)
            else:
                row["stale"] = True
            device = row.pop("device", device)
            row["seconds"] = round(time.perf_counter() - start, 2)
            rows.append(row)
    finally:
        shutil.rmtree(kernels, ignore_errors=True)
    simulated = describes(device) if device else None
    for mutation, row in zip(MUTATIONS, rows):
        row["verdict"] = verdict(mutation, row, bool(simulated))
    wheel = ROOT / ".whl" / "COMMIT"
    result = {**provenance(" ".join(sys.argv), device["name"] if device else "unknown"),
              "device_description": device, "simulated": simulated,
              "tuner": {"imported_from": str(Path(tuner.__file__).parent),
                        "wheel_commit": wheel.read_text().strip() if wheel.exists() else None},
              "served": {name: problem.shape_text for name, problem in SERVED.items()},
              "rows": rows, "passed": not any(row["verdict"] for row in rows)}
    args.outdir.mkdir(parents=True, exist_ok=True)
    (args.outdir / "verification_mutants.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['device']} [{device['fingerprint'] if device else 'no check ran'}]; served: "
          + ", ".join(f"{name} {problem.shape_text}" for name, problem in SERVED.items()))
    print(f"{'mutation':30} {'edge check (verify_config)':100} served shape (verify)")
    for row in rows:
        edge, served = (_cell(row["edge"]), _cell(row["served"])) if "edge" in row else ("-", "-")
        print(f"{row['name']:30} {edge:100} {served}" + (f"  <- {row['verdict']}" if row["verdict"] else ""))
    if not result["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
