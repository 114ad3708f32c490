"""Reports the CUDA_VISIBLE_DEVICES the worker gave the trial.

config: ``steps`` (default 1). Each step reports
``{"cuda_visible_devices": <the variable, a string, possibly empty>}`` (None
if unset), with ``done: true`` at step ``steps``.
"""

import os

import ztune


class GpuReport(ztune.Trainable):
    def setup(self, config):
        self.steps = config.get("steps", 1)

    def step(self):
        result = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        if self.iteration + 1 >= self.steps:
            result["done"] = True
        return result

    def save_checkpoint(self, checkpoint_dir):
        pass

    def load_checkpoint(self, checkpoint_dir):
        pass

    def reset_config(self, new_config):
        self.setup(new_config)
        return True


if __name__ == "__main__":
    ztune.run(GpuReport)
