#!/usr/bin/env bash
# The README's first line, as a new user runs it, in a fresh clone of this repository with no GPU:
# its wall time (install included, pip's cache as this machine has it) and its output, with the
# commit, the versions and the machine's load, into bench/results/readme_main_command_no_gpu.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
clone=$(mktemp -d)/fresh
git clone -q "$repo" "$clone"
cd "$clone"
out="$repo/bench/results/readme_main_command_no_gpu.txt"
command='python3 -m venv .venv && .venv/bin/pip install -q -e ".[cuda]" && .venv/bin/tuner search --backend cuda'
cache=$(mktemp -d)  # a user cache of its own, as on a fresh machine
{
  echo "# command (fresh clone at commit $(git rev-parse --short HEAD), no GPU, $(date -u +%Y-%m-%dT%H:%MZ)):"
  echo "# $command"
  echo "# with TUNER_CACHE_DIR=$cache (an empty user cache); machine: $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s.%N)
  env TUNER_CACHE_DIR="$cache" TQDM_DISABLE=1 bash -c "$command" 2>&1 | grep -v "^WARNING: Location"
  end=$(date +%s.%N)
  echo "# versions: $(.venv/bin/python -c 'from importlib import metadata as m; print(", ".join(f"{n} {m.version(n)}" for n in ("numba-matmul-tuner", "numba", "numba-cuda", "numpy", "optuna")))')"
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 -c "print(f'# wall time: {$end - $start:.1f} s')"
} > "$out"
tail -3 "$out"
