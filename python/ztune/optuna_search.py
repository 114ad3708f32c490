"""Optuna as the searcher of a ztune experiment (ask/tell through the client API).

The experiment is submitted with ``"search_alg": {"type": "external",
"max_concurrent": N}``: the head then generates no config of its own, and its
``num_samples`` is the number of trials this searcher adds. ``OptunaSearch``
turns the spec's ``param_space`` into Optuna distributions, and loops:

- while fewer than ``max_concurrent`` of its trials are live, it asks Optuna
  for a config and adds it with ``add_trial(wait_s=...)``, which the head
  answers only when the experiment has a trial slot (so a config is asked for
  when it can run, after every completion before it was told);
- otherwise it waits on the head with ``wait_trials`` until one of its trials
  finishes, and tells Optuna the trial's final metric (the spec's ``metric``,
  in its ``mode``).

Early stopping (``pruner``):

- ``"scheduler"`` (default): the experiment's scheduler (ASHA, HyperBand,
  median stopping, ...) stops trials on the head, as for any experiment; a
  trial that ended before its ``stop`` criterion (and without ``done``) is
  told to Optuna as PRUNED, with its last metric reported at its last
  iteration, so that TPE learns from it as from a pruned Optuna trial.
- an ``optuna.pruners.BasePruner``: the searcher reads each live trial's new
  results (``results`` op), reports them to Optuna, and stops the trial on
  the head (``stop``) when ``should_prune()`` says so. Use it with the
  ``fifo`` scheduler.

Seeded runs give the same suggestions: the default sampler is
``TPESampler(seed=<the spec's seed>)``, and with ``max_concurrent`` 1 every
ask follows the tell of every trial before it (with more, the order in which
trials finish decides what TPE has seen at each ask).

A searcher that is restarted on the same experiment (``OptunaSearch(...)``
again, e.g. after its machine rebooted) first tells Optuna the trials the
experiment has already (finished ones at once, the others as they finish),
then adds only what remains of ``num_samples``.

Needs ``python3-optuna`` (Debian) besides pyzmq. Command line::

    python3 -m ztune.optuna_search EXPERIMENT_ID [--pruner scheduler|median|none]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import optuna

from .client import Client, ZtuneError

__all__ = ["OptunaSearch", "distributions_of", "config_of"]

#: The samplers of a ztune search space (docs/spec.md "Search space").
_SAMPLERS = ("grid_search", "choice", "uniform", "quniform", "loguniform", "randint", "normal")
_PRIMITIVE = (type(None), bool, int, float, str)


def _is_sampler(node: Any) -> bool:
    return isinstance(node, dict) and len(node) == 1 and next(iter(node)) in _SAMPLERS


def _leaves(space: Dict[str, Any], prefix: str = "") -> List[Tuple[str, Any]]:
    out = []
    for key, node in space.items():
        path = prefix + key
        if _is_sampler(node) or not isinstance(node, dict):
            out.append((path, node))
        else:
            out.extend(_leaves(node, path + "/"))
    return out


def distributions_of(param_space: Dict[str, Any]) -> Dict[str, "optuna.distributions.BaseDistribution"]:
    """Optuna distributions for the samplers of a ztune ``param_space``, keyed
    by flattened path ("a/b"). Constants have none (``config_of`` copies
    them). ``choice`` and ``grid_search`` become categorical (over indices
    when a value is not a JSON scalar); ``randint [low, high)`` an integer
    distribution over [low, high - 1]; ``quniform`` a float one, rounded to
    its q in the config. ``normal`` has no Optuna distribution:
    ``ValueError`` naming the key."""
    dists: Dict[str, optuna.distributions.BaseDistribution] = {}
    for path, node in _leaves(param_space):
        if not _is_sampler(node):
            continue
        kind, args = next(iter(node.items()))
        if kind in ("grid_search", "choice"):
            if all(isinstance(v, _PRIMITIVE) for v in args):
                dists[path] = optuna.distributions.CategoricalDistribution(list(args))
            else:
                dists[path] = optuna.distributions.CategoricalDistribution(list(range(len(args))))
        elif kind in ("uniform", "quniform"):
            dists[path] = optuna.distributions.FloatDistribution(float(args[0]), float(args[1]))
        elif kind == "loguniform":
            dists[path] = optuna.distributions.FloatDistribution(float(args[0]), float(args[1]), log=True)
        elif kind == "randint":
            dists[path] = optuna.distributions.IntDistribution(int(args[0]), int(args[1]) - 1)
        else:
            raise ValueError(
                f"param_space.{path.replace('/', '.')}: {kind} has no Optuna distribution; "
                "use uniform, loguniform, quniform, randint or choice with search_alg external"
            )
    return dists


def config_of(param_space: Dict[str, Any], params: Dict[str, Any]) -> Dict[str, Any]:
    """The trial config for Optuna's ``params`` (keyed as by
    ``distributions_of``): the space's nesting, its constants, and each
    sampler's value (a choice's value for its index, quniform rounded)."""

    def build(space: Dict[str, Any], prefix: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, node in space.items():
            path = prefix + key
            if _is_sampler(node):
                kind, args = next(iter(node.items()))
                value = params[path]
                if kind in ("grid_search", "choice") and not all(isinstance(v, _PRIMITIVE) for v in args):
                    value = args[value]
                elif kind == "quniform":
                    value = round(value / args[2]) * args[2]
                out[key] = value
            elif isinstance(node, dict):
                out[key] = build(node, path + "/")
            else:
                out[key] = node
        return out

    return build(param_space, "")


def _params_of(param_space: Dict[str, Any], config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Optuna params for a trial's config (a trial added before this searcher
    started), or None when the config does not fit the space."""
    params: Dict[str, Any] = {}
    for path, node in _leaves(param_space):
        if not _is_sampler(node):
            continue
        value: Any = config
        for part in path.split("/"):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        kind, args = next(iter(node.items()))
        if kind in ("grid_search", "choice") and not all(isinstance(v, _PRIMITIVE) for v in args):
            if value not in args:
                return None
            value = args.index(value)
        params[path] = value
    return params


def _flat_get(result: Dict[str, Any], flat_key: str) -> Any:
    value: Any = result
    for part in flat_key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class OptunaSearch:
    """Drives experiment ``experiment_id`` (search_alg external) with an
    Optuna study; ``run()`` returns the study once every one of the
    experiment's ``num_samples`` trials has finished and was told.

    ``sampler``: default ``TPESampler(seed=spec seed)``. ``study``: an
    existing study (its direction must match the spec's mode); one in memory
    otherwise. ``pruner``: ``"scheduler"`` or an Optuna pruner (module
    docstring). ``wait_s``: how long one request may wait on the head
    (at most 60). ``on_tell(trial_id, frozen_trial)`` is called after each
    tell."""

    def __init__(
        self,
        client: Client,
        experiment_id: str,
        *,
        sampler: Optional["optuna.samplers.BaseSampler"] = None,
        study: Optional["optuna.Study"] = None,
        pruner: Union[str, "optuna.pruners.BasePruner"] = "scheduler",
        wait_s: float = 30.0,
        poll_s: float = 0.5,
        on_tell: Optional[Callable[[str, "optuna.trial.FrozenTrial"], None]] = None,
    ):
        self.client = client
        self.experiment_id = experiment_id
        doc = client.experiment(experiment_id)
        self.spec = doc["spec"]
        search_alg = self.spec.get("search_alg") or {}
        if search_alg.get("type") != "external":
            raise ValueError(
                f"experiment {experiment_id} does not take its configs from a client: submit it "
                'with "search_alg": {"type": "external", "max_concurrent": N}'
            )
        self.metric = self.spec.get("metric")
        if not self.metric or self.spec.get("mode") not in ("min", "max"):
            raise ValueError(f"experiment {experiment_id} needs a metric and a mode (min or max) for Optuna")
        self.direction = "minimize" if self.spec["mode"] == "min" else "maximize"
        self.param_space = self.spec.get("param_space") or {}
        self.distributions = distributions_of(self.param_space)
        if pruner != "scheduler" and not isinstance(pruner, optuna.pruners.BasePruner):
            raise ValueError('pruner must be "scheduler" or an optuna.pruners.BasePruner')
        self.pruner = pruner
        if study is None:
            study = optuna.create_study(
                direction=self.direction,
                sampler=sampler or optuna.samplers.TPESampler(seed=int(self.spec["seed"])),
                pruner=pruner if isinstance(pruner, optuna.pruners.BasePruner) else optuna.pruners.NopPruner(),
            )
        elif study.direction.name.lower() != self.direction:
            raise ValueError(f"the study's direction is not the experiment's mode {self.spec['mode']}")
        self.study = study
        self.max_concurrent = int(search_alg.get("max_concurrent") or 0)
        self.num_samples = int(self.spec["num_samples"])
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.on_tell = on_tell
        # Trial id -> its Optuna trial (None: added before this searcher,
        # told as a whole when it finishes), and the results reported so far.
        self._live: Dict[str, Optional["optuna.trial.Trial"]] = {}
        self._reported: Dict[str, int] = {}
        self._steps: Dict[str, set] = {}  # steps reported to Optuna, per live trial
        self._added = 0

    # -- the loop --

    def run(self) -> "optuna.Study":
        self._adopt_existing()
        pending_config: Optional[Tuple["optuna.trial.Trial", Dict[str, Any]]] = None
        while self._added < self.num_samples or self._live:
            if self._added < self.num_samples and (
                self.max_concurrent == 0 or self._num_own_live() < self.max_concurrent
            ):
                if pending_config is None:
                    trial = self.study.ask(self.distributions)
                    pending_config = (trial, config_of(self.param_space, trial.params))
                trial, config = pending_config
                try:
                    trial_id = self.client.add_trial(self.experiment_id, config, wait_s=self.wait_s)
                except ZtuneError as e:
                    if e.code != "Unavailable":
                        raise
                    # No slot in wait_s: learn what finished meanwhile, try again.
                    self._collect(0.0)
                    continue
                pending_config = None
                trial.set_user_attr("ztune_trial_id", trial_id)
                self._live[trial_id] = trial
                self._steps[trial_id] = set()
                self._reported[trial_id] = 0
                self._added += 1
                continue
            self._collect(self.poll_s if isinstance(self.pruner, optuna.pruners.BasePruner) else self.wait_s)
        return self.study

    def _num_own_live(self) -> int:
        return sum(1 for t in self._live.values() if t is not None)

    def _adopt_existing(self) -> None:
        """Tells Optuna the trials the experiment has already (a restarted
        searcher): the finished ones now, the others when they finish."""
        for doc in self.client.trials(self.experiment_id):
            self._added += 1
            if doc["status"] in ("TERMINATED", "ERROR"):
                self._tell_existing(doc)
            else:
                self._live[doc["trial_id"]] = None
        self._added = min(self._added, self.num_samples)

    def _collect(self, wait_s: float) -> None:
        if not self._live:
            return
        if isinstance(self.pruner, optuna.pruners.BasePruner):
            self._report_intermediate()
            if not self._live:
                return
        reply = self.client.wait_trials(list(self._live), wait_s=wait_s)
        for doc in reply["finished"]:
            trial = self._live.pop(doc["trial_id"], None)
            if trial is None:
                self._tell_existing(doc)
            else:
                self._tell(doc, trial)

    def _report_intermediate(self) -> None:
        for trial_id, trial in list(self._live.items()):
            if trial is None:
                continue
            page = self.client.request("results", trial_id=trial_id, offset=self._reported[trial_id])
            for result in page.get("results", []):
                self._reported[trial_id] += 1
                value = _number(_flat_get(result, self.metric))
                step = result.get("training_iteration")
                self._report(trial_id, trial, value, step)
            if trial.should_prune():
                self.client.stop(trial_id)
                self._live.pop(trial_id)
                self._finish(trial_id, trial, state=optuna.trial.TrialState.PRUNED)

    # -- telling --

    def _report(self, trial_id: str, trial: "optuna.trial.Trial", value: Optional[float], step: Any) -> None:
        """An intermediate value, once per step (Optuna warns on repeats)."""
        steps = self._steps.setdefault(trial_id, set())
        if value is None or isinstance(step, bool) or not isinstance(step, int) or step in steps:
            return
        steps.add(step)
        trial.report(value, step)

    def _reached_stop(self, last: Dict[str, Any]) -> bool:
        """Whether a trial ran its full course: a ``stop`` criterion or the
        scheduler's ``max_t`` reached. (``done`` alone does not say: the head
        sets it on the last result of a trial its scheduler stopped, as Ray
        does; it counts only when neither bound exists, i.e. the trainable
        ended on its own.)"""
        stop = self.spec.get("stop") or {}
        for key, threshold in stop.items():
            value = _number(_flat_get(last, key))
            if value is not None and value >= threshold:
                return True
        scheduler = self.spec.get("scheduler") or {}
        max_t = _number(scheduler.get("max_t"))
        if max_t is not None:
            t = _number(_flat_get(last, scheduler.get("time_attr") or "training_iteration"))
            if t is not None and t >= max_t:
                return True
        return not stop and max_t is None and last.get("done") is True

    def _tell(self, doc: Dict[str, Any], trial: "optuna.trial.Trial") -> None:
        last = doc.get("last_result") or {}
        value = _number(_flat_get(last, self.metric)) if isinstance(last, dict) else None
        if doc["status"] == "ERROR" or value is None:
            self._finish(doc["trial_id"], trial, state=optuna.trial.TrialState.FAIL)
        elif self.pruner == "scheduler" and not self._reached_stop(last):
            self._report(doc["trial_id"], trial, value, last.get("training_iteration"))
            self._finish(doc["trial_id"], trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self._finish(doc["trial_id"], trial, value=value)

    def _finish(self, trial_id: str, trial: "optuna.trial.Trial", value: Optional[float] = None,
                state: Optional["optuna.trial.TrialState"] = None) -> None:
        frozen = self.study.tell(trial, value, state=state)
        self._steps.pop(trial_id, None)
        if self.on_tell is not None:
            self.on_tell(trial_id, frozen)

    def _tell_existing(self, doc: Dict[str, Any]) -> None:
        params = _params_of(self.param_space, doc.get("config") or {})
        if params is None:
            return  # a config outside the space: Optuna cannot model it
        last = doc.get("last_result") or {}
        value = _number(_flat_get(last, self.metric)) if isinstance(last, dict) else None
        state = optuna.trial.TrialState.COMPLETE
        if doc["status"] == "ERROR" or value is None:
            state, value = optuna.trial.TrialState.FAIL, None
        try:
            frozen = optuna.trial.create_trial(
                params=params, distributions=self.distributions, value=value, state=state,
                user_attrs={"ztune_trial_id": doc["trial_id"]},
            )
        except ValueError:
            return  # a value outside a distribution
        self.study.add_trial(frozen)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ztune.optuna_search",
        description="Drive a ztune experiment (search_alg external) with Optuna's TPE sampler.",
    )
    parser.add_argument("experiment_id")
    parser.add_argument("--endpoint", default=None, help="head endpoint (default $ZTUNE_HEAD)")
    parser.add_argument("--insecure", action="store_true", help="a head started with --insecure")
    parser.add_argument("--seed", type=int, default=None, help="sampler seed (default: the spec's)")
    parser.add_argument("--sampler", choices=["tpe", "random"], default="tpe")
    parser.add_argument("--pruner", choices=["scheduler", "median", "none"], default="scheduler",
                        help="scheduler: the experiment's scheduler stops trials (default); "
                             "median: Optuna's MedianPruner")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Client(args.endpoint, insecure=args.insecure, timeout_s=10.0, retries=3) as client:
        seed = args.seed if args.seed is not None else int(client.experiment(args.experiment_id)["spec"]["seed"])
        sampler = (optuna.samplers.TPESampler(seed=seed) if args.sampler == "tpe"
                   else optuna.samplers.RandomSampler(seed=seed))
        pruner: Union[str, optuna.pruners.BasePruner] = {
            "scheduler": "scheduler", "median": optuna.pruners.MedianPruner(),
            "none": optuna.pruners.NopPruner()}[args.pruner]

        def told(trial_id: str, frozen: "optuna.trial.FrozenTrial") -> None:
            print(f"{trial_id} {frozen.state.name} value={frozen.value} params={frozen.params}", flush=True)

        search = OptunaSearch(client, args.experiment_id, sampler=sampler, pruner=pruner, on_tell=told)
        study = search.run()
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if done:
            best = study.best_trial
            print(f"best: {best.user_attrs.get('ztune_trial_id')} value={best.value} params={best.params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
