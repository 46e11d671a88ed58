"""Tests run on Numba's CUDA simulator: no GPU is needed. PTX tests start their own processes."""
import contextlib
import importlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Must be set before numba.cuda is first imported anywhere in the test process.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-test-kernels-"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the cores this process may use (--maxprocesses caps it;
    PYTEST_XDIST_AUTO_NUM_WORKERS, as xdist reads it, overrides it). Many tests wait on subprocesses
    and signals, which a third worker on 2 cores can fill (bench/results/test_workers_per_core.txt)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own reading of it
    return len(os.sched_getaffinity(0)) + 1


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on loopback for the session, installed with apt-get if missing; the
    tests that need it are skipped, with the reason, if that cannot be done."""
    from postgres_server import Server, Unavailable

    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[postgres]'")
    try:
        server = Server()
    except (Unavailable, OSError, subprocess.SubprocessError) as reason:
        pytest.skip(f"no PostgreSQL server: {reason}")
    yield server
    server.stop()


@pytest.fixture
def numba_env():
    """A monkeypatch for the NUMBA_ variables numba's configs read (compile_settings reloads
    numba-cuda's, Numba's own where numba.cuda is built in): after the test the environment is
    restored, then each config reloaded from it (one object where numba-cuda is Numba's numba.cuda)."""
    configs = []
    for name in ("numba.cuda.core.config", "numba.core.config"):
        with contextlib.suppress(ImportError):
            configs.append(importlib.import_module(name))
    with pytest.MonkeyPatch.context() as patch:
        yield patch
    for config in {id(config): config for config in configs}.values():
        config.reload_config()  # it reloads where the environment differs from the one it last read


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL of a new, empty PostgreSQL database."""
    return postgres_server.database()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The test's own empty cache directory as $TUNER_CACHE_DIR, the library reloaded to see it and
    again after the test."""
    import tuner

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    tuner.reload()
    yield tmp_path
    tuner.reload()


@pytest.fixture
def reachable(monkeypatch):
    """A folder that another user can reach (pytest's own are private to this one), for a cache
    with no shipped records; removed after the test, whatever modes the test left there."""
    folder = Path(tempfile.mkdtemp(prefix="tuner-test-modes-"))
    folder.chmod(0o755)
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: folder / "no-shipped-records")
    yield folder
    for path in (folder, *folder.rglob("*")):
        with contextlib.suppress(OSError):
            path.chmod(0o755)
    shutil.rmtree(folder)


@pytest.fixture(autouse=True)
def no_shipped_records(monkeypatch, tmp_path_factory):
    """The records shipped in cache/records depend on the GPUs measured so far: tests in this
    process see none, unless a test ships its own."""
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: tmp_path_factory.getbasetemp() / "no-shipped-records")


@pytest.fixture
def launched_types(monkeypatch):
    """Each tuned kernel launch from now on, as (the Numba types of its arguments, those the kernel is
    compiled, verified and timed for: Family.signature). On a GPU, arguments of other types (a device
    array of another layout) would make Numba compile another kernel, one never verified."""
    import numba
    from numba.core.sigutils import normalize_signature

    from tuner.kernel import Kernel

    launches, configured = [], Kernel._configured

    def recording(kernel, grid, stream):
        launch = configured(kernel, grid, stream)
        compiled, _ = normalize_signature(kernel.space.family.signature(kernel.space.precision))

        def recorded(*arguments):
            launches.append((tuple(numba.typeof(argument) for argument in arguments), compiled))
            return launch(*arguments)
        return recorded

    monkeypatch.setattr(Kernel, "_configured", recording)
    return launches
