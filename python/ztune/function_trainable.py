"""The function API: ``def train(config): ... ztune.report(metrics)``.

Like Ray Tune's ``FunctionTrainable``, the user's function is wrapped in a
``Trainable`` whose ``step`` runs the function until its next ``report``:

* The function runs in its own thread, started at the first ``step``, not at
  ``setup``: a ``restore`` may come between setup and the first step, and
  the function must then start from that checkpoint (``get_checkpoint()``).
* ``report(metrics)`` hands the metrics to the waiting ``step`` and blocks
  the function until the next ``step``. So the function never runs ahead of
  the head: between commands it is parked inside ``report``, which is what
  makes ``save`` see a consistent state.
* ``report(metrics, checkpoint_dir=d)`` adds ``should_checkpoint: true`` to
  that result, so the head asks for a ``save`` right after it; ``save``
  copies the content of the latest reported directory (the function is
  parked, so the directory does not change under the copy).
* To end the function early (``reset``, ``restore``, ``stop``, end of the
  worker), the parked ``report`` raises ``_EndFunction``, a BaseException
  so that the user's ``except Exception`` does not swallow it; ``finally``
  blocks and context managers in the function run as it unwinds.

When the function returns (see ``FunctionTrainable.step``) the step replies
with ``done: true``: as in Ray, a function that returns has finished the
trial.
"""

import os
import queue
import shutil
import threading
from typing import Any, Callable, Dict, Optional

from .errors import CommandError, UserCodeError, describe_exception
from .trainable import Trainable

# How long ending the function may take before the command that ends it
# (reset, restore, stop) fails. Unwinding normally takes microseconds; only a
# function that catches BaseException and keeps running gets near this.
END_TIMEOUT_S = 30.0

_CONTINUE = "continue"
_END = "end"

_thread_local = threading.local()      # .run: the _FunctionRun of this thread
_active_lock = threading.Lock()
_active_run: "Optional[_FunctionRun]" = None   # the run get_checkpoint() sees


class _EndFunction(BaseException):
    """Raised inside ``ztune.report`` to unwind a function that must end.

    A BaseException, like SystemExit, because user code often has
    ``except Exception`` around its training loop. Do not catch it.
    """


class _FunctionRun:
    """One execution of the user's function, in its own thread.

    A new object for every (re)start, so that nothing of an ended run (a
    queued message, a late report) can leak into the next one.
    """

    def __init__(self, function: Callable[[Dict[str, Any]], Any],
                 config: Dict[str, Any], checkpoint_dir: Optional[str]) -> None:
        self.function = function
        self.config = config
        self.checkpoint_dir = checkpoint_dir
        self.events: "queue.Queue[tuple]" = queue.Queue()   # function -> step
        self.resume: "queue.Queue[str]" = queue.Queue()     # step -> function
        self.ending = False
        self.finished: Optional[str] = None   # "returned" or "failed", set by step
        self.failure: Optional[str] = None
        # Daemon: a function that refuses to end must not keep the process
        # alive after the command loop exits.
        self.thread = threading.Thread(target=self._main, name="ztune-function",
                                       daemon=True)

    def _main(self) -> None:
        _thread_local.run = self
        try:
            value = self.function(self.config)
        except _EndFunction:
            event: tuple = ("ended",)
        except SystemExit as e:
            # sys.exit() in a thread only ends the thread; treat it as the
            # function ending, with its status.
            if e.code is None or e.code == 0:
                event = ("returned", None)
            else:
                event = ("failed", "the function called sys.exit(%r)" % (e.code,))
        except BaseException as e:  # the thread's last frame: report everything
            event = ("failed", describe_exception(e))
        else:
            event = ("returned", value)
        finally:
            _thread_local.run = None
            _deactivate(self)
        self.events.put(event)

    def report(self, metrics: Dict[str, Any], checkpoint_dir: Any) -> None:
        if self.ending:
            raise _EndFunction()
        if not isinstance(metrics, dict):
            raise TypeError("ztune.report(metrics): metrics must be a dict, got %s"
                            % type(metrics).__name__)
        if checkpoint_dir is not None:
            checkpoint_dir = os.path.abspath(os.fspath(checkpoint_dir))
            if not os.path.isdir(checkpoint_dir):
                raise ValueError("ztune.report(checkpoint_dir=%r): not a directory"
                                 % checkpoint_dir)
        self.events.put(("report", dict(metrics), checkpoint_dir))
        if self.resume.get() == _END:
            self.ending = True
            raise _EndFunction()

    def end(self, timeout: float) -> None:
        """Make the function unwind and wait for its thread to finish."""
        if not self.thread.is_alive():
            return
        self.resume.put(_END)
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise CommandError(
                "the function did not end within %g s after ztune.report() raised "
                "to stop it; do not catch BaseException around ztune.report()"
                % timeout)


def _activate(run: _FunctionRun) -> None:
    global _active_run
    with _active_lock:
        _active_run = run


def _deactivate(run: _FunctionRun) -> None:
    global _active_run
    with _active_lock:
        if _active_run is run:
            _active_run = None


def report(metrics: Dict[str, Any], checkpoint_dir: Any = None) -> None:
    """Report one iteration's metrics from a function trainable.

    Blocks until the head asks for the next iteration. With
    ``checkpoint_dir`` (a directory holding the state to resume from), the
    result asks for a checkpoint, and the SDK saves the directory's content
    when the head asks; keep the directory unchanged until this call
    returns. Must be called from the function's own thread.
    """
    run = getattr(_thread_local, "run", None)
    if run is None:
        raise RuntimeError(
            "ztune.report() must be called from the function that ztune.run() "
            "runs, in its thread (not from the class API, another thread, or "
            "outside a ztune worker)")
    run.report(metrics, checkpoint_dir)


def get_checkpoint() -> Optional[str]:
    """The checkpoint directory the function should resume from, or None.

    It is the directory of the last ``restore`` before the function started
    (the same for the whole run). It stays until the next restore or the end
    of the process. None when the trial starts from scratch.
    """
    run = getattr(_thread_local, "run", None)
    if run is None:
        with _active_lock:
            run = _active_run
    if run is None:
        raise RuntimeError(
            "ztune.get_checkpoint() can only be called while a function "
            "trainable runs under ztune.run()")
    return run.checkpoint_dir


class FunctionTrainable(Trainable):
    """A Trainable running a function; ``wrap_function`` makes the subclass."""

    _function: Optional[Callable[[Dict[str, Any]], Any]] = None

    def setup(self, config: Dict[str, Any]) -> None:
        self._run: Optional[_FunctionRun] = None
        self._restore_dir: Optional[str] = None        # get_checkpoint() at start
        self._latest_checkpoint: Optional[str] = None  # what save copies
        self._last_metrics: Optional[Dict[str, Any]] = None

    def step(self) -> Dict[str, Any]:
        run = self._run
        if run is None:
            run = self._start()
        elif run.finished == "returned":
            raise CommandError(
                "the function has already returned, which finished the trial; "
                "there is no next iteration")
        elif run.finished == "failed":
            raise CommandError(
                "the function failed in an earlier step; restore a checkpoint or "
                "reset to run it again. Its error was: %s" % run.failure)
        else:
            run.resume.put(_CONTINUE)
        event = run.events.get()
        kind = event[0]
        if kind == "report":
            metrics, checkpoint_dir = event[1], event[2]
            self._last_metrics = metrics
            result = dict(metrics)
            if checkpoint_dir is not None:
                self._latest_checkpoint = checkpoint_dir
                result["should_checkpoint"] = True
            return result
        if kind == "returned":
            run.finished = "returned"
            return self._final_result(event[1])
        run.finished = "failed"
        run.failure = event[1] if kind == "failed" else "the function ended"
        raise UserCodeError(run.failure)

    def _final_result(self, value: Any) -> Dict[str, Any]:
        """The result of the step in which the function returned.

        A returned dict is the final result (Ray reports it). Returning None
        repeats the last reported metrics, so that the trial's last result,
        the one marked done, still holds its metrics (Ray marks the last
        result done); the keys that describe one iteration's work are left
        out so that totals do not count it twice. Without any report the
        result is only ``{"done": true}``.
        """
        if value is None:
            result = dict(self._last_metrics or {})
            for key in ("should_checkpoint", "timesteps_this_iter", "time_this_iter_s"):
                result.pop(key, None)
        elif isinstance(value, dict):
            result = dict(value)
        else:
            raise CommandError(
                "the function returned a %s; a function trainable returns None "
                "or a dict of final metrics" % type(value).__name__)
        result["done"] = True
        return result

    def _start(self) -> _FunctionRun:
        function = type(self)._function
        assert function is not None, "FunctionTrainable used without wrap_function"
        run = _FunctionRun(function, self.config, self._restore_dir)
        self._run = run
        _activate(run)
        run.thread.start()
        return run

    def end_function(self) -> None:
        """End the running function, if any (the next step starts it again)."""
        self._end_run()

    def _end_run(self) -> None:
        run = self._run
        if run is None:
            return
        run.end(END_TIMEOUT_S)
        self._run = None

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        source = self._latest_checkpoint
        if source is None:
            raise CommandError(
                "the function has not reported a checkpoint yet: call "
                "ztune.report(metrics, checkpoint_dir=...) with a directory first")
        if not os.path.isdir(source):
            raise CommandError(
                "the checkpoint directory %s that the function reported no longer "
                "exists; keep it until the next ztune.report() returns" % source)
        # Follows symbolic links (symlinks=False): the worker packs only
        # regular files and directories, so copy what a link points to.
        try:
            shutil.copytree(source, checkpoint_dir, symlinks=False, dirs_exist_ok=True)
        except (OSError, shutil.Error) as e:
            raise CommandError("copying the reported checkpoint %s failed: %s"
                               % (source, e)) from None

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        # A running function is ended: the next step starts it again, and
        # get_checkpoint() then returns this directory.
        self._end_run()
        self._restore_dir = checkpoint_dir
        # A save right after the restore saves the restored state.
        self._latest_checkpoint = checkpoint_dir
        self._last_metrics = None

    def reset_config(self, new_config: Dict[str, Any]) -> bool:
        # The next step starts the function afresh, with the new config
        # (the command loop assigns self.config after this returns True).
        # The command loop has ended the function already (end_function),
        # before switching to the new trial's identity.
        self._end_run()
        self._restore_dir = None
        self._latest_checkpoint = None
        self._last_metrics = None
        return True

    def cleanup(self) -> None:
        self._end_run()

    def export_model(self, formats: Any) -> Dict[str, Any]:
        raise CommandError(
            "a function trainable cannot export a model (export_model is part of "
            "the class API: subclass ztune.Trainable)")


def wrap_function(function: Callable[[Dict[str, Any]], Any]) -> type:
    """A FunctionTrainable subclass that runs ``function(config)``."""
    name = getattr(function, "__name__", "function")
    return type("FunctionTrainable(%s)" % name, (FunctionTrainable,),
                {"_function": staticmethod(function)})
