"""Files written and read safely: under an exclusive lock, in one rename between the fsyncs of the
file and of its folder, without blocking on a FIFO, in folders only their user can write. Records,
journals, kernel files and ceilings are written through these, a report's files in one rename
too, and a study's workers share these locks (locks.FileLock); records, recorded spaces and
ceilings are read through them. Scratch folders are removed after use, and those of processes
killed while using them once stale."""
import contextlib
import errno
import fcntl
import glob
import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path

# A scratch folder untouched this long was left by a process killed while it used one: no compile takes a day.
STALE_SCRATCH_SECONDS = 24 * 3600


# (environment variable, its value with ~ expanded) -> the absolute path it named where first used
_settings: dict[tuple[str, str], Path] = {}


def user_path(given: str | os.PathLike, setting: str = "") -> Path:
    """A path as a user wrote it (in the environment variable `setting`, if one), made absolute,
    with a leading ~ expanded as a shell would (a shell leaves it in `--cache-dir=~/x`, and
    environment files leave it too). A variable's relative value is taken from the working directory
    where the process first uses it, so that a later os.chdir does not move the cache or the kernel
    files. ValueError for a ~user that names no user here, which would otherwise be taken as a
    folder of that name in the current directory, and for a variable's value that starts or ends
    with whitespace (an environment file's stray space), which would name another folder."""
    stray = setting and padded(str(given))
    if stray:
        raise ValueError(f"{setting}={str(given)!r} {stray}, or unset {setting}")
    expanded = os.path.expanduser(given)
    if str(expanded).startswith("~"):
        raise ValueError(f"{setting + '=' if setting else ''}{given}: {str(expanded).split(os.sep)[0]} names no "
                         "user on this machine; give the path in full")
    if setting:
        return _settings.setdefault((setting, expanded), Path(expanded).absolute())
    return Path(expanded).absolute()


def padded(value: str, what: str = "path") -> str:
    """What is wrong with an environment variable's `value` that is blank or starts or ends with
    whitespace, as an environment file's stray space leaves it, and what to give instead (a `what`);
    "" if nothing is, or if it is empty (unset). Taken as it is, it would name another file or
    folder than the one meant."""
    if value and not value.strip():
        return f"is blank: give a {what}"
    if value != value.strip():
        return f"starts or ends with whitespace, which would be part of the name: give the {what} alone"
    return ""


def closed_folder(path: Path) -> Path | None:
    """The first folder on the way to `path` that this user may not enter, if any: behind it, no
    name can even be looked up."""
    return next((folder for folder in reversed(path.parents) if not os.access(folder, os.X_OK)), None)


class NotARegularFile(OSError):
    """A FIFO, a device or a folder where a file was to be read."""


def make_dirs(directory: Path) -> None:
    """Create `directory` and each missing folder above it with mode 700, whatever the umask (a
    folder of 775 would make the kernel directory below it unsafe: kernel.private_dir); a file
    where one of them should be is named in a NotADirectoryError."""
    if directory.is_dir():  # the common case, at every acquire of a lock beside a study's journal
        return
    for folder in [*reversed(directory.parents), directory]:
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
        elif not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is where a folder is needed; move it away", str(folder))


class NotALockFile(OSError):
    """A symbolic link, a FIFO, a device or a folder where a lock file goes; the message says what to do."""


# Opened for writing (NFS emulates an exclusive flock with a write lock), never through a symbolic
# link (whose target, made where it points, could be any file) and without blocking on a FIFO.
_LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _kind(path: Path) -> str:
    """What is at `path`, in words, for a path where a regular file was wanted."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "not a regular file"
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


class FileLock:
    """An exclusive fcntl lock on the file `path`, created if missing (its folders with make_dirs),
    taken with acquire and release or held for a with block. The kernel releases it when its
    process dies, so a process killed while holding it blocks no one. Anything but a regular file
    at `path` (a symbolic link, a FIFO, a folder) is refused (NotALockFile), never followed or
    waited on."""

    def __init__(self, path: Path):
        self.path = path
        self._descriptor = None

    def acquire(self) -> bool:
        make_dirs(self.path.parent)
        descriptor = self._open()
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except BaseException:
            os.close(descriptor)
            raise
        self._descriptor = descriptor
        return True

    def _open(self) -> int:
        """A descriptor of the lock file; NotALockFile for anything but a regular file at its path."""
        try:
            descriptor = os.open(self.path, _LOCK_FLAGS, 0o666)
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link; a FIFO no one reads; a folder
                raise
        else:
            if stat.S_ISREG(os.fstat(descriptor).st_mode):
                return descriptor
            os.close(descriptor)  # a FIFO someone reads, a device
        raise NotALockFile(f"{self.path} is {_kind(self.path)} where tuner keeps a lock file; remove it, and tuner "
                           "makes the lock file again")

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exception) -> None:
        self.release()


def locked(path: Path) -> FileLock:
    """An exclusive lock on `path`'s companion .lock file, for a with block."""
    return FileLock(path.with_suffix(".lock"))


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files (`<name>.*.tmp`) left beside `path` by writers killed before their
    rename. The caller holds the lock that every writer of `path` holds while its temporary file
    exists, so none of them is in use."""
    for stale in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):
        stale.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_folder(directory: Path):
    """A new folder in `directory` (created with make_dirs) for a with block, removed after it. The
    folders there that processes killed while using them left, untouched for STALE_SCRATCH_SECONDS,
    are removed first; those of processes at work are younger."""
    make_dirs(directory)
    for entry in directory.iterdir():
        with contextlib.suppress(OSError):  # gone already, or not a folder: left as it is
            if time.time() - entry.lstat().st_mtime > STALE_SCRATCH_SECONDS:
                shutil.rmtree(entry)
    folder = Path(tempfile.mkdtemp(dir=directory))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_atomically(path: Path, content: bytes, keep_mode: bool = False) -> None:
    """Replace `path` with `content` in one rename after an fsync, so that a reader sees the old file
    or the new one whole; the folder is fsynced after the rename, so that a power loss cannot undo it.
    The file is created with mode 600 or, with `keep_mode`, the mode (its owner's reading and writing
    added) and, where allowed, the owner of the file it replaces. On failure no temporary file is
    left. The caller holds the lock that every writer of `path` takes, so the temporary files of
    writers killed before their rename are removed first."""
    remove_stale_temporaries(path)
    info = path.stat() if keep_mode else None
    _replace(path, content, 0o600, info)


def write_output(path: Path, content: bytes) -> None:
    """Replace `path`, a file the user asked for (a report's page or figure), with `content` in one
    rename, as write_atomically does, the new file's mode being what open() gives one (666 less the
    umask): a symbolic link at `path` is replaced, its target left as it was, and a FIFO there is
    not waited on. No lock is taken, so a writer killed before its rename leaves its temporary file
    (`<name>.*.tmp`) beside `path`."""
    _replace(path, content, 0o666, None)


def _replace(path: Path, content: bytes, mode: int, info: os.stat_result | None) -> None:
    """Write `content` to a new file beside `path`, created with `mode` less the umask (or, given
    `info`, that file's mode and owner), fsync it and rename it over `path`; a folder at `path` is
    named in an IsADirectoryError."""
    descriptor, temporary = _temporary(path, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        if info:
            os.chmod(temporary, stat.S_IMODE(info.st_mode) | stat.S_IRUSR | stat.S_IWUSR)
            with contextlib.suppress(PermissionError):
                os.chown(temporary, info.st_uid, info.st_gid)
        try:
            os.replace(temporary, path)
        except IsADirectoryError:  # as os.replace says it, the temporary file named first
            raise IsADirectoryError(errno.EISDIR, "a folder is where a file goes; move it away", str(path)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(path.parent)


def _temporary(path: Path, mode: int) -> tuple[int, Path]:
    """A new file `<name>.<random>.tmp` beside `path`, created with `mode` less the umask (mkstemp's
    are 600 whatever the umask) and never through a symbolic link, and its descriptor."""
    for _ in range(100):
        temporary = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
        with contextlib.suppress(FileExistsError):
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), temporary
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(path))


def _sync_folder(folder: Path) -> None:
    """fsync `folder`, so that a rename in it survives a power loss; best effort where its file
    system cannot (EINVAL, ENOTSUP) or it cannot be opened for reading (EACCES): the rename is done."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


def read_regular_file(path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path`, one more than `limit` so that the
    caller can refuse a larger file. It is opened without blocking, so that a FIFO or a device planted
    there cannot hang the reader: NotARegularFile for one."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # before fdopen, which fails on a folder and leaves it open
        os.close(descriptor)
        raise NotARegularFile("not a regular file")
    with os.fdopen(descriptor, "rb") as file:
        return file.read(limit + 1)
