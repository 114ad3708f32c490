"""A counter, function API: the process trainable the C++ end-to-end tests run.

config: ``start`` (number, default 0), ``increment`` (number, default 1).
Loops until the head stops it. Step i (the function's own counter, from 1)
adds ``increment`` and reports ``{"value": v, "score": v, "step": i}`` with a
checkpoint: a fresh directory ``ckpt_<i>`` in the trial directory holding
``state.json``, removed once ``report`` returns (the SDK has copied it by
then if the head asked for a save). It resumes from
``ztune.get_checkpoint()``, so after a restore ``step`` continues exactly
where the checkpoint was taken.
"""

import json
import os
import shutil

import ztune


def train(config):
    value = config.get("start", 0)
    increment = config.get("increment", 1)
    step = 0
    resume_from = ztune.get_checkpoint()
    if resume_from is not None:
        with open(os.path.join(resume_from, "state.json")) as f:
            state = json.load(f)
        value, step = state["value"], state["step"]
    while True:
        step += 1
        value += increment
        checkpoint = os.path.join(ztune.get_trial_dir(), "ckpt_%d" % step)
        os.makedirs(checkpoint, exist_ok=True)
        with open(os.path.join(checkpoint, "state.json"), "w") as f:
            json.dump({"value": value, "step": step}, f)
        ztune.report({"value": value, "score": value, "step": step},
                     checkpoint_dir=checkpoint)
        # report() returned: the head has moved on to the next iteration, so
        # the SDK has already saved this checkpoint if the head asked for it.
        shutil.rmtree(checkpoint, ignore_errors=True)


if __name__ == "__main__":
    ztune.run(train)
