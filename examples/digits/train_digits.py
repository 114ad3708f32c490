"""Handwritten digits: a small neural network, tuned by ztune (class API).

A process trainable (docs/process-protocol.md) run by a ztune-worker through
its --trainables file (examples/digits/trainables.json). It trains a
one-hidden-layer perceptron (ReLU, softmax) on scikit-learn's bundled digits
data set (1,797 8x8 images, no download) with mini-batch SGD and momentum,
one epoch per step, and reports the validation accuracy and loss.

config (every key optional):

    lr          learning rate, > 0                           (default 0.05)
    hidden      hidden layer size, integer >= 1             (default 64)
    alpha       L2 regularisation (weight decay), >= 0       (default 1e-4)
    batch_size  mini-batch size, integer >= 1               (default 32)
    momentum    SGD momentum, in [0, 1)                     (default 0.9)
    seed        seeds the weights and the batch order, integer >= 0 (default 0)

Each step reports {"accuracy", "loss", "train_loss", "epoch"}: accuracy and
mean cross-entropy on a fixed validation split (25 %, the same for every
trial), the mean training loss of the epoch, and the number of epochs done.

The run is a pure function of the config: a checkpoint (model.npz with the
weights and the momentum buffers, state.json with the epoch and the exact
random generator state) restored in another process, on another worker,
continues with exactly the numbers an uninterrupted run would have produced.
The hyperparameters themselves (lr, alpha, batch_size, momentum) come from the
config of the trial that restores, as Ray Tune's PBT expects; only `hidden`
must match the checkpoint's network. Checkpoints are read with
allow_pickle=False: restoring one never runs code from it.

Exports: "summary" (epoch, last metrics, network size) and "weights" (every
parameter as nested lists).
"""

import json
import math
import os

# A trial holds one CPU (spec.json: resources); keep BLAS from starting a
# thread per core, which would also make results depend on the machine. The
# trainables file's "env" may override these.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import ztune  # noqa: E402

SPLIT_SEED = 20240101       # the validation split never changes between trials
VALIDATION_FRACTION = 0.25
CHECKPOINT_FORMAT = 1
PARAMS = ("W1", "b1", "W2", "b2")

_DATA = None


def load_data():
    """(X_train, y_train, X_val, y_val), float64 pixels scaled to [0, 1]; cached."""
    global _DATA
    if _DATA is None:
        from sklearn.datasets import load_digits  # imported here: slow, and only needed once
        digits = load_digits()
        X = digits.data.astype(np.float64) / 16.0
        y = digits.target.astype(np.int64)
        order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
        n_val = int(round(len(y) * VALIDATION_FRACTION))
        val, train = order[:n_val], order[n_val:]
        _DATA = (X[train], y[train], X[val], y[val])
    return _DATA


def _number(config, key, default, low, high=math.inf, integer=False, low_open=False):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("config key '%s' must be a number, got %r" % (key, value))
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("config key '%s' must be an integer, got %r" % (key, value))
        value = int(value)
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value >= high:
        raise ValueError("config key '%s' must be in %s%g, %g), got %r"
                         % (key, "(" if low_open else "[", low, high, value))
    return value


def forward(params, X):
    """Hidden activations and class probabilities."""
    h = np.maximum(X @ params["W1"] + params["b1"], 0.0)
    logits = h @ params["W2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return h, p


def cross_entropy(p, y):
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], 1e-300))))


class Digits(ztune.Trainable):
    def setup(self, config):
        # Every key is checked before anything changes: a reset_config to a
        # bad config leaves the running model as it was.
        lr = _number(config, "lr", 0.05, 0.0, low_open=True)
        hidden = _number(config, "hidden", 64, 1, 1 << 16, integer=True)
        alpha = _number(config, "alpha", 1e-4, 0.0)
        batch_size = _number(config, "batch_size", 32, 1, 1 << 20, integer=True)
        momentum = _number(config, "momentum", 0.9, 0.0, 1.0)
        seed = _number(config, "seed", 0, 0, 2 ** 63, integer=True)
        X_train, _, _, _ = load_data()
        self.lr, self.hidden, self.alpha = lr, hidden, alpha
        self.batch_size, self.momentum = batch_size, momentum
        n_in, n_out = X_train.shape[1], 10
        self.rng = np.random.default_rng(seed)
        self.params = {
            "W1": self.rng.normal(0.0, math.sqrt(2.0 / n_in), (n_in, self.hidden)),
            "b1": np.zeros(self.hidden),
            "W2": self.rng.normal(0.0, math.sqrt(1.0 / self.hidden), (self.hidden, n_out)),
            "b2": np.zeros(n_out),
        }
        self.velocity = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.epoch = 0
        self.last = {}
        print("trial %s: %d hidden units, lr %g, alpha %g, batch size %d, momentum %g, seed %d"
              % (self.trial_id, self.hidden, self.lr, self.alpha, self.batch_size,
                 self.momentum, seed))

    def step(self):
        X, y, X_val, y_val = load_data()
        p_, v_ = self.params, self.velocity
        order = self.rng.permutation(len(y))
        losses = []
        for start in range(0, len(y), self.batch_size):
            idx = order[start:start + self.batch_size]
            xb, yb = X[idx], y[idx]
            h, prob = forward(p_, xb)
            losses.append(cross_entropy(prob, yb) * len(idx))
            # Gradient of the mean cross-entropy plus alpha/2 * |W|^2.
            d_logits = prob
            d_logits[np.arange(len(idx)), yb] -= 1.0
            d_logits /= len(idx)
            grads = {"W2": h.T @ d_logits + self.alpha * p_["W2"], "b2": d_logits.sum(axis=0)}
            d_h = (d_logits @ p_["W2"].T) * (h > 0)
            grads["W1"] = xb.T @ d_h + self.alpha * p_["W1"]
            grads["b1"] = d_h.sum(axis=0)
            for k in PARAMS:
                v_[k] *= self.momentum
                v_[k] -= self.lr * grads[k]
                p_[k] += v_[k]
        self.epoch += 1
        _, prob = forward(p_, X_val)
        self.last = {
            "accuracy": float(np.mean(prob.argmax(axis=1) == y_val)),
            "loss": cross_entropy(prob, y_val),
            "train_loss": sum(losses) / len(y),
            "epoch": self.epoch,
        }
        # A log line: it lands in the trial's stdout file on the worker.
        print("epoch %d: val accuracy %.4f, val loss %.4f, train loss %.4f"
              % (self.epoch, self.last["accuracy"], self.last["loss"], self.last["train_loss"]))
        return dict(self.last)

    def save_checkpoint(self, checkpoint_dir):
        arrays = dict(self.params)
        arrays.update({"v_" + k: v for k, v in self.velocity.items()})
        np.savez(os.path.join(checkpoint_dir, "model.npz"), **arrays)
        state = {"format": CHECKPOINT_FORMAT, "epoch": self.epoch, "hidden": self.hidden,
                 "rng": self.rng.bit_generator.state, "last": self.last}
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump(state, f)  # floats round-trip exactly through repr

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            state = json.load(f)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("unknown checkpoint format %r" % state.get("format"))
        if state["hidden"] != self.hidden:
            raise ValueError("the checkpoint's network has hidden=%d, the config says hidden=%d"
                             % (state["hidden"], self.hidden))
        with np.load(os.path.join(checkpoint_dir, "model.npz"), allow_pickle=False) as z:
            params = {k: z[k].copy() for k in PARAMS}
            velocity = {k: z["v_" + k].copy() for k in PARAMS}
        for k in PARAMS:
            if params[k].shape != self.params[k].shape or velocity[k].shape != params[k].shape:
                raise ValueError("checkpoint array %s has shape %s, expected %s"
                                 % (k, params[k].shape, self.params[k].shape))
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self.params, self.velocity, self.rng = params, velocity, rng
        self.epoch, self.last = state["epoch"], state.get("last", {})
        print("restored epoch %d from %s" % (self.epoch, checkpoint_dir))

    def reset_config(self, new_config):
        self.setup(new_config)  # a fresh network for the new trial; the data stays loaded
        return True

    def export_model(self, formats):
        exports = {}
        for fmt in formats:
            if fmt == "summary":
                exports[fmt] = dict(self.last, epoch=self.epoch, hidden=self.hidden,
                                    parameters=int(sum(v.size for v in self.params.values())))
            elif fmt == "weights":
                exports[fmt] = {k: v.tolist() for k, v in self.params.items()}
            else:
                raise ValueError("unsupported export format %r (known: 'summary', 'weights')"
                                 % fmt)
        return exports


if __name__ == "__main__":
    ztune.run(Digits)
