"""The identity of the trial this process currently serves.

A process may serve several trials one after the other (actor reuse: the
``reset`` command), so the trial id and directory are not constants of the
process. The command loop records them here at ``setup`` and ``reset``, and
mirrors them into ``ZTUNE_TRIAL_ID`` / ``ZTUNE_TRIAL_DIR`` so that code that
reads the environment (or a subprocess it starts) sees the current trial
too. ``get_trial_id()`` and ``get_trial_dir()`` work the same in the class
and the function API, from any thread.
"""

import os
import threading
from typing import Optional

_lock = threading.Lock()
_trial_id: Optional[str] = None
_trial_dir: Optional[str] = None


def get_trial_id() -> Optional[str]:
    """The id of the trial being run, or None outside a ztune worker.

    Before the ``setup`` command it is the worker's ``ZTUNE_TRIAL_ID``.
    """
    with _lock:
        if _trial_id is not None:
            return _trial_id
    return os.environ.get("ZTUNE_TRIAL_ID")


def get_trial_dir() -> Optional[str]:
    """The directory of the trial being run (absolute), or None outside a worker.

    The worker creates it; the trial's ``stdout`` and ``stderr`` files are
    there, and it is the default working directory of the process.
    """
    with _lock:
        if _trial_dir is not None:
            return _trial_dir
    return os.environ.get("ZTUNE_TRIAL_DIR")


def set_trial(trial_id: str, trial_dir: str) -> None:
    """Record the current trial (command loop only)."""
    global _trial_id, _trial_dir
    with _lock:
        _trial_id = trial_id
        _trial_dir = trial_dir
        os.environ["ZTUNE_TRIAL_ID"] = trial_id
        os.environ["ZTUNE_TRIAL_DIR"] = trial_dir
