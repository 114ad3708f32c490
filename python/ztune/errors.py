"""How failures become the text of an error reply.

Every failure of a command becomes ``{"ok": false, "error": TEXT}``; the head
shows TEXT to the user (``step of iteration 7 failed: TEXT``), so it must
say what went wrong without the user having to log in to the worker:

* An exception from user code gives ``<ExceptionType>: <message>`` on the
  first line (what one-line views show), then the Python traceback. Frames
  of the SDK itself at the top of the traceback are left out: they are the
  same for every trial and only push the user's frames further down.
* A problem the SDK detects itself (a result that is not a dict, a command
  before setup) is a CommandError: its message is the whole text, with no
  traceback, because the SDK's frames would not help the user.
"""

import os
import traceback
from types import TracebackType
from typing import Optional

# Compared with the directory of each frame's file as Python recorded it:
# both come from the same import, so a relative sys.path entry (PYTHONPATH=
# python) gives relative names on both sides, and a later chdir does not
# matter.
_PACKAGE_DIR = os.path.dirname(__file__)


class CommandError(Exception):
    """A command fails with exactly this message (no traceback added)."""


class UserCodeError(Exception):
    """User code failed where the SDK could not pass the exception on as is.

    The function API runs the user's function in another thread: the
    exception is formatted there, and the text travels to the command loop.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def describe_exception(exc: BaseException) -> str:
    """``<ExceptionType>: <message>`` then the traceback without leading SDK frames.

    When every frame is the SDK's (e.g. the NotImplementedError of a method
    the user did not override), the traceback is left out.
    """
    summary = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    tb = _skip_sdk_frames(exc.__traceback__)
    if tb is None and exc.__cause__ is None and exc.__context__ is None:
        return summary
    # format_exception also renders chained exceptions ("The above exception
    # was the direct cause ..."), which often hold the real reason.
    body = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")
    return summary + "\n" + body


def _skip_sdk_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _PACKAGE_DIR:
        tb = tb.tb_next
    return tb
