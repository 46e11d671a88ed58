"""The locks that the workers of one study share, for their claims and for a journal's appends
(storage.py): each is released when the process or database session holding it dies, and other
databases get none."""
import contextlib
import hashlib
from pathlib import Path

from . import disk


class FileLock(disk.FileLock):
    """An exclusive fcntl lock (disk.FileLock) on a file beside the study's journal or SQLite file.
    The kernel releases it when its process dies, so a worker killed while holding it blocks no one
    (Optuna's default symlink lock for journals is broken only after 30 s). It also serves as the
    journal's append lock (acquire and release), on a file of its own (.flock) so that it never
    meets the symlink lock of a tool opening the journal with Optuna's defaults."""

    def held(self, study_name: str) -> "FileLock":
        """This lock, for a with block: its file is the study's own."""
        return self


class AdvisoryLock:
    """A PostgreSQL session advisory lock keyed by the study's name; the server drops it if the
    worker dies while holding it."""

    def __init__(self, engine):
        self.engine = engine

    @contextlib.contextmanager
    def held(self, study_name: str):
        from sqlalchemy import text

        key = int.from_bytes(hashlib.sha256(f"tuner:{study_name}".encode()).digest()[:8], "big", signed=True)
        with self.engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})


class ReadOnlyLock:
    """The append lock of a journal this process may not write, opened to be read: taking it is
    refused in one line, so that no write is tried."""

    def __init__(self, path: Path):
        self.path = path

    def acquire(self) -> bool:
        raise PermissionError(f"{self.path} may not be written by this process; it was opened to be read")

    def release(self) -> None:
        pass


class NoLock:
    """Other databases: claims are checked without a lock, so two workers that claim the same
    configuration in the same instant may both measure it."""

    @contextlib.contextmanager
    def held(self, study_name: str):
        yield
