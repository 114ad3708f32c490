"""Framing of the process-trainable line protocol (docs/process-protocol.md).

A ztune worker talks to its child over two dedicated pipes, one JSON object
per line. This module is the only place that touches those pipes, so that
the rules of the framing live together:

* Replies are written as one ``json.dumps(..., ensure_ascii=False,
  allow_nan=False)`` line, UTF-8, with ``os.write`` in a loop: a pipe may
  take a large write in pieces, and a half-written line would be a framing
  error that makes the worker stop the process.
* Nothing here ever writes to stdout: stdout is the trial's log, and the
  worker would never read a protocol line from it.
* Values that JSON cannot carry are converted up front (numpy-like scalars
  via ``.item()``, non-finite floats to the strings "nan", "inf", "-inf") or
  refused with a message naming the key, because an invalid reply line is
  not an error the trial can recover from, while an error reply is.
* The worker refuses reply lines longer than 64 MiB or nested deeper than 64
  levels; we check both before writing so that the user gets an error reply
  for the one command instead of a stopped process.
"""

import io
import json
import math
import os
from typing import Any, Dict, Optional

from .errors import CommandError

PROTOCOL_VERSION = 1

# Limits the worker enforces on reply lines (docs/process-protocol.md, Framing).
MAX_REPLY_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64


class Channel:
    """The two pipes to the worker: commands in, replies out.

    Reading is buffered (``readline`` on a buffered reader), so a command
    line split over several pipe reads, or several lines in one read, are
    both handled. Writing is unbuffered: each reply goes out completely
    before we wait for the next command.
    """

    def __init__(self, command_fd: int, reply_fd: int) -> None:
        # closefd=False: the fds belong to the process, not to this object;
        # closing them here would let a later open() reuse the number.
        self._reader = io.open(command_fd, "rb", buffering=64 * 1024, closefd=False)
        self._reply_fd = reply_fd

    def read_line(self) -> Optional[bytes]:
        """The next command line without its newline, or None at EOF.

        A last line without a newline means the worker died in the middle of
        writing it: treat it as EOF rather than act on a partial command.
        """
        line = self._reader.readline()
        if not line or not line.endswith(b"\n"):
            return None
        return line[:-1]

    def write(self, data: bytes) -> None:
        """Write ``data`` completely (raises BrokenPipeError if the worker is gone)."""
        write_all(self._reply_fd, data)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: pipes may accept partial writes."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def encode_message(message: Dict[str, Any]) -> bytes:
    """One protocol line for ``message``, which must already be JSON-safe.

    Raises CommandError when the line cannot be sent: a string that is not
    valid Unicode (a lone surrogate, e.g. from a file name decoded with
    surrogateescape), or a line longer than the worker accepts.
    """
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False)
        data = text.encode("utf-8") + b"\n"
    except UnicodeEncodeError as e:
        raise CommandError(
            "the reply contains a string that is not valid Unicode "
            "(%s); JSON text must be UTF-8" % e.reason) from None
    except (TypeError, ValueError) as e:
        # to_json_value should have caught these; say what json said.
        raise CommandError("the reply cannot be encoded as JSON: %s" % e) from None
    if len(data) > MAX_REPLY_BYTES:
        raise CommandError(
            "the reply is %d bytes of JSON, more than the %d bytes (64 MiB) the "
            "worker accepts in one line; report smaller metrics or put large "
            "data into checkpoints or files in the trial directory"
            % (len(data), MAX_REPLY_BYTES))
    return data


def encode_error(text: str) -> bytes:
    """An error reply line; never fails (invalid Unicode is replaced)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return encode_message({"ok": False, "error": text})


def to_json_value(value: Any, what: str, depth: int = 0) -> Any:
    """``value`` converted to plain JSON types, or CommandError naming ``what``.

    ``what`` names the value in messages, e.g. ``result['loss']``.
    Conversions: bool/int/float/str/None stay (int and float subclasses
    become plain ints and floats); non-finite floats become "nan", "inf" and
    "-inf" (JSON has no such numbers); tuples and lists become lists;
    objects with ``.item()`` (numpy and torch scalars) are converted with
    it, then objects with ``.tolist()`` (numpy arrays). Dict keys must be
    strings: silently turning 1 and "1" into the same key would lose data.
    Anything else is refused rather than turned into its str(): a metric the
    head cannot compare is a bug better reported at its source.
    """
    if depth > MAX_DEPTH:
        raise CommandError(
            "%s is nested deeper than %d levels (the worker's limit; is there "
            "a reference cycle?)" % (what, MAX_DEPTH))
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float_to_json(float(value))
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CommandError(
                    "%s has a key %r of type %s; keys must be strings"
                    % (what, key, type(key).__name__))
            out[key] = to_json_value(item, "%s[%r]" % (what, key), depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [to_json_value(item, "%s[%d]" % (what, i), depth + 1)
                for i, item in enumerate(value)]
    converted = _convert_array_like(value)
    if converted is not _NOT_CONVERTED:
        return to_json_value(converted, what, depth + 1)
    raise CommandError(
        "%s is of type %s, which JSON cannot represent; report numbers, "
        "strings, booleans, None, lists or dicts"
        % (what, _type_name(value)))


_NOT_CONVERTED = object()


def _convert_array_like(value: Any) -> Any:
    # numpy/torch scalars: .item() gives the Python number. An array with
    # more than one element refuses .item() (numpy: ValueError, torch:
    # RuntimeError, hence the broad except: any refusal means "not a
    # scalar"); then .tolist() gives nested lists. The result is checked
    # again by the caller, so a strange .item() cannot smuggle in an
    # unsupported type.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            converted = item()
        except Exception:
            pass
        else:
            if converted is not value:
                return converted
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        converted = tolist()
        if converted is not value:
            return converted
    return _NOT_CONVERTED


def _float_to_json(value: float) -> Any:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _type_name(value: Any) -> str:
    cls = type(value)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return "%s.%s" % (cls.__module__, cls.__qualname__)
