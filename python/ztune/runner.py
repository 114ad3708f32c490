"""The command loop: ``ztune.run(trainable)``.

The worker starts the script with two pipes (``ZTUNE_COMMAND_FD``,
``ZTUNE_REPLY_FD``) and drives it strictly one command, one reply
(docs/process-protocol.md). This loop:

* writes the hello line, then answers every command, in order, with exactly
  one reply: even a malformed or unknown command gets an error reply, since
  the worker waits for one;
* turns every exception of user code into an error reply (the loop goes on;
  the head decides what a failed step means). SystemExit and
  KeyboardInterrupt are not caught: a trainable that calls ``sys.exit(3)``
  in a step means it, and the worker reports the exit status;
* flushes sys.stdout and sys.stderr before each reply: the worker switches
  the trial's log files at ``reset``, and output written before a reply
  belongs to the trial that command was for;
* exits with status 0 after ``stop``, or when the command pipe reaches EOF
  (the worker is gone; nobody is left to answer).
"""

import json
import os
import platform
import sys
from typing import Any, Callable, Dict, Optional, Tuple

from . import session
from .errors import CommandError, UserCodeError, describe_exception
from .function_trainable import FunctionTrainable, wrap_function
from .protocol import (PROTOCOL_VERSION, Channel, encode_error, encode_message,
                       to_json_value)
from .trainable import Trainable
from .version import __version__

_EXIT_NOT_UNDER_WORKER = 2


def run(trainable: Any) -> None:
    """Serve ``trainable`` to the ztune worker that started this process; never returns.

    ``trainable`` is a ``ztune.Trainable`` subclass (class API) or a function
    ``f(config)`` that calls ``ztune.report`` (function API). Exits with
    status 0 after the worker's ``stop``, or when the worker is gone; with
    status 2 and a message on stderr when the process was not started by a
    ztune worker.
    """
    factory = _trainable_class(trainable)
    command_fd, reply_fd = _protocol_fds()
    status = CommandLoop(factory, Channel(command_fd, reply_fd)).serve()
    sys.exit(status)


def _trainable_class(trainable: Any) -> type:
    if isinstance(trainable, type):
        if issubclass(trainable, Trainable):
            return trainable
        raise TypeError("ztune.run() needs a subclass of ztune.Trainable or a "
                        "function; %s is a class that does not derive from "
                        "ztune.Trainable" % trainable.__qualname__)
    if isinstance(trainable, Trainable):
        raise TypeError("ztune.run() needs the Trainable class, not an instance: "
                        "write ztune.run(%s)" % type(trainable).__name__)
    if callable(trainable):
        return wrap_function(trainable)
    raise TypeError("ztune.run() needs a subclass of ztune.Trainable or a "
                    "function, got %s" % type(trainable).__name__)


def _protocol_fds() -> Tuple[int, int]:
    """The command and reply fds from the environment, or exit 2 with a message."""
    def fail(reason: str) -> None:
        sys.stderr.write(
            "ztune: %s is a ztune process trainable: it must be started by a "
            "ztune worker (ztune-worker --trainables FILE), which talks to it "
            "over the pipes named by ZTUNE_COMMAND_FD and ZTUNE_REPLY_FD. %s\n"
            % (os.path.basename(sys.argv[0]) or "this program", reason))
        sys.stderr.flush()
        sys.exit(_EXIT_NOT_UNDER_WORKER)

    protocol = os.environ.get("ZTUNE_PROTOCOL")
    if protocol is not None and protocol != str(PROTOCOL_VERSION):
        fail("The worker speaks protocol %s; this SDK (ztune %s) speaks protocol %d."
             % (protocol, __version__, PROTOCOL_VERSION))
    fds = []
    for name in ("ZTUNE_COMMAND_FD", "ZTUNE_REPLY_FD"):
        text = os.environ.get(name)
        if text is None:
            fail("%s is not set." % name)
        try:
            fd = int(text)
            if fd < 0:
                raise ValueError
        except ValueError:
            fail("%s=%r is not a file descriptor number." % (name, text))
        try:
            os.fstat(fd)
        except OSError as e:
            fail("%s=%d is not an open file descriptor (%s)." % (name, fd, e.strerror))
        # The pipes are ours alone: a program that user code starts with
        # os.system or fork/exec must not inherit them, or it would keep the
        # worker from seeing EOF when this process dies.
        os.set_inheritable(fd, False)
        fds.append(fd)
    return fds[0], fds[1]


def _flush_stdio() -> None:
    # User code may have replaced or closed the streams; flushing is a
    # courtesy to the logs, never a reason to fail a command.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _log_to_stderr(text: str) -> None:
    # The trial's stderr file is where a user looks for the whole story;
    # the error reply may be shortened by the time it is shown.
    try:
        sys.stderr.write("ztune: %s\n" % text)
    except (OSError, ValueError, AttributeError):
        pass


class CommandLoop:
    """Reads commands, calls the trainable, writes replies."""

    def __init__(self, factory: Callable[[], Trainable], channel: Channel) -> None:
        self._factory = factory
        self._channel = channel
        self._trainable: Optional[Trainable] = None
        self._setup_tried = False
        self._handlers = {
            "setup": self._setup,
            "step": self._step,
            "save": self._save,
            "restore": self._restore,
            "reset": self._reset,
            "export": self._export,
            "stop": self._stop,
        }

    def serve(self) -> int:
        """Run until stop or EOF; returns the exit status."""
        _flush_stdio()   # output of the script before run() belongs before the hello
        hello = encode_message({
            "protocol": PROTOCOL_VERSION,
            "sdk": "ztune-python %s (Python %s)" % (__version__, platform.python_version()),
        })
        if not self._send(hello):
            return self._worker_gone()
        while True:
            line = self._channel.read_line()
            if line is None:
                return self._worker_gone()
            reply, exit_status = self._handle(line)
            _flush_stdio()
            if not self._send(reply):
                return self._worker_gone()
            if exit_status is not None:
                return exit_status

    def _send(self, data: bytes) -> bool:
        try:
            self._channel.write(data)
        except BrokenPipeError:
            return False
        return True

    def _worker_gone(self) -> int:
        # Nobody reads replies any more: clean up quietly and exit 0 (the
        # worker, if it still exists, knows what it did).
        trainable, self._trainable = self._trainable, None
        if trainable is not None:
            try:
                trainable.cleanup()
            except Exception as e:
                _log_to_stderr("cleanup failed after the worker went away: %s"
                               % describe_exception(e))
        _flush_stdio()
        return 0

    def _handle(self, line: bytes) -> Tuple[bytes, Optional[int]]:
        """The reply to one command line, and the exit status if the loop ends."""
        exit_status = None
        name = None
        try:
            command = _parse_command(line)
            name = command.get("cmd")
            handler = self._handlers.get(name) if isinstance(name, str) else None
            if handler is None:
                raise CommandError("unknown command %s; this SDK knows %s"
                                   % (_short_repr(name), ", ".join(self._handlers)))
            if name == "stop":
                exit_status = 0
            return handler(command), exit_status
        except CommandError as e:
            text = str(e)
        except UserCodeError as e:
            text = e.text
            _log_to_stderr("%s failed: %s" % (name, text))
        except Exception as e:
            text = describe_exception(e)
            _log_to_stderr("%s failed: %s" % (name, text))
        # A failed cleanup at stop still ends the process, with status 1.
        return encode_error(text), (1 if exit_status is not None else None)

    # -- commands ---------------------------------------------------------

    def _require_trainable(self, command: str) -> Trainable:
        if self._trainable is None:
            if self._setup_tried:
                raise CommandError("%s after a failed setup" % command)
            raise CommandError("%s before setup" % command)
        return self._trainable

    def _setup(self, command: Dict[str, Any]) -> bytes:
        if self._setup_tried:
            raise CommandError("setup came twice; it comes once, first")
        self._setup_tried = True
        config = _config(command)
        trial_id, attempt, trial_dir = _trial_fields(command)
        session.set_trial(trial_id, trial_dir)
        trainable = self._factory()
        trainable.config = config
        trainable.trial_id = trial_id
        trainable.trial_dir = trial_dir
        trainable.attempt = attempt
        trainable.iteration = 0
        trainable.setup(config)
        self._trainable = trainable
        return encode_message({"ok": True})

    def _step(self, command: Dict[str, Any]) -> bytes:
        trainable = self._require_trainable("step")
        iteration = _int_field(command, "iteration", minimum=1)
        trainable.iteration = iteration - 1
        result = trainable.step()
        if not isinstance(result, dict):
            raise CommandError("step() must return a dict of metrics, got %s"
                               % _type_description(result))
        reply = encode_message({"ok": True, "result": to_json_value(result, "result")})
        trainable.iteration = iteration
        return reply

    def _save(self, command: Dict[str, Any]) -> bytes:
        trainable = self._require_trainable("save")
        directory = _dir_field(command)
        returned = trainable.save_checkpoint(directory)
        if returned is not None and not isinstance(returned, (str, os.PathLike)):
            raise CommandError(
                "save_checkpoint() returned a %s; write the state as files into "
                "checkpoint_dir and return None" % type(returned).__name__)
        return encode_message({"ok": True})

    def _restore(self, command: Dict[str, Any]) -> bytes:
        trainable = self._require_trainable("restore")
        directory = _dir_field(command)
        iteration = _int_field(command, "iteration", minimum=0)
        previous = trainable.iteration
        trainable.iteration = iteration
        try:
            trainable.load_checkpoint(directory)
        except BaseException:
            # A failed restore leaves the counters as they were (as the worker's).
            trainable.iteration = previous
            raise
        return encode_message({"ok": True})

    def _reset(self, command: Dict[str, Any]) -> bytes:
        trainable = self._require_trainable("reset")
        config = _config(command)
        trial_id, attempt, trial_dir = _trial_fields(command)
        if isinstance(trainable, FunctionTrainable):
            # The old function unwinds first, while get_trial_id() and
            # get_trial_dir() still name its own trial (its finally blocks
            # may write there).
            trainable.end_function()
        saved = (trainable.trial_id, trainable.trial_dir, trainable.attempt)
        # reset_config sees the new trial's identity (it may open files in
        # the new trial directory) and the old config (to compare).
        trainable.trial_id, trainable.trial_dir, trainable.attempt = trial_id, trial_dir, attempt
        session.set_trial(trial_id, trial_dir)
        accepted = False
        try:
            accepted = trainable.reset_config(config)
            if not isinstance(accepted, bool):
                raise CommandError("reset_config() must return True or False, got %s"
                                   % _type_description(accepted))
        finally:
            if not accepted:
                # Refused or failed: the actor is unchanged.
                trainable.trial_id, trainable.trial_dir, trainable.attempt = saved
                if saved[0] is not None and saved[1] is not None:
                    session.set_trial(saved[0], saved[1])
        if not accepted:
            return encode_message({"ok": True, "reset": False})
        trainable.config = config
        trainable.iteration = 0
        return encode_message({"ok": True, "reset": True})

    def _export(self, command: Dict[str, Any]) -> bytes:
        trainable = self._require_trainable("export")
        formats = command.get("formats")
        if not isinstance(formats, list) or not all(isinstance(f, str) for f in formats):
            raise CommandError("export: 'formats' must be an array of strings, got %s"
                               % _short_repr(formats))
        exports = trainable.export_model(list(formats))
        if not isinstance(exports, dict):
            raise CommandError("export_model() must return a dict {format: content}, got %s"
                               % _type_description(exports))
        return encode_message({"ok": True, "exports": to_json_value(exports, "exports")})

    def _stop(self, command: Dict[str, Any]) -> bytes:
        trainable, self._trainable = self._trainable, None
        if trainable is not None:
            trainable.cleanup()
        return encode_message({"ok": True})


# -- command fields ---------------------------------------------------------

def _parse_command(line: bytes) -> Dict[str, Any]:
    try:
        command = json.loads(line)
    except ValueError as e:  # includes UnicodeDecodeError
        raise CommandError("the command line is not JSON: %s" % e) from None
    if not isinstance(command, dict):
        raise CommandError("the command is not a JSON object but %s"
                           % _type_description(command))
    return command


def _config(command: Dict[str, Any]) -> Dict[str, Any]:
    config = command.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise CommandError("%s: 'config' must be an object, got %s"
                           % (command.get("cmd"), _type_description(config)))
    return config


def _trial_fields(command: Dict[str, Any]) -> Tuple[str, int, str]:
    name = command.get("cmd")
    trial_id = command.get("trial_id")
    trial_dir = command.get("trial_dir")
    if not isinstance(trial_id, str) or not trial_id:
        raise CommandError("%s: 'trial_id' must be a non-empty string, got %s"
                           % (name, _short_repr(trial_id)))
    if not isinstance(trial_dir, str) or not trial_dir:
        raise CommandError("%s: 'trial_dir' must be a non-empty string, got %s"
                           % (name, _short_repr(trial_dir)))
    attempt = _int_field(command, "attempt", minimum=0)
    return trial_id, attempt, trial_dir


def _int_field(command: Dict[str, Any], key: str, minimum: int) -> int:
    value = command.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CommandError("%s: '%s' must be an integer >= %d, got %s"
                           % (command.get("cmd"), key, minimum, _short_repr(value)))
    return value


def _dir_field(command: Dict[str, Any]) -> str:
    directory = command.get("dir")
    if not isinstance(directory, str) or not directory:
        raise CommandError("%s: 'dir' must be a non-empty string, got %s"
                           % (command.get("cmd"), _short_repr(directory)))
    if not os.path.isdir(directory):
        raise CommandError("%s: the directory %s does not exist"
                           % (command.get("cmd"), directory))
    return directory


def _type_description(value: Any) -> str:
    if value is None:
        return "None"
    return "a %s" % type(value).__name__


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
