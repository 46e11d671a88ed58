"""What the generated kernel spends its instructions on, for a few configurations
(docs/performance_notes.md): PTX opcode counts, ptxas's resource report and, where nvdisasm is
installed (pip install nvidia-cuda-nvdisasm), the SASS one k-tile of an interior block issues
(tuner/sass.py).

    python bench/ptx_instruction_mix.py > bench/results/instruction_mix_unsigned_indices.json
    python bench/ptx_instruction_mix.py --template-rev 73c5a9f > bench/results/instruction_mix_73c5a9f.json
    python bench/ptx_instruction_mix.py --dtype float64 > bench/results/instruction_mix_float64.json

--template-rev renders with templates/matmul.py.j2 as it was at that git revision (the rest of
tuner as it is now), for before-and-after comparisons.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import jinja2
from provenance import provenance

import tuner.source
import tuner.space
from tuner.backends import CUDA
from tuner.config import Config
from tuner.resources import assemble, compile_ptx, interior_k_tile, ptxas_path, parse_ptxas
from tuner.sass import NoDisassembler, disassemble, nvdisasm_beside
from tuner.space import Space

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "default": Config(),
    "default, prefetch=false": Config(prefetch=False),
    "8x8, unroll_k=1": Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=1),
    # Outside the space: 1,024 multiply-adds per trip is over MAX_UNROLLED_MULTIPLY_ADDS, lifted for this one.
    "8x8, unroll_k=16": Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=16),
}
OPCODE = re.compile(r"^\s+(?:@!?%p\d+\s+)?([a-z]+(?:\.[a-z0-9]+)*)", re.MULTILINE)


def _git(*args) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--template-rev", help="render with the template of this git revision")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16"])
    args = parser.parse_args()
    if args.template_rev:
        text = _git("show", f"{args.template_rev}:templates/matmul.py.j2")
        environment = jinja2.Environment(loader=jinja2.DictLoader({tuner.source.TEMPLATE: text}),
                                         undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        tuner.source._environment = lambda: environment
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    try:
        nvdisasm_beside(ptxas_path())
        with_sass = True
    except NoDisassembler as missing:
        print(f"no SASS: {missing}", file=sys.stderr)
        with_sass = False
    space = Space.of(CUDA, args.dtype)
    runs = []
    for name, config in CONFIGS.items():
        with mock.patch.object(tuner.space, "MAX_UNROLLED_MULTIPLY_ADDS", 1024):
            ptx, seconds = compile_ptx(space, config)
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp, "kernel.cubin")
            run = {"name": name, "config": config.as_dict(),
                   **parse_ptxas(assemble(ptx, cubin=cubin), seconds).as_dict(),
                   "opcodes": dict(collections.Counter(OPCODE.findall(ptx)).most_common())}
            if with_sass:
                sass = disassemble(cubin, ptxas_path())
                run["sass_instructions"] = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", sass, re.M))
                run["interior_k_tile"] = interior_k_tile(cubin, space, config)
        run["in_space"] = space.violations(config) == []
        runs.append(run)
    command = "python bench/ptx_instruction_mix.py"
    if args.template_rev:
        command += f" --template-rev {args.template_rev}"
    if args.dtype != "float32":
        command += f" --dtype {args.dtype}"
    template = (f"templates/matmul.py.j2 at {args.template_rev}" if args.template_rev
                else f"templates/matmul.py.j2 of the working tree at {_git('rev-parse', '--short', 'HEAD').strip()}"
                + (" with uncommitted changes" if _git("status", "--porcelain", "templates", "tuner") else ""))
    device = "none: compile_ptx for sm_90, ptxas and nvdisasm on the CPU"
    tools = {"ptxas": _version(ptxas_path())}
    if with_sass:
        tools["nvdisasm"] = _version(nvdisasm_beside(ptxas_path()))
    print(json.dumps({**provenance(command, device), "template": template, "tools": tools, "dtype": args.dtype,
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
