"""What the generated kernel spends its instructions on: PTX opcode counts and ptxas's resource
report for the default configuration and for an 8x8 register tile (docs/performance_notes.md).

    python bench/ptx_instruction_mix.py > bench/results/ptx_instruction_mix.json
"""
import collections
import json
import os
import re
import tempfile

from provenance import provenance

from tuner.backends import CUDA
from tuner.config import Config
from tuner.resources import assemble, compile_ptx, report_from
from tuner.space import Space

CONFIGS = {"default": Config(), "8x8, unroll_k=1": Config(block_m=128, block_n=128, thread_m=8, thread_n=8,
                                                           unroll_k=1)}
OPCODE = re.compile(r"^\s+(?:@!?%p\d+\s+)?([a-z]+(?:\.[a-z0-9]+)*)", re.MULTILINE)


def main():
    os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-kernels-"))
    space = Space.of(CUDA, "float32")
    runs = []
    for name, config in CONFIGS.items():
        ptx, seconds = compile_ptx(space, config)
        opcodes = collections.Counter(OPCODE.findall(ptx))
        runs.append({"name": name, "config": config.as_dict(), **report_from(assemble(ptx), seconds).as_dict(),
                     "opcodes": dict(opcodes.most_common())})
    print(json.dumps({**provenance("python bench/ptx_instruction_mix.py",
                                   "none: compile_ptx for sm_90 and ptxas on the CPU"), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
