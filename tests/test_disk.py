"""disk.py's atomic write: a power loss after it leaves the new file, not the old one; its scratch
folders: none that a killed process left stays for good."""
import errno
import os
import signal
import time

import pytest

from tuner import disk


def test_an_atomic_write_fsyncs_the_file_before_its_rename_and_the_folder_after(tmp_path, monkeypatch):
    """The rename is an entry in the folder: without the folder's fsync a power loss may undo it."""
    folder, synced, fsync = tmp_path.resolve(), [], os.fsync
    path = folder / "x.json"

    def recording(descriptor):
        synced.append((os.readlink(f"/proc/self/fd/{descriptor}"), path.exists()))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording)
    descriptors = set(os.listdir("/proc/self/fd"))
    disk.write_atomically(path, b"{}")
    assert [renamed for _, renamed in synced] == [False, True]
    assert synced[0][0].startswith(f"{path}.") and synced[1][0] == str(folder)
    assert path.read_bytes() == b"{}" and set(os.listdir("/proc/self/fd")) == descriptors  # the folder's is closed


@pytest.mark.parametrize("failure", [errno.EINVAL, errno.ENOTSUP, errno.EIO])
def test_a_folder_whose_file_system_cannot_fsync_it_still_takes_the_write(tmp_path, monkeypatch, failure):
    """Some file systems refuse to fsync a folder: the rename is done, so the write stands; an I/O
    error is still one."""
    fsync = os.fsync

    def folders_fail(descriptor):
        if os.path.isdir(f"/proc/self/fd/{descriptor}"):
            raise OSError(failure, os.strerror(failure))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", folders_fail)
    path = tmp_path / "x.json"
    if failure == errno.EIO:
        with pytest.raises(OSError, match=os.strerror(errno.EIO)):
            disk.write_atomically(path, b"{}")
    else:
        disk.write_atomically(path, b"{}")
    assert path.read_bytes() == b"{}"


def test_a_scratch_folder_is_removed_after_use_and_one_a_killed_process_left_once_stale(tmp_path):
    """A process killed in its with block leaves its folder; the next one made there removes it once
    untouched for a day, and leaves those of processes at work (younger) alone."""
    root = tmp_path / "scratch"
    with disk.scratch_folder(root) as left:
        (left / "kernel.cubin").write_bytes(b"x")
    assert not left.exists() and root.stat().st_mode & 0o777 == 0o700
    stale, at_work = root / "tmpk1ll3d", root / "tmpw0rk1ng"
    for folder in (stale, at_work):
        folder.mkdir()
        (folder / "kernel.ptx").write_text("")
    day_and_more = time.time() - disk.STALE_SCRATCH_SECONDS - 60
    os.utime(stale, (day_and_more, day_and_more))
    with disk.scratch_folder(root) as folder:
        assert folder.parent == root and folder.is_dir()
        assert not stale.exists() and at_work.is_dir()
    assert sorted(root.iterdir()) == [at_work]


def test_a_folder_where_a_file_is_read_is_not_a_regular_file_and_left_closed(tmp_path):
    """A folder at a record's path: the error says what it is (not a descriptor's number), and keeps no descriptor."""
    descriptors = set(os.listdir("/proc/self/fd"))
    with pytest.raises(disk.NotARegularFile, match="not a regular file"):
        disk.read_regular_file(tmp_path, 100)
    assert set(os.listdir("/proc/self/fd")) == descriptors


@pytest.mark.parametrize("planted, said", [
    ("link to a file", "a symbolic link"), ("dangling link", "a symbolic link"), ("folder", "a folder"),
    ("FIFO someone reads", "a FIFO"), ("FIFO no one reads", "a FIFO")])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_never_followed_or_waited_on(tmp_path, planted, said):
    """A link's target is neither made nor opened, and a FIFO cannot block the locker: one line says what to remove."""
    lock, target = tmp_path / "record.lock", tmp_path / "elsewhere"
    if planted == "link to a file":
        target.write_text("kept")
    if "link" in planted:
        lock.symlink_to(target)
    elif planted == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    descriptors = set(os.listdir("/proc/self/fd"))
    reader = os.open(lock, os.O_RDONLY | os.O_NONBLOCK) if planted == "FIFO someone reads" else None

    def blocked(*_):
        raise TimeoutError("the lock waited on a FIFO")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(5)
    try:
        with pytest.raises(disk.NotALockFile) as refused:
            disk.FileLock(lock).acquire()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if reader is not None:
            os.close(reader)
    assert str(refused.value) == f"{lock} is {said} where tuner keeps a lock file; remove it, and tuner makes the " \
                                 "lock file again"
    assert set(os.listdir("/proc/self/fd")) == descriptors
    assert (target.read_text() == "kept") if planted == "link to a file" else not target.exists()


@pytest.mark.parametrize("write", [disk.write_atomically, disk.write_output])
def test_a_folder_where_a_file_is_written_is_named_not_the_temporary_file(tmp_path, write):
    """os.replace names the temporary file first; the error names the path and what to do, and leaves nothing."""
    (tmp_path / "record.json").mkdir()
    with pytest.raises(IsADirectoryError) as refused:
        write(tmp_path / "record.json", b"{}")
    assert str(refused.value) == f"[Errno {errno.EISDIR}] a folder is where a file goes; move it away: " \
                                 f"'{tmp_path / 'record.json'}'"
    assert os.listdir(tmp_path) == ["record.json"]
