"""A counter, class API: the process trainable the C++ end-to-end tests run.

config: ``start`` (number, default 0), ``increment`` (number, default 1).
Each step adds ``increment`` and reports ``{"value": v, "score": v}``, and
prints one line to stdout and one to stderr, so that tests can check where a
trial's output goes. Checkpoint: ``state.json`` with the exact value (floats
round-trip through JSON's repr). Reset adopts the new config and starts again
from ``start``. Export: format "json" gives ``{"value": v}``.
"""

import json
import os
import sys

import ztune


def _number(config, key, default):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("config key '%s' must be a number, got %s"
                         % (key, type(value).__name__))
    return value


class Counter(ztune.Trainable):
    def setup(self, config):
        self.start = _number(config, "start", 0)
        self.increment = _number(config, "increment", 1)
        self.value = self.start

    def step(self):
        self.value += self.increment
        n = self.iteration + 1
        print("step %d of trial %s" % (n, self.trial_id))
        print("stderr line %d" % n, file=sys.stderr)
        return {"value": self.value, "score": self.value}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"value": self.value}, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.value = json.load(f)["value"]

    def reset_config(self, new_config):
        self.setup(new_config)
        return True

    def export_model(self, formats):
        exports = {}
        for fmt in formats:
            if fmt != "json":
                raise ValueError("unsupported export format %r (only 'json')" % fmt)
            exports[fmt] = {"value": self.value}
        return exports


if __name__ == "__main__":
    ztune.run(Counter)
