"""Child processes that the tests start at once, interrupt, and find."""
import multiprocessing
import os
import pickle
import signal
import traceback

import pytest

NOBODY = 65534  # the unprivileged user and group of Debian and its kin


def answers_ctrl_c() -> None:
    """A Popen preexec_fn: the default SIGINT disposition in the child, whatever the test run's.
    A shell's background job ignores SIGINT, a child inherits that, and Python then installs no
    KeyboardInterrupt handler, so the test's Ctrl-C would go unheard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def running_with(*words: str, without: str | None = None) -> list[int]:
    """The pids of the processes whose command line holds every one of `words` as an argument,
    and not `without` (read from /proc, so Linux only)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                argv = file.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if all(word in argv for word in words) and (without is None or without not in argv):
            found.append(int(entry))
    return found


def run_at_once(target, arguments: list[tuple]) -> None:
    """Run `target(*args, start)` in a spawned process for each `args` in `arguments`, all let go
    together by the Event `start` so that they overlap; each must exit with 0."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [context.Process(target=target, args=(*args, start)) for args in arguments]
    for process in processes:
        process.start()
    start.set()
    try:
        for process in processes:
            process.join(timeout=300)
            assert process.exitcode == 0
    finally:
        for process in processes:
            process.kill()  # one that hangs would outlive the test


def where_permissions_bind(function, *arguments):
    """function(*arguments), run in a forked child for which a file's mode binds, and its result:
    under root, whom modes do not bind, the child becomes nobody (NOBODY, no other groups), so that
    what the test made is another user's; under any other user the child stays that user, whose own
    file of mode 000 is unreadable to them too. The test is skipped where root cannot become nobody
    (no CAP_SETUID). The child imports nothing (nobody may not read the interpreter's files): what
    `function` needs must be imported already."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its outcome through the pipe, then out, whatever happens, never back into pytest
        try:
            os.close(read)
            try:
                if os.geteuid() == 0:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
            except OSError as error:
                outcome = ("skip", f"root cannot become user {NOBODY} here ({error.strerror})")
            else:
                try:
                    outcome = ("ok", function(*arguments))
                except BaseException:
                    outcome = ("failed", traceback.format_exc())
            try:
                data = pickle.dumps(outcome)
            except Exception:
                data = pickle.dumps(("failed", traceback.format_exc()))
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    assert data, "the child process wrote no outcome"
    said, result = pickle.loads(data)
    if said == "skip":
        pytest.skip(result)
    assert said == "ok", f"in the child process:\n{result}"
    return result


def died_measuring(search, config, times: int) -> None:
    """Record in `search`'s study that `times` workers died measuring `config` (tuner.config), as the
    trial of one killed mid-measurement is found and failed (then queued again, while retries are
    left) by the next worker."""
    from tuner.trials import MEASURE, config_key, suggest

    search.study.enqueue_trial(config.as_dict())
    for _ in range(times):
        trial = search.study.ask()  # the configuration, or its retry
        assert suggest(trial, search.space.domains()) == config.as_dict()
        search.shared.sign(trial)
        assert search.shared.claim(search.study, None, trial, config_key(config.as_dict())) == MEASURE
        trial.set_user_attr("worker_started", "1")  # its process died: this pid is another's now
        search.shared.recover(search.study)
