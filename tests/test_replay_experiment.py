"""bench/replay_experiment.py's bookkeeping: which runs it skips, and which it counts."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import replay_experiment  # noqa: E402

from test_replay import write_cache  # noqa: E402

from tuner.sampler import Options  # noqa: E402


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "bowl.json.gz"
    write_cache(path)
    return path


def _tpe_line(seed: int, evaluations: int | None, best_ms: list) -> str:
    row = {"sampler": "tpe", "seed": seed, "best_ms": best_ms}
    return json.dumps(row if evaluations is None else {**row, "evaluations": evaluations}) + "\n"


def test_a_seed_run_again_for_longer_counts_once_with_its_longer_run(space, tmp_path):
    optimum_ms = replay_experiment._space(str(space)).optimum * 1e3
    (tmp_path / "tuner-bowl.jsonl").write_text(
        _tpe_line(0, 100, [2 * optimum_ms] * 100) + _tpe_line(0, 400, [2 * optimum_ms] * 150 + [optimum_ms] * 250)
        + _tpe_line(1, None, [optimum_ms] * 400))  # an older line: 400 evaluations, unsaid
    cells = replay_experiment.summarize([space], tmp_path)["bowl"]["tuner tpe"]
    assert {budget: cells[budget]["runs"] for budget in cells} == {"25": 2, "50": 2, "100": 2, "200": 2, "400": 2}
    assert cells["100"]["mean"] == pytest.approx(0.75) and cells["400"]["mean"] == pytest.approx(1.0)


def test_only_runs_missing_or_shorter_than_asked_are_run(space, tmp_path, monkeypatch):
    (tmp_path / "tuner-bowl.jsonl").write_text(_tpe_line(0, 100, [1.0] * 100) + _tpe_line(1, 400, [1.0] * 400)
                                               + _tpe_line(2, None, [1.0] * 400))
    ran = []
    monkeypatch.setattr(replay_experiment, "CANDIDATES", {})
    # Threads, so that the patched _run below runs in this process.
    monkeypatch.setattr(replay_experiment, "_pool", replay_experiment.concurrent.futures.ThreadPoolExecutor)
    monkeypatch.setattr(replay_experiment, "_run", lambda path, kind, name, seed, evaluations: ran.append(
        (name, seed, evaluations)) or {"sampler": name, "seed": seed, "evaluations": evaluations, "best_ms": []})
    replay_experiment.run_replays([space], tmp_path, seeds=4, long_seeds=4, workers=1)
    assert sorted(ran) == [("random", 0, 400), ("random", 1, 400), ("random", 2, 400), ("random", 3, 400),
                           ("tpe", 0, 400), ("tpe", 3, 400)]



def test_the_sampler_ships_the_default_that_leave_one_space_out_picked():
    """summary.json records the settings each candidate ran with (in the capitals of the time)."""
    summary = Path(__file__).resolve().parents[1] / "bench" / "results" / "search_efficiency" / "summary.json"
    recorded = json.loads(summary.read_text())
    shipped = recorded["selection"]["shipped"]
    ran = {key.lower(): value for key, value in recorded["candidates"][shipped].items()}
    assert Options(**ran) == Options() == Options(**replay_experiment.CANDIDATES[shipped]), shipped
