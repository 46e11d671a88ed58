"""Child processes that the tests interrupt."""
import signal


def answers_ctrl_c() -> None:
    """A Popen preexec_fn: the default SIGINT disposition in the child, whatever the test run's.
    A shell's background job ignores SIGINT, a child inherits that, and Python then installs no
    KeyboardInterrupt handler, so the test's Ctrl-C would go unheard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
