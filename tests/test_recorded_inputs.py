"""`tuner replay` on files that are no recorded space: one line each, never a hang, a memory
blow-up or a traceback."""
import gzip
import os

import pytest

from tuner import recorded
from tuner.cli import main


def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _nested(tmp_path):
    path = tmp_path / "nested.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    return path


def _huge(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as file:
        file.truncate(recorded.MAX_BYTES + 1)
    return path


def _bomb(tmp_path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b" " * (recorded.MAX_BYTES + 1), compresslevel=1))
    return path


@pytest.mark.parametrize("make, message", [
    (_fifo, "not a regular file"),
    (lambda tmp_path: "/dev/zero", "not a regular file"),
    (_nested, "nested too deeply"),
    (_huge, "too large for a recorded space"),
    (_bomb, "uncompressed, too large for a recorded space"),
], ids=["fifo", "dev-zero", "deep-nesting", "over-the-cap", "gzip-bomb"])
def test_a_file_that_is_no_recorded_space_gets_one_line(tmp_path, capsys, monkeypatch, make, message):
    monkeypatch.setattr(recorded, "MAX_BYTES", 16 << 20)  # the cap's mechanism, without writing a GiB
    path = make(tmp_path)
    assert main(["replay", str(path)]) == 2
    error = capsys.readouterr().err
    assert f"{path}: " in error and message in error and error.count("\n") == 1, error
