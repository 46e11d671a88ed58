"""What one k-tile of an interior block issues, read from the SASS of a compiled kernel.

ptxas assembles the PTX into a cubin (tuner/resources.py) and nvdisasm (pip install
nvidia-cuda-nvdisasm) prints its SASS. The k-tile loop is the backward branch whose body holds
the most multiply-adds (FFMA/DFMA, or HMMA: one tensor-core mma each). Inside it, the path of an
interior block is the cheapest way through the loop body that still issues every global load of
the tile: bounds-checked loads sit in branches that skip them, and a path skipping loads is an
edge block. Instructions inside an inner loop (the rolled k loop)
count once per trip, the trips being whatever gives the tile's multiply-adds; where ptxas unrolled
the k-tile loop, a trip's counts are divided by the k-tiles it holds. This is a static count of
issued instructions, with no latencies: a bound, not a timing.
"""
import collections
import re
import subprocess
from pathlib import Path

LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);", re.M)
LABEL = re.compile(r"^(\.L_x_\d+):", re.M)
TARGET = re.compile(r"`\((\.L_x_\d+)\)")
MULTIPLY_ADD = ("FFMA", "DFMA", "HFMA2", "HMMA")


def _multiply_add(opcode: str) -> bool:
    """Whether an opcode (with its modifiers, as HMMA.1688.F32.TF32) is a multiply-add."""
    return opcode.split(".")[0] in MULTIPLY_ADD


class NoDisassembler(FileNotFoundError):
    """nvdisasm is not installed beside ptxas, or cannot run."""


def nvdisasm_beside(ptxas: str) -> str:
    """nvdisasm from the same toolkit as `ptxas` (the nvidia-cuda-nvdisasm wheel puts it there)."""
    path = Path(ptxas).with_name("nvdisasm")
    if not path.is_file():
        raise NoDisassembler("nvdisasm not found beside ptxas: pip install nvidia-cuda-nvdisasm (in the tests extra)")
    return str(path)


def disassemble(cubin: Path, ptxas: str) -> str:
    """The SASS of an assembled kernel."""
    nvdisasm = nvdisasm_beside(ptxas)
    try:
        return subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    except OSError as error:  # a file there, but no program this machine runs: as if none were
        raise NoDisassembler(f"{nvdisasm} cannot run here ({error.strerror or error}): replace it, "
                             "e.g. pip install --force-reinstall nvidia-cuda-nvdisasm") from error


def _instructions(sass: str):
    """(opcode, predicated, branch target or None) per instruction, and each label's index."""
    events = sorted([(m.start(), "label", m.group(1)) for m in LABEL.finditer(sass)]
                    + [(m.start(), "op", m) for m in LINE.finditer(sass)], key=lambda e: e[0])
    instructions, labels = [], {}
    for _, kind, value in events:
        if kind == "label":
            labels[value] = len(instructions)
        else:
            target = TARGET.search(value.group(4))
            predicated = bool(value.group(2)) or bool(re.search(r"\bU?P\d\b|\bUPT\b", value.group(4).split("`")[0]))
            instructions.append((value.group(3), predicated, target.group(1) if target else None))
    return instructions, labels


def k_tile_path(sass: str, multiply_adds: int, loads: int) -> dict:
    """Opcode counts issued by one k-tile of an interior block (see the module's docstring)."""
    instructions, labels = _instructions(sass)
    back_edges = [(labels[t], i) for i, (op, _, t) in enumerate(instructions) if t and op.startswith("BRA")
                  and labels[t] <= i]

    def fmas(lo, hi):
        return sum(_multiply_add(instructions[j][0]) for j in range(lo, hi + 1))

    head, end = max(back_edges, key=lambda e: (fmas(*e), e[1] - e[0]))
    inner = [(lo, hi) for lo, hi in back_edges if head <= lo and hi < end]
    in_inner = [any(lo <= j <= hi for lo, hi in inner) for j in range(len(instructions))]
    outside = sum(_multiply_add(instructions[j][0]) for j in range(head, end + 1) if not in_inner[j])
    inside = sum(_multiply_add(instructions[j][0]) for j in range(head, end + 1) if in_inner[j])
    trips = (multiply_adds - outside) / inside if inside else 1.0

    # Cheapest (weighted) path from the loop head to its back edge issuing at least `loads` LDGs.
    best = {(head, 0): (0.0, collections.Counter())}
    for j in range(head, end + 1):
        for count in range(loads + 1):
            state = best.get((j, count))
            if state is None:
                continue
            cost, ops = state
            op, predicated, target = instructions[j]
            weight = trips if in_inner[j] else 1.0
            ops = ops + collections.Counter({op: weight})
            cost += weight
            if j == end:
                if count >= loads:
                    best[("end", count)] = min(best.get(("end", count), (cost, ops)), (cost, ops), key=lambda s: s[0])
                continue
            count = min(loads, count + op.startswith("LDG"))
            successors = []
            if not (op.startswith("BRA") and target and not predicated) and op != "EXIT":
                successors.append(j + 1)
            if op.startswith("BRA") and target and j < labels[target] <= end:
                successors.append(labels[target])
            for nxt in successors:
                old = best.get((nxt, count))
                if old is None or cost < old[0]:
                    best[(nxt, count)] = (cost, ops)
    finals = [best[k] for k in best if k[0] == "end"]
    if not finals:
        raise ValueError("no path through the k-tile loop issues every load")
    cost, ops = min(finals, key=lambda s: s[0])
    # ptxas may unroll the k-tile loop itself: then one trip issues a whole number of k-tiles.
    ratio = sum(n for op, n in ops.items() if _multiply_add(op)) / multiply_adds
    per_trip = round(ratio) if ratio >= 2 and abs(ratio - round(ratio)) < 1e-6 else 1
    ops = {op: round(n / per_trip, 2) for op, n in sorted(ops.items(), key=lambda item: -item[1])}
    cost /= per_trip
    fma = sum(n for op, n in ops.items() if _multiply_add(op))
    shared = sum(n for op, n in ops.items() if op.startswith("LDS"))
    return {"issued": round(cost, 2), "multiply_adds": round(fma, 2), "inner_trips": round(trips, 2),
            "k_tiles_per_trip": per_trip, "issued_per_multiply_add": round(cost / fma, 3),
            "shared_loads": round(shared, 2), "opcodes": ops}
