"""Child processes that the tests start at once, interrupt, and find."""
import multiprocessing
import os
import signal


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
