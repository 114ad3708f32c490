"""The class API: subclass ``Trainable`` and pass the class to ``ztune.run``.

This mirrors Ray Tune's ``Trainable`` (and ztune's C++ ``Trainable``,
docs/trainables.md): the worker keeps the counters (``training_iteration``,
``time_total_s``, ...) and fills the automatic result fields, so a
trainable only computes. Every method is called from the thread that called
``ztune.run``, one at a time, so no locking is needed.

Checkpoints are directories: ``save_checkpoint`` writes files into a
directory the worker gives it, the worker packs them, and a later
``load_checkpoint`` (possibly in another process on another machine) gets a
directory with the same files. A restored run must continue exactly as if it
had never stopped, so save exact values (``repr`` of a float, or its bytes),
not rounded text.
"""

from typing import Any, Dict, List, Optional


class Trainable:
    """Base class of a class-API trainable.

    The SDK constructs the class with no arguments when the ``setup``
    command arrives, then sets these attributes, which user code may read
    (and should not assign):

    ``config``
        the trial's config (a dict; an absent config is ``{}``).
    ``trial_id``, ``trial_dir``, ``attempt``
        the trial being served, its directory (absolute; created by the
        worker) and its attempt number (the head's count, which grows at
        every retry of the trial).
    ``iteration``
        completed iterations: during ``step`` it is the number of the
        iteration being run minus one; during ``save_checkpoint`` the
        iteration the checkpoint captures; after ``load_checkpoint`` the
        checkpoint's iteration; after a successful reset 0.
    """

    def __init__(self) -> None:
        # Defaults for code that touches the attributes before setup; the
        # command loop sets the real values whether or not a subclass's
        # __init__ calls this one.
        self.config: Dict[str, Any] = {}
        self.trial_id: Optional[str] = None
        self.trial_dir: Optional[str] = None
        self.attempt: int = 0
        self.iteration: int = 0

    def setup(self, config: Dict[str, Any]) -> None:
        """Prepare the trial (called once, first). ``config`` is also ``self.config``.

        Raise an exception for a bad config, naming the key: a failed setup
        ends the actor and the trial fails (and is retried within
        ``max_failures``).
        """

    def step(self) -> Dict[str, Any]:
        """Run one iteration and return its metrics (a dict with string keys).

        Special keys, as in Ray Tune: ``done: True`` ends the trial,
        ``should_checkpoint: True`` asks for a checkpoint now,
        ``timesteps_this_iter`` and ``time_this_iter_s``. Non-finite floats
        are reported as the strings "nan", "inf", "-inf". An exception fails
        this step; the process stays alive.
        """
        raise NotImplementedError(
            "%s must implement step(self) -> dict" % type(self).__name__)

    def save_checkpoint(self, checkpoint_dir: str) -> Optional[str]:
        """Write the trainable's state as files into ``checkpoint_dir`` (empty, exists).

        Return None (or a path inside ``checkpoint_dir``, accepted for Ray
        compatibility and ignored): the checkpoint is the directory's
        content. Regular files and subdirectories only; symbolic links are
        refused by the worker.
        """
        raise NotImplementedError(
            "%s does not implement save_checkpoint(self, checkpoint_dir), so it "
            "cannot be checkpointed" % type(self).__name__)

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        """Restore the state that ``save_checkpoint`` wrote into ``checkpoint_dir``.

        The directory stays until the next restore or the end of the
        process, so it may be read lazily. ``self.iteration`` is already the
        checkpoint's iteration.
        """
        raise NotImplementedError(
            "%s does not implement load_checkpoint(self, checkpoint_dir), so it "
            "cannot be restored" % type(self).__name__)

    def reset_config(self, new_config: Dict[str, Any]) -> bool:
        """Reconfigure this instance for another trial (actor reuse).

        Return True when the instance now runs ``new_config`` from iteration
        0; False when unsupported or when the config is rejected (the
        default). When it is called, ``trial_id``, ``trial_dir`` and
        ``attempt`` already name the new trial, while ``self.config`` is
        still the old config (to compare with ``new_config``). On True the
        SDK sets ``self.config = new_config`` and ``self.iteration = 0``; on
        False or an exception every attribute is restored.
        """
        return False

    def cleanup(self) -> None:
        """Release resources; called once at ``stop`` (not after a failed setup)."""

    def export_model(self, formats: List[str]) -> Dict[str, Any]:
        """Return ``{format: content}`` for the requested formats.

        ``content`` is any JSON value. Raise for a format you do not support.
        """
        raise NotImplementedError(
            "%s does not implement export_model(self, formats); cannot export %s"
            % (type(self).__name__, ", ".join(repr(f) for f in formats) or "anything"))
