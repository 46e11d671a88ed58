#!/usr/bin/env bash
# Fetch, into .whl/ (in .gitignore), the wheels the GPU machine lacks, and build tuner's own: it has numba, numba-cuda,
# numpy, jinja2, tqdm, PyYAML, packaging, MarkupSafe, typing-extensions and CuPy, but no package
# registry. Versions are pinned to those the tests run with; Python 3.12 on x86-64, as there.
# pytest-xdist and execnet: pyproject.toml's pytest options ask for xdist's workers, so the tests
# run there too.
# Run it again after any change to tuner, before the device call that carries .whl.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 Mako==1.4.3 SQLAlchemy==2.1.9 platformdirs==4.14.7 numpy==2.4.6 \
  pytest-xdist==3.8.0 execnet==2.1.2
# tuner itself, built here so that the GPU machine installs it without building anything.
python3 -m pip wheel -q --no-deps -w .whl .
rm -rf build ./*.egg-info
echo "$(git rev-parse HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo ' (modified)')" > .whl/COMMIT
ls -l .whl
