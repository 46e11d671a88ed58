"""bench/sanitized_kernels.py, which a GPU session runs under compute-sanitizer: what it reads from the
sanitizer's output, what it does where there is none to run, and its exit status, with stand-ins for
the sanitizer (shell scripts on PATH) and the simulator's verification in the child."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import sanitized_kernels  # noqa: E402
from sanitized_kernels import Kernel, error_count  # noqa: E402

from tuner.config import Config  # noqa: E402

# 32 threads on 16x16 tiles, as bench/verification_mutants.py's: cheap to verify on the simulator.
SMALL = Kernel("small", "a test's", "matmul", "float32",
               Config(block_m=16, block_n=16, block_k=8, thread_m=4, thread_n=2))
# A stand-in for compute-sanitizer: skips its options (each --name value), runs the program or not,
# then prints the summary line, as the real one does after the program ends.
FAKE = """#!/bin/sh
while [ "${{1#--}}" != "$1" ]; do shift 2; done
{run}
echo "========= ERROR SUMMARY: {errors}"
"""


def test_the_error_count_is_read_off_the_summary_line():
    assert error_count("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert error_count("========= ERROR SUMMARY: 1 error\n") == 1
    assert error_count("========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 3 errors\n") == 3
    assert error_count("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n") == 1
    # A racecheck printing an ERROR SUMMARY too, which does not count its hazards, is failed by them.
    assert error_count("========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
                       "========= ERROR SUMMARY: 0 errors\n") == 1
    assert error_count("========= Error: Target application terminated before first instrumented API call\n") is None


def _sanitizer_on_path(monkeypatch, tmp_path: Path, errors: str, run: bool) -> None:
    """PATH holds only a fake compute-sanitizer printing "ERROR SUMMARY: `errors`" (after running the
    program where `run`), and no toolkit is found under CUDA_HOME or /usr/local."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "compute-sanitizer"
    fake.write_text(FAKE.format(run='"$@"' if run else "", errors=errors))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    _no_toolkit(monkeypatch, tmp_path)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _no_toolkit(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(sanitized_kernels, "TOOLKITS", str(tmp_path / "no-cuda*"))
    monkeypatch.setattr(sanitized_kernels, "WHEEL", "no-nvidia/cu*/bin/compute-sanitizer")


def _on_a_gpu(monkeypatch) -> None:
    """The parent as on a GPU, checking SMALL alone; its children still verify on the simulator."""
    monkeypatch.setattr(sanitized_kernels.simulator, "enabled", lambda: False)
    monkeypatch.setattr(sanitized_kernels, "plan", lambda: [(SMALL, "memcheck")])


def _result(outdir: Path) -> dict:
    return json.loads((outdir / "sanitized_kernels.json").read_text())


def test_without_compute_sanitizer_it_says_so_and_nothing_passes(monkeypatch, tmp_path, capsys):
    _no_toolkit(monkeypatch, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sanitized_kernels.main([str(tmp_path / "out")])  # exit 0: returns
    result, printed = _result(tmp_path / "out"), capsys.readouterr().out
    assert printed.splitlines()[0].startswith("nothing checked: compute-sanitizer not found")
    assert result["sanitizer"] is None and "not found" in result["not_run"]
    assert result["passed"] is None
    assert result["rows"] and all(row["verdict"].startswith("not run:") for row in result["rows"])
    assert "passed" not in printed.replace("nothing passed", "") and " not run " in printed


def test_on_the_simulator_nothing_is_sanitized(monkeypatch, tmp_path):
    """gpu_check.sh e2e's step as its dry run (SIMULATE=1) runs it: the simulator runs no GPU code for
    the sanitizer to check, so it checks nothing, says so, and exits 0."""
    _sanitizer_on_path(monkeypatch, tmp_path, "0 errors", run=True)
    step = [sys.executable, sanitized_kernels.__file__, str(tmp_path / "out"), "--budget", "65"]
    done = subprocess.run(["timeout", "-k", "10", "-s", "TERM", "90", *step], capture_output=True, text=True,
                          env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("nothing checked: NUMBA_ENABLE_CUDASIM=1: Numba's CUDA simulator runs no GPU code")
    result = _result(tmp_path / "out")
    assert result["sanitizer"]["path"].endswith("bin/compute-sanitizer")
    assert "simulator" in result["not_run"] and result["passed"] is None
    assert not (tmp_path / "out" / "logs").exists()


def test_errors_the_sanitizer_found_fail_the_run(monkeypatch, tmp_path):
    _sanitizer_on_path(monkeypatch, tmp_path, "3 errors", run=False)
    _on_a_gpu(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        sanitized_kernels.main([str(tmp_path / "out")])
    assert exited.value.code == 1
    [row] = _result(tmp_path / "out")["rows"]
    assert row["errors"] == 3 and row["verdict"].startswith("the sanitizer found 3 errors")
    assert "ERROR SUMMARY: 3 errors" in (tmp_path / "out" / row["log"]).read_text()


def test_a_clean_summary_without_the_checks_result_is_no_pass(monkeypatch, tmp_path):
    """A sanitizer that printed its summary but never ran the check has checked nothing."""
    _sanitizer_on_path(monkeypatch, tmp_path, "0 errors", run=False)
    _on_a_gpu(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        sanitized_kernels.main([str(tmp_path / "out")])
    assert exited.value.code == 1
    [row] = _result(tmp_path / "out")["rows"]
    assert row["errors"] == 0 and row["verdict"].startswith("the check's process left no result")


def test_a_kernel_verified_with_no_error_found_passes(monkeypatch, tmp_path, capsys):
    """The whole path of one check: the child, run by the sanitizer, verifies SMALL (on the simulator)."""
    _sanitizer_on_path(monkeypatch, tmp_path, "0 errors", run=True)
    _on_a_gpu(monkeypatch)
    sanitized_kernels.main([str(tmp_path / "out"), "--budget", "300"])
    result = _result(tmp_path / "out")
    [row] = result["rows"]
    assert row["verification"] == {"edge": "", "served": ""} and row["errors"] == 0 and row["verdict"] == ""
    assert result["passed"] is True and result["device_description"]["name"]
    assert "small" in capsys.readouterr().out


def test_the_plan_sanitizes_every_shipped_configuration_once(monkeypatch):
    from importlib.resources import files

    from tuner import cache

    monkeypatch.setattr(cache, "shipped_dir", lambda: Path(str(files("tuner.shipped_cache"))))  # the real records
    planned = sanitized_kernels.plan()
    memchecked = {(kernel.family, kernel.precision, kernel.config) for kernel, tool in planned if tool == "memcheck"}
    assert len(memchecked) == sum(tool == "memcheck" for _, tool in planned)
    shipped = {(record.family, record.problem.dtype, config)
               for record in map(cache.read_record, cache.record_paths(cache.shipped_dir()))
               for config in record.configs}
    assert shipped and shipped <= memchecked
    assert [kernel.name for kernel, tool in planned if tool == "racecheck"] == list(sanitized_kernels.RACECHECKED)
    assert {kernel.precision for kernel, _ in planned if kernel.config.double_buffer} >= {"float32", "tf32"}
