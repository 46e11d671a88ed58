"""Valid cache records for tests, made the way a search makes them."""
from datetime import datetime, timezone

from tuner import record
from tuner.config import Config
from tuner.devices import Device
from tuner.dtypes import PRECISIONS
from tuner.problem import Problem

H100 = Device(backend="cuda", name="NVIDIA H100 80GB HBM3", arch="sm_90", multiprocessors=132,
              memory_bytes=85_000_000_000, clock_khz=1_980_000, l2_bytes=52_428_800,
              driver="580.65 (CUDA 13.0)", runtime="NVRTC 13.0",
              software={"numba": "0.68.1", "numba-cuda": "0.30.4", "templates": "0123"},
              peak_gflops={"float32": 66_908.2, "float64": 33_454.1})


def make_record(device: Device, problem: Problem, ranked: list[tuple[Config, float]],
                finished: str = "2026-11-21T12:00:00+00:00") -> record.Record:
    """A record of `ranked` (configuration, GFLOP/s) pairs, best first, measured on `device`."""
    clock = "simulated CPU time" if device.simulated else "GPU time (device events)"
    peak = None if device.simulated else device.peak(PRECISIONS[problem.dtype].units)
    entries = [record.Entry(trial, config, record.Measurement(
        "ok", relative_error=0.0, seconds=problem.flops / gflops / 1e9, spread=0.01, reps=10, gflops=gflops,
        fraction_of_peak=gflops / peak if peak else None, clock=clock))
        for trial, (config, gflops) in enumerate(ranked)]
    budget = record.Budget(trials=len(ranked), measured=len(ranked), failed=0, invalid=0, duplicates=0,
                           measuring_seconds=1.5)
    moment = datetime.fromisoformat(finished).astimezone(timezone.utc)
    return record.make(device, problem, clock, entries, budget, (moment, moment), {"name": "test", "storage": "test"})
