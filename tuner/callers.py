"""The line a warning of tuner's points at: the first one outside tuner on the way to it, the
user's own, however deep in tuner the warning is raised."""
import os
import sys

_PACKAGE = os.path.dirname(__file__) + os.sep  # as its modules' code names their files


def user_stacklevel() -> int:
    """warnings.warn's stacklevel, for the function that calls this, that names the line of the
    first caller outside tuner (the outermost line where every caller is tuner's, as in a command)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
