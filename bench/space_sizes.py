"""The valid space of every backend and precision, as `tuner space` prints it, with where it came from.

    python bench/space_sizes.py      # writes bench/results/space_<backend>_<dtype>.txt

Each file starts with this command, the date, the commit and the versions (the sizes change with
the space's rules), then `tuner space`'s output; a CUDA-core space's file also gives its distinct
PTX (configurations that differ only in a max_registers cap share one, bench/compile_space.py).
"""
import json
import subprocess
import sys
from pathlib import Path

from compile_space import _groups
from provenance import provenance

from tuner.backends import BACKENDS
from tuner.space import Space

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    header = provenance("python bench/space_sizes.py", "CPU (no GPU needed)")
    for backend in BACKENDS.values():
        for dtype in backend.precisions():
            command = ["tuner", "space", "--backend", backend.name, "--dtype", dtype]
            shown = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout
            lines = [f"# {json.dumps(header)}", f"$ {' '.join(command)}", shown.rstrip()]
            space = Space.of(backend, dtype)
            if not space.precision.tensor_cores:
                lines.append(f"distinct PTX: {len(_groups(space, 0, []))}")
            (ROOT / "bench" / "results" / f"space_{backend.name}_{dtype}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
