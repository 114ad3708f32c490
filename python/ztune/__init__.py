"""ztune: the Python SDK for ztune process trainables.

A ztune worker runs a training script as a child process and drives it over
two pipes with a JSON line protocol (docs/process-protocol.md). This package
speaks that protocol, so a script only says what to train:

Class API (like Ray Tune's ``Trainable``)::

    import ztune

    class Model(ztune.Trainable):
        def setup(self, config): self.x = config.get("x0", 10.0)
        def step(self): self.x *= 0.9; return {"loss": self.x ** 2}
        def save_checkpoint(self, d): open(d + "/x", "w").write(repr(self.x))
        def load_checkpoint(self, d): self.x = float(open(d + "/x").read())

    if __name__ == "__main__":
        ztune.run(Model)

Function API (like Ray Tune's function trainables)::

    def train(config):
        for i in range(100):
            ztune.report({"loss": 1.0 / (i + 1)})

    if __name__ == "__main__":
        ztune.run(train)

Only the standard library is used: the SDK must install anywhere, offline.
The head's client module (``ztune.client``) is separate and not imported
here, so a trainable does not load what it does not use.
"""

from .function_trainable import get_checkpoint, report
from .runner import run
from .session import get_trial_dir, get_trial_id
from .trainable import Trainable
from .version import __version__

__all__ = [
    "Trainable",
    "run",
    "report",
    "get_checkpoint",
    "get_trial_id",
    "get_trial_dir",
    "__version__",
]
