"""Where a study lives, and how several workers share it without losing or repeating work.

A worker is one `tuner search` process on the study: several on one host (`--devices`, or the same
command started twice) through the default journal file, or on many hosts through a database URL
(PostgreSQL). Two mechanisms make them one search:
- a dead worker's running trial is found (heartbeats in a database; the process id on this host)
  and queued again, with Optuna's retry callback;
- before measuring, a worker claims its configuration under a lock shared by all workers (a file
  lock beside a journal or SQLite file, a PostgreSQL advisory lock; see locks.py): it measures
  only if no other worker has measured or claimed the same configuration, and only while the
  study's budget has room. The claim returns the worker's next step, a trials.Decision.
"""
import contextlib
import copy
import errno
import itertools
import os
import random
import re
import socket
import sqlite3
import threading
import time
import urllib.parse
import warnings
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from . import journal
from .disk import make_dirs
from .formats import printable
from .locks import AdvisoryLock, FileLock, NoLock, ReadOnlyLock
from .trials import MEASURE, RECORDED, SPENT, Decision, Kind, config_key, is_measured

# A database worker records a heartbeat this often; one silent for GRACE_INTERVALS heartbeats is
# dead, and its trial is failed and queued again.
HEARTBEAT_SECONDS = 10
GRACE_INTERVALS = 4
# A trial is signed by its worker right after it is asked for; one still unsigned after this long
# belongs to a process killed in between.
ORPHAN_GRACE_SECONDS = 5
# A trial whose worker died is queued again this many times; after one more death it is not, since it
# may be what kills them, nor is its configuration queued afresh by a later run (SharedStorage.enqueue).
MAX_RETRIES = 2
# How often a worker waiting on another one looks at the study again.
POLL_SECONDS = 0.5
# After how long a wait on other workers' claims a worker says whose claims it waits for.
WAIT_NOTICE_SECONDS = 60

# Tries at opening a database whose schema other workers are creating at the same moment.
SCHEMA_ATTEMPTS = 10

# A storage URL's passwords: after its user name (scheme://user:password@host, up to the last @ before a query,
# which hides more than SQLAlchemy reads where a password holds an unencoded @), or a query parameter the drivers
# take (libpq's ?password= and ?sslpassword=, MySQL's ?passwd=).
_CREDENTIALS = re.compile(r"://[^:/@]*:([^?]*)@|[?&](?:ssl)?passw(?:or)?d=([^&]*)")
# A password shorter than this is hidden in the URL alone: replaced wherever else it occurs in a message, it
# would garble the text (a password "1" in an address) and hide little.
_SHORTEST_HIDDEN_ELSEWHERE = 4


def worker_name() -> str:
    """This process as a trial's `worker` attribute: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def started(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (from /proc), as a trial's
    `worker_started` attribute: with the pid, it tells a worker from a later process that was
    given the same pid (a restarted container's, say). "" where it cannot be read."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat_line.rpartition(")")[2].split()  # the command, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _say_whose(claimed: list) -> bool:
    """Warn, where some of the `claimed` trials are other hosts' workers' (which cannot be seen to
    die without heartbeats), whose claims a worker has waited on; whether it did."""
    holders = sorted({worker for worker in (other.user_attrs.get("worker", "") for other in claimed)
                      if worker.partition(":")[0] != socket.gethostname()})
    if holders:
        warnings.warn(f"tuner: waiting {WAIT_NOTICE_SECONDS} s so far for the trials claimed by {', '.join(holders)}; "
                      "a worker on another host, or in a container since gone, cannot be seen from here: if it is "
                      "gone, stop this search and use a database --storage, whose heartbeats free a dead worker's "
                      "trials", stacklevel=3)
    return bool(holders)


def retry(study: optuna.Study, trial) -> None:
    """Queue a dead worker's trial again (Optuna's RetryHeartbeatStaleTrialCallback, which keeps
    the retry history), with the worker's attributes dropped so that the retry starts clean (whether
    it came from a record is kept)."""
    clean = copy.deepcopy(trial)
    clean.user_attrs = {"queued": config_key(trial.params)}
    if trial.user_attrs.get(RECORDED):
        clean.user_attrs[RECORDED] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)(study, clean)


# Why a configuration in `killers` is never measured again. What killed the worker is not known: its
# death is found by another process (its pid gone, its heartbeat silent), which gets no exit status.
KILLS_ITS_WORKER = (f"its worker died while measuring it {MAX_RETRIES + 1} times or more (a crash, a hang that was "
                    "killed, or a kill from outside such as kill -9 or the OOM killer, which tuner cannot tell apart)")


def killers(study: optuna.Study) -> dict[str, list[str]]:
    """The configurations whose worker died more than MAX_RETRIES times while measuring them, each with
    those workers (host:pid, for the user to look up in the kernel's log): the configurations claimed
    by failed trials (the variant being measured) that were not given back (by Ctrl-C or SIGTERM).
    Neither queued again nor measured when the sampler suggests one: else every run would die on it."""
    deaths = defaultdict(list)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        claim, worker = trial.user_attrs.get("claim"), trial.user_attrs.get("worker")
        if isinstance(claim, str) and trial.user_attrs.get("kind") != Kind.SURPLUS:  # a journal may hold anything
            deaths[claim].append(printable(worker) if isinstance(worker, str) else "unknown")
    return {key: workers for key, workers in deaths.items() if len(workers) > MAX_RETRIES}


def redacted(text: str, url: str | None = None) -> str:
    """`text` (a storage URL, or a message about the storage `url`) fit for a message, a record or
    a log: the URL's passwords (_CREDENTIALS) replaced by *** where the URL occurs, and elsewhere,
    as written or decoded, unless shorter than _SHORTEST_HIDDEN_ELSEWHERE."""
    url = text if url is None else url
    spans = [match.span(1 if match.group(1) is not None else 2) for match in _CREDENTIALS.finditer(url)]
    shown = url
    for start, end in reversed([(start, end) for start, end in spans if end > start]):
        shown = f"{shown[:start]}***{shown[end:]}"
    text = text.replace(url, shown)
    for start, end in spans:
        written = url[start:end]
        for password in {written, urllib.parse.unquote(written), urllib.parse.unquote_plus(written)}:
            if len(password) >= _SHORTEST_HIDDEN_ELSEWHERE:
                text = text.replace(password, "***")
    return text


class StorageError(ValueError):
    """A storage the user named that cannot be used. The message names it as the command line's
    --storage URL; `named` names it as TUNER_STORAGE=URL where it came from that variable."""

    def __init__(self, url: str, problem: str):
        """`problem`: what the message says after the storage's name. Only their redacted forms are
        kept, so that no repr, traceback or pickle of the error holds a password."""
        self.shown, self.problem = redacted(url), redacted(problem, url)
        super().__init__(self.shown, self.problem)

    def named(self, from_environment: bool = False) -> str:
        """The message, the storage named as the user gave it, its passwords redacted."""
        return f"{'TUNER_STORAGE=' if from_environment else '--storage '}{self.shown!r}{self.problem}"

    def __str__(self) -> str:
        return self.named()


def _claims_lock(path: Path) -> Path:
    """The lock file beside a journal or an SQLite database under which workers claim configurations."""
    return path.with_name(path.name + ".claims.lock")


def check_database_file(url: str) -> None:
    """Refuse, with what to do, the SQLite database of a worker's storage `url` that it could not
    write: one in a missing folder, or in one this user may not write (SQLite keeps its rollback
    journal beside the file, and the workers their claim lock), a folder, or a read-only file or
    claim lock. Other storages pass."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url) if "://" in url else None
    except ArgumentError:
        return  # opening it says what is wrong
    if parsed is None or parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database)
    if not path.parent.is_dir():
        raise StorageError(url, f": its directory {path.parent} does not exist; create it, or give a database path "
                           "in an existing directory")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StorageError(url, f": this user may not write in its directory {path.parent}, where SQLite and the "
                           "workers keep their lock files; make it writable, or give a database path in a folder you "
                           "can write")
    if path.is_dir():
        raise StorageError(url, f": {path} is a folder; give the path of a database file (a missing one is created)")
    for file in (path, _claims_lock(path)):  # the workers' claim lock may be another's
        if file.exists() and not os.access(file, os.W_OK):
            raise StorageError(url, f": {file} is read-only for this user; make it writable (chmod u+w), or give "
                               "another database")


def open_storage(url: str, default: bool = False):
    """The storage at `url` (any Optuna URL, or a journal file path; `default`: a device's journal,
    which the user did not name), opened as workers open it; a
    journal that this process may not write (a read-only file, folder or file system) is opened
    for reading only, unlocked and unrepaired, as Optuna reads one that another process appends to,
    and so is a torn journal on a full disk, where it cannot be repaired."""
    path = Path(url)
    target = path.resolve()  # a symbolic link's target is the journal a repair rewrites
    if "://" not in url and path.is_file() and not (os.access(target, os.W_OK) and os.access(target.parent, os.W_OK)):
        journal.check(path, url, default)
        return _journal_storage(path, ReadOnlyLock(path), default)
    try:
        return SharedStorage(None if default else url, path).storage
    except OSError as error:
        if error.errno != errno.ENOSPC or "://" in url or not path.is_file():
            raise
        return _journal_storage(path, ReadOnlyLock(path), default)  # a full disk: read as it is, torn tail skipped


def _journal_storage(path: Path, lock, default: bool = False) -> optuna.storages.JournalStorage:
    """Optuna's storage of the journal at `path`, appending under `lock`; JournalError naming the
    file if it cannot be read or Optuna cannot replay its entries (`default` as in journal.check)."""
    try:
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path), lock_obj=lock))
    except OSError as error:
        raise journal.JournalError(f"{path} cannot be read as a study journal: {error.strerror or error}; make it "
                                   "readable (its permissions, its disk), or "
                                   + journal.what_to_do(default, "give another file name")) from None
    except Exception:  # Optuna's errors for entries it cannot replay: its internal assertions and KeyErrors
        raise journal.JournalError(f"{path} cannot be read as a study journal: Optuna cannot replay its entries; "
                                   + journal.what_to_do(default, "restore it from a copy, or give a new file name")
                                   ) from None


def _rdb_storage(url: str, heartbeat: int) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage with heartbeats. Opening one creates Optuna's schema in a new database,
    and workers started together race to do so (PostgreSQL then refuses all but one with a
    duplicate key, SQLite with a table that already exists): the losers try again, and find the
    schema made."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat, grace_period=GRACE_INTERVALS * heartbeat,
                    heartbeat_stale_trial_callback=retry)
        except (IntegrityError, ProgrammingError, OperationalError) as error:
            raced = not isinstance(error, OperationalError) or "already exists" in str(error.orig)
            if not raced or attempt == SCHEMA_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.05, 0.5))


def _what_to_do(url: str, error: Exception) -> str:
    """What to do about `error`, SQLAlchemy's at opening the database at `url`: for an SQLite file,
    about that file (no database, or locked by another process); else about the URL and the server."""
    failure = getattr(error, "orig", None)  # the driver's error
    if not isinstance(failure, sqlite3.Error):
        return "check the URL, the server and the credentials"
    from sqlalchemy.engine import make_url

    path = make_url(url).database  # SQLAlchemy took the URL to get this far
    if "file is not a database" in str(failure):
        return f"give another path, or remove {path} if it is yours to remove"
    if "database is locked" in str(failure):
        return (f"another process holds {path} locked: wait for it to finish or stop it, then run the command "
                "again")
    return f"check the file {path}, its folder and their permissions"


class SharedStorage:
    """An Optuna storage opened for several workers: its claim lock and its heartbeat."""

    def __init__(self, url: str | None, default: Path, heartbeat: int = HEARTBEAT_SECONDS, pinned: str = ""):
        """`url`: any Optuna storage URL, or a path taken as a journal file; `default`: the journal
        file used without one. A database URL gets heartbeats every `heartbeat` seconds. `pinned`
        (such as CUDA_VISIBLE_DEVICES=1) is recorded on this worker's trials."""
        self.heartbeat, self.pinned = None, pinned
        if url and "://" in url:
            self.storage, self.lock = self._database(url, heartbeat)
        else:
            path = Path(url) if url else default
            if not url:
                make_dirs(path.parent)
            journal.check(path, str(path), not url)
            target = path.resolve()  # the locks of a journal reached by two names (a symbolic link) are one
            append_lock = FileLock(target.with_name(target.name + ".flock"))
            with append_lock.held(str(path)):
                journal.repair(path, str(path), not url)
            self.storage = _journal_storage(path, append_lock, not url)
            self.lock = FileLock(_claims_lock(target))

    def _database(self, url: str, heartbeat: int):
        try:
            storage = _rdb_storage(url, heartbeat)
        except ImportError as error:
            raise StorageError(url, f" needs a database driver that is not installed ({error.__cause__ or error}); "
                               "for PostgreSQL: pip install -e '.[postgres]'") from None
        except Exception as error:  # SQLAlchemy's errors for a bad URL or an unreachable server
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise StorageError(url, f" cannot be opened: {reason}; {_what_to_do(url, error)}") from None
        dialect, database = storage.engine.dialect.name, storage.engine.url.database
        in_memory = database in (None, "", ":memory:") or storage.engine.url.query.get("mode") == "memory"
        if dialect == "sqlite" and in_memory:
            storage.engine.dispose()
            raise StorageError(url, " is a database in memory, and what a search measures there is lost when it ends; "
                               "give a file (sqlite:///PATH), or no storage for the default journal")
        self.heartbeat = heartbeat
        # Optuna warns at every ask that heartbeats are meant for Study.optimize: this worker records them itself.
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        if dialect == "postgresql":
            return storage, AdvisoryLock(storage.engine)
        if dialect == "sqlite":
            return storage, FileLock(_claims_lock(Path(database)))
        return storage, NoLock()

    def grace_seconds(self) -> float:
        """How long a worker may stay silent before its trial is taken as dead."""
        return max(ORPHAN_GRACE_SECONDS, GRACE_INTERVALS * self.heartbeat) if self.heartbeat else ORPHAN_GRACE_SECONDS

    def sign(self, trial) -> None:
        """Mark `trial`, just asked for, as this worker's, with a first heartbeat."""
        trial.set_user_attr("worker", worker_name())
        trial.set_user_attr("worker_started", started(os.getpid()))
        if self.pinned:
            trial.set_user_attr("pinned", self.pinned)
        self.beat(trial)

    def beat(self, trial) -> None:
        if self.heartbeat:
            self.storage.record_heartbeat(trial._trial_id)  # Optuna's ask-and-tell API has no heartbeat of its own

    @contextlib.contextmanager
    def beating(self, running):
        """A thread recording a heartbeat for each trial of `running()`, those in flight, for the block."""
        if not self.heartbeat:
            yield
            return
        stop = threading.Event()

        def pulse():
            while not stop.wait(self.heartbeat):
                for trial in running():
                    with contextlib.suppress(Exception):  # a lost beat is retried next interval
                        self.beat(trial)

        thread = threading.Thread(target=pulse, name="tuner-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def recover(self, study: optuna.Study) -> None:
        """Fail and queue again the running trials of dead workers."""
        with self.lock.held(study.study_name):
            self._recover(study)

    def _recover(self, study: optuna.Study) -> None:
        if self.heartbeat:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        host, now = socket.gethostname(), datetime.now()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker_host, _, pid = trial.user_attrs.get("worker", "").partition(":")
            # Without heartbeats (a journal file, on one host) a worker is dead when its process is
            # gone, or when its pid now belongs to a process started at another time.
            dead = not self.heartbeat and worker_host == host and pid.isdigit() and not self._running(
                int(pid), trial.user_attrs.get("worker_started", ""))
            unsigned = not worker_host and (now - trial.datetime_start).total_seconds() > self.grace_seconds()
            if dead or unsigned:
                study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
                if trial.params:
                    retry(study, trial)

    @staticmethod
    def _running(pid: int, when: str) -> bool:
        """Whether the worker process `pid`, started at `when` ("" if unknown), still runs."""
        return _alive(pid) and (not when or started(pid) in (when, ""))

    def enqueue(self, study: optuna.Study, configs: list[dict], answers=is_measured,
                attrs: dict | None = None, running_too: bool = False) -> list[dict]:
        """Queue the configurations (parameters) the study has neither measured, claimed nor queued,
        each with the user attributes `attrs` (given too to one already waiting in the queue); those
        queued. Under the workers' lock, so that workers starting together queue each one once. Only
        a measured trial that `answers` for its configuration (as in claim) has measured it. With
        `running_too`, one that another worker holds is queued too: this worker's claim then waits
        for that measurement and answers from it. One that its worker died measuring each time (killers)
        is not queued, with a warning."""
        held = () if running_too else (TrialState.RUNNING,)
        with self.lock.held(study.study_name):
            fatal = killers(study)
            trials = study.get_trials(deepcopy=False, states=(TrialState.WAITING, *held, TrialState.COMPLETE))
            taken = {config_key(trial.params) if trial.state == TrialState.COMPLETE else
                     trial.user_attrs.get("queued") or trial.user_attrs.get("claim")
                     for trial in trials if trial.state != TrialState.COMPLETE or answers(trial)}
            waiting = defaultdict(list)  # key -> its waiting trials (a dead worker's may be queued again beside it)
            for trial in trials:
                if trial.state == TrialState.WAITING:
                    waiting[trial.user_attrs.get("queued")].append(trial)
            queued = []
            for params in configs:
                key = config_key(params)
                if key in waiting:
                    for trial, (name, value) in itertools.product(waiting[key], (attrs or {}).items()):
                        # a worker may have taken it off the queue and finished it since: nothing to mark
                        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                            self.storage.set_trial_user_attr(trial._trial_id, name, value)
                elif key not in taken and key in fatal:
                    warnings.warn(f"tuner: configuration {key} is not queued again: {KILLS_ITS_WORKER}; the workers "
                                  f"that died: {', '.join(fatal[key])} (the kernel's log, dmesg, names a process the "
                                  "OOM killer ended; a new --study measures it again)", stacklevel=3)
                elif key not in taken:
                    study.enqueue_trial(params, user_attrs={"queued": key, **(attrs or {})})
                    taken.add(key)
                    queued.append(params)
        return queued

    def claim(self, study: optuna.Study, budget: int | None, trial=None, key: str | None = None,
              answers=is_measured) -> Decision:
        """The next step of this worker (a trials.Decision), taken under the workers' lock once the
        trials of dead workers are queued again. For `trial`, about to measure configuration `key`:
        answer it from the trial that measured `key` already (another worker may have); else SPENT
        once the study holds `budget` measured variants; else MEASURE, with its claim written.
        Without a trial: SPENT, or MEASURE when there is room to ask for one. While another live
        worker holds a claim on `key`, or the claims in flight fill the budget, it waits for them.
        Only a measured trial that `answers` for its configuration is taken as having measured it, and
        counted in the budget."""
        if trial is None and budget is None:
            return MEASURE
        mine = trial.number if trial is not None else None
        since, said = time.monotonic(), False
        while True:
            with self.lock.held(study.study_name):
                self._recover(study)
                trials = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.COMPLETE))
                measured = [other for other in trials if answers(other)]
                earlier = next((other for other in measured
                                if other.user_attrs.get("claim", config_key(other.params)) == key), None)
                if earlier is not None:
                    return Decision(earlier)
                if budget is not None and len(measured) >= budget:
                    return SPENT
                claimed = [other for other in trials if other.state == TrialState.RUNNING
                           and other.number != mine and "claim" in other.user_attrs]
                claims = [other.user_attrs["claim"] for other in claimed]
                if key not in claims and (budget is None or len(measured) + len(claims) < budget):
                    if trial is not None:
                        trial.set_user_attr("claim", key)
                    return MEASURE
            if not said and not self.heartbeat and time.monotonic() - since > WAIT_NOTICE_SECONDS:
                said = _say_whose(claimed)
            time.sleep(POLL_SECONDS)
