"""A study's journal survives a torn write, and a --storage that is no journal is refused in one
line, unchanged; a storage URL's password never shows."""
import json
import os
import warnings

import optuna
import pytest

from tuner import journal, storage
from tuner.backends import CUDA
from tuner.cli import main
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.search import Search
from tuner.studies import find_study
from tuner.trials import is_measured

PROBLEM = Problem(8, 8, 8, "float32")


@pytest.fixture(scope="module", autouse=True)
def _made_up_rates():
    """The journal is under test, not the measurements: each variant a search measures takes a rate
    made up from its configuration instead of simulated launches (1 to 7 s each, of the default's
    256 threads or a sampled tile's up to 1,024). What a search writes to its journal is unchanged."""
    from tuner.measure import Measured
    from tuner.record import Measurement

    def measure(runtime, space, problem, config, operands, protocol, directory):
        gflops = 1.0 + config.threads / 1024
        return Measured(Measurement("ok", relative_error=0.0, seconds=problem.flops / gflops / 1e9, spread=0.0,
                                    reps=2, gflops=gflops, clock=runtime.clock))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("tuner.search.measure", measure)
        yield


def _search(tmp_path, storage):
    return Search(open_runtime(CUDA, simulate=True), PROBLEM, root=tmp_path, storage=str(storage))


def _measured(storage, tmp_path) -> int:
    return sum(map(is_measured, _search(tmp_path, storage).study.trials))


@pytest.mark.parametrize("damage", ["a torn tail", "a torn line appended onto"])
def test_a_torn_journal_line_is_moved_aside_and_two_more_searches_succeed(tmp_path, damage):
    storage = tmp_path / "study.journal"
    assert _search(tmp_path, storage).run(trials=1, timeout=None).measured == 1
    whole = storage.read_bytes()
    last = whole.splitlines(keepends=True)[-1]
    torn = last[:len(last) // 2]
    storage.write_bytes(whole + torn + (last if damage == "a torn line appended onto" else b""))
    with pytest.warns(journal.JournalRepairedWarning, match=f"the study journal {storage} had {len(torn)} torn bytes"):
        search = _search(tmp_path, storage)
    assert search.run(trials=1, timeout=None).measured == 1
    assert _search(tmp_path, storage).run(trials=1, timeout=None).measured == 1
    assert _measured(storage, tmp_path) == 3
    (aside,) = tmp_path.glob("study.journal.torn-*")
    assert aside.read_bytes() == torn + b"\n"
    assert all(json.loads(line) for line in storage.read_bytes().splitlines())


def test_a_repair_that_cannot_set_the_torn_bytes_aside_leaves_no_file(tmp_path, monkeypatch):
    """On a full disk each try to repair would leave an empty or partial .torn file behind."""
    from tuner import disk

    path = tmp_path / "study.journal"
    assert _search(tmp_path, path).run(trials=1, timeout=None).measured == 1
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 4, "wor')
    real_fsync = os.fsync

    def full_disk(descriptor):
        if ".torn-" in os.readlink(f"/proc/self/fd/{descriptor}"):  # the file is written, then its blocks lack room
            raise OSError(28, "No space left on device")
        return real_fsync(descriptor)

    monkeypatch.setattr(disk.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        journal.repair(path, str(path))
    assert not list(tmp_path.glob("study.journal.torn-*")) and path.read_bytes().endswith(b'"wor')


@pytest.mark.parametrize("planted", ["a symbolic link", "a FIFO"])
def test_torn_bytes_are_set_aside_in_a_new_file_never_through_one_planted_at_its_name(tmp_path, monkeypatch, planted):
    """The torn bytes' file was opened in place: a symbolic link at its name had them written into
    the file it points to, and a FIFO there hung the repair (and every search) until read."""
    import signal
    from datetime import datetime

    class Stopped(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 1, 1, tzinfo=tz)

    monkeypatch.setattr(journal, "datetime", Stopped)
    path, victim = tmp_path / "study.journal", tmp_path / "victim"
    path.write_bytes(b'{"op_code": 0, "worker_id": "a"}\n{"op_code": 4, "wor')
    aside = tmp_path / "study.journal.torn-20260101T000000000000Z"
    if planted == "a symbolic link":
        victim.write_bytes(b"untouched")
        aside.symlink_to(victim)
    else:
        os.mkfifo(aside)

    def hung(signum, frame):
        raise TimeoutError("the repair waited on the FIFO")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        with pytest.warns(journal.JournalRepairedWarning, match=f"they were moved to {aside},"):
            journal.repair(path, str(path))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert aside.is_file() and not aside.is_symlink() and aside.read_bytes() == b'{"op_code": 4, "wor\n'
    assert planted == "a FIFO" or victim.read_bytes() == b"untouched"
    assert path.read_bytes() == b'{"op_code": 0, "worker_id": "a"}\n'


def test_a_torn_journal_on_a_full_disk_is_still_read(tmp_path, monkeypatch):
    """tuner report needs no room to read a study: a journal it cannot repair is read as it is."""
    path = tmp_path / "study.journal"
    assert _search(tmp_path, path).run(trials=1, timeout=None).measured == 1
    path.write_bytes(path.read_bytes() + b'{"op_code": 4, "wor')

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "repair", full_disk)
    study, _, _ = find_study(tmp_path, str(path), None)
    assert sum(map(is_measured, study.trials)) == 1
    assert path.read_bytes().endswith(b'"wor')


def test_a_file_that_is_no_journal_is_refused_unchanged(tmp_path, capsys):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert main(["search", "--backend", "cuda", "--simulate", "--cache-dir", str(tmp_path), "--storage", str(passwd),
                 "--shape", "8", "8", "8"]) == 2
    error = capsys.readouterr().err
    assert f"{passwd} is not an Optuna journal" in error and error.count("\n") == 1
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/bash\n"


@pytest.mark.parametrize("damage", ["random bytes", "an entry Optuna cannot replay"])
def test_a_damaged_default_journal_is_named_with_what_frees_every_study_of_the_device(tmp_path, capsys, damage):
    """The user gave no file name, and the journal holds every study of the device."""
    search = ["search", "--backend", "cuda", "--simulate", "--cache-dir", str(tmp_path), "--shape", "8", "8", "8",
              "--trials", "1"]
    assert main(search) == 0
    [path] = (tmp_path / "studies").glob("*.journal")
    path.write_bytes(os.urandom(300) if damage == "random bytes" else path.read_bytes() + b'{"op_code": 99}\n')
    capsys.readouterr()
    assert main(search) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tuner search: error: {path} ") and err.count("\n") == 1, err
    assert err.endswith("; move it aside or restore it from a copy (it holds every study of this device); tuner search "
                        "--storage PATH keeps a study elsewhere\n"), err
    assert "file name" not in err and "Assert" not in err and "reach" not in err


def test_a_foreign_line_inside_a_journal_is_refused_unchanged(tmp_path):
    storage = tmp_path / "study.journal"
    _search(tmp_path, storage)
    content = storage.read_bytes() + b"some other program's line\n"
    storage.write_bytes(content)
    with pytest.raises(journal.JournalError, match="holds a line that is no Optuna journal entry"):
        _search(tmp_path, storage)
    assert storage.read_bytes() == content


def test_a_journal_in_a_missing_directory_is_refused_not_created(tmp_path, capsys):
    storage = tmp_path / "no" / "such" / "x.journal"
    assert main(["search", "--backend", "cuda", "--simulate", "--cache-dir", str(tmp_path), "--storage", str(storage),
                 "--shape", "8", "8", "8"]) == 2
    assert f"{storage}: its directory {storage.parent} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("url, shown", [
    ("postgresql://tuner:s3cret-word@127.0.0.1:1/tuner", "postgresql://tuner:***@127.0.0.1:1/tuner"),
    ("postgresql://tuner@127.0.0.1:1/tuner?sslmode=disable&password=s3cret-word",  # libpq's query parameter
     "postgresql://tuner@127.0.0.1:1/tuner?sslmode=disable&password=***")])
def test_a_storage_password_never_shows(tmp_path, capsys, url, shown):
    assert main(["search", "--backend", "cuda", "--simulate", "--cache-dir", str(tmp_path), "--storage", url,
                 "--shape", "8", "8", "8"]) == 2
    error = capsys.readouterr().err
    assert "cannot be opened" in error and shown in error
    assert "s3cret" not in error


@pytest.mark.parametrize("url, shown", [
    ("postgresql://tuner:pa/ss#word@h/tuner", "postgresql://tuner:***@h/tuner"),  # SQLAlchemy reads up to the @
    ("postgresql://tuner:p%40ssword@h/tuner", "postgresql://tuner:***@h/tuner"),
    ("sqlite:///x.db?password=ab#cdefg", "sqlite:///x.db?password=***"),  # SQLAlchemy passes the # on
    ("mysql+pymysql://tuner@h/tuner?passwd=s3cret&charset=utf8", "mysql+pymysql://tuner@h/tuner?passwd=***&charset=utf8"),
    ("postgresql://u:1@127.0.0.1:1/tuner", "postgresql://u:***@127.0.0.1:1/tuner"),
    ("postgresql://u:@h/tuner", "postgresql://u:@h/tuner"),
    ("postgresql://tuner:p@ssword@h/tuner", "postgresql://tuner:***@h/tuner"),  # an @ left unencoded
    ("postgresql://tuner@h/tuner?password=pa+ssword", "postgresql://tuner@h/tuner?password=***")])
def test_each_form_of_a_storage_password_is_hidden_and_nothing_else(url, shown):
    """The password goes wherever the URL shows, in every form SQLAlchemy reads; elsewhere in a
    message too (percent-decoded as well), unless so short that hiding it would garble the text."""
    from tuner.storage import redacted

    assert redacted(url) == shown
    assert redacted(f"{url} cannot be opened: FATAL for {url}", url) == f"{shown} cannot be opened: FATAL for {shown}"
    if "p%40ssword" in url:
        assert redacted("password authentication failed: p@ssword", url) == "password authentication failed: ***"
    if "pa+ssword" in url:
        assert redacted("password authentication failed: pa ssword", url) == "password authentication failed: ***"
    if "u:1@" in url:
        assert redacted("connection to 127.0.0.1 port 1 refused", url) == "connection to 127.0.0.1 port 1 refused"


def test_a_storage_error_holds_no_password_in_its_repr_or_pickle():
    """What a traceback, a log's %r or a pickle of the error shows is redacted too, not only its message."""
    import pickle

    from tuner.storage import StorageError

    error = StorageError("postgresql://tuner:s3cret-word@h/tuner", " cannot be opened: s3cret-word refused")
    assert str(error) == "--storage 'postgresql://tuner:***@h/tuner' cannot be opened: *** refused"
    for shown in (repr(error), repr(error.args), pickle.dumps(error), str(pickle.loads(pickle.dumps(error)))):
        assert "s3cret" not in str(shown)


def test_a_whole_last_entry_that_lost_its_newline_is_kept_and_ended(tmp_path):
    storage = tmp_path / "study.journal"
    assert _search(tmp_path, storage).run(trials=1, timeout=None).measured == 1
    storage.write_bytes(storage.read_bytes().rstrip(b"\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", journal.JournalRepairedWarning)  # nothing was torn: nothing to say
        assert _search(tmp_path, storage).run(trials=1, timeout=None).measured == 1
    assert _search(tmp_path, storage).run(trials=1, timeout=None).measured == 1
    assert _measured(storage, tmp_path) == 3 and not list(tmp_path.glob("study.journal.torn-*"))


def test_a_symlinked_journal_is_repaired_where_it_lives_with_its_mode(tmp_path):
    real, link = tmp_path / "real.journal", tmp_path / "link.journal"
    assert _search(tmp_path, real).run(trials=1, timeout=None).measured == 1
    real.chmod(0o644)
    link.symlink_to(real)
    real.write_bytes(real.read_bytes() + b'{"op_code":5,"wor')
    with pytest.warns(journal.JournalRepairedWarning):
        assert _search(tmp_path, link).run(trials=1, timeout=None).measured == 1
    assert link.is_symlink() and real.stat().st_mode & 0o777 == 0o644
    assert _measured(real, tmp_path) == 2


def test_a_journal_reached_by_two_names_has_one_append_lock_and_one_claims_lock(tmp_path):
    real, link = tmp_path / "real.journal", tmp_path / "link.journal"
    link.symlink_to(real)
    by_name, by_link = (storage.SharedStorage(str(path), tmp_path / "unused.journal", 60) for path in (real, link))
    assert by_name.lock.path == by_link.lock.path == tmp_path / "real.journal.claims.lock"
    assert [lock.name for lock in tmp_path.glob("*.flock")] == ["real.journal.flock"]  # taken by both repairs


def test_the_folders_a_journals_locks_create_are_private_under_a_permissive_umask(tmp_path):
    """A journal reached through a symbolic link into missing folders gets them from its locks,
    which make them with mode 700 (disk.make_dirs), not the 775 of umask 002 that would let the
    group swap the journal and its locks."""
    link, folder = tmp_path / "link.journal", tmp_path / "new" / "folder"
    link.symlink_to(folder / "real.journal")
    previous = os.umask(0o002)
    try:
        storage.SharedStorage(str(link), tmp_path / "unused.journal", 60)
    finally:
        os.umask(previous)
    assert (folder / "real.journal.flock").exists()
    assert [oct(path.stat().st_mode & 0o777) for path in (folder.parent, folder)] == ["0o700", "0o700"]


def test_a_journal_that_may_not_be_written_is_read_without_locks_or_writes(tmp_path, monkeypatch, capsys):
    path = tmp_path / "study.journal"
    writable = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    optuna.create_study(study_name="kept", storage=writable).optimize(lambda trial: trial.suggest_float("x", 0, 1), 3)
    before = sorted(tmp_path.iterdir()), path.read_bytes()
    monkeypatch.setattr(storage.os, "access", lambda where, mode: mode != os.W_OK)
    study, _, _ = find_study(tmp_path, str(path), None)
    assert study.study_name == "kept" and len(study.trials) == 3
    assert (sorted(tmp_path.iterdir()), path.read_bytes()) == before
    with pytest.raises(PermissionError, match="may not be written by this process"):
        study.set_user_attr("note", 1)
    # A tear inside it cannot be repaired here: refused in one line naming the file, which stays as it was.
    first, rest = path.read_bytes().split(b"\n", 1)
    path.write_bytes(first + b"\n" + b'{"op_code":5,"wor\n' + rest)
    torn = path.read_bytes()
    assert main(["report", "--storage", str(path), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"{path} cannot be read as a study journal" in err and err.count("\n") == 1, err
    assert path.read_bytes() == torn


def test_a_journal_named_like_a_glob_pattern_removes_only_its_own_stale_temporary_files(tmp_path):
    from tuner.disk import remove_stale_temporaries

    own, other = tmp_path / "[a]1.journal.x1.tmp", tmp_path / "a1.journal.x2.tmp"
    own.write_text("left by a killed repair")
    other.write_text("another journal's repair, under its own lock")
    remove_stale_temporaries(tmp_path / "[a]1.journal")
    assert not own.exists() and other.exists()


@pytest.fixture(scope="module")
def one_measured(tmp_path_factory) -> bytes:
    """The journal of a study that measured one variant."""
    root = tmp_path_factory.mktemp("one")
    assert _search(root, root / "study.journal").run(trials=1, timeout=None).measured == 1
    return (root / "study.journal").read_bytes()


@pytest.mark.parametrize("where", ["at the end", "before an entry appended after them", "alone in the file",
                                   "inside a torn entry", "before a torn entry"])
def test_nul_bytes_a_power_loss_left_are_moved_aside_and_the_study_goes_on(tmp_path, one_measured, where):
    """A file system that grew the file but lost the data of a write leaves NUL bytes in its place."""
    storage = tmp_path / "study.journal"
    zeros = b"\0" * 100
    if where == "alone in the file":
        storage.write_bytes(zeros)
    else:
        whole = one_measured
        *kept, last = whole.splitlines(keepends=True)
        if where == "at the end":
            storage.write_bytes(whole + zeros)
        elif where == "before an entry appended after them":
            storage.write_bytes(b"".join(kept) + zeros + last)
        elif where == "inside a torn entry":  # a page of the entry lost, a later one written
            zeros = last[:20] + zeros + last[40:-1]
            storage.write_bytes(whole + zeros)
        else:
            zeros += b'{"op_c'
            storage.write_bytes(whole + zeros)
    with pytest.warns(journal.JournalRepairedWarning, match=f"the study journal {storage} had {len(zeros)} torn bytes"):
        search = _search(tmp_path, storage)
    assert sum(map(is_measured, search.study.trials)) == (0 if where == "alone in the file" else 1)
    assert search.run(trials=1, timeout=None).measured == 1  # and the study goes on
    (aside,) = tmp_path.glob("study.journal.torn-*")
    assert aside.read_bytes() == zeros + b"\n"


def test_garbage_at_the_end_of_a_journal_is_still_refused_unchanged(tmp_path, one_measured):
    storage = tmp_path / "study.journal"
    damaged = one_measured + b"\0\0not a journal entry"
    storage.write_bytes(damaged)
    with pytest.raises(journal.JournalError, match="holds a line that is no Optuna journal entry"):
        _search(tmp_path, storage)
    assert storage.read_bytes() == damaged


def test_a_file_of_nul_bytes_larger_than_a_power_loss_leaves_is_refused_unchanged(tmp_path):
    storage = tmp_path / "study.journal"
    with open(storage, "wb") as file:
        file.truncate(journal.MAX_NULS + 2)
    with pytest.raises(journal.NotAJournal, match="is not an Optuna journal"):
        _search(tmp_path, storage)
    assert storage.stat().st_size == journal.MAX_NULS + 2 and not list(tmp_path.glob("study.journal.torn-*"))


def test_a_journal_that_cannot_be_read_is_named_with_the_reason(tmp_path, capsys, monkeypatch):
    """Not taken for entries Optuna cannot replay."""
    def unreadable(path, lock_obj=None):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(optuna.storages.journal, "JournalFileBackend", unreadable)
    storage = tmp_path / "study.journal"
    assert main(["search", "--backend", "cuda", "--simulate", "--cache-dir", str(tmp_path), "--storage", str(storage),
                 "--shape", "8", "8", "8", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"tuner search: error: {storage} cannot be read as a study journal: Permission denied; make it "
                   "readable (its permissions, its disk), or give another file name\n"), err
