"""Submit the digits experiment with ztune.client, wait for it, show the best trial.

    PYTHONPATH=python /usr/bin/python3 examples/digits/tune_digits.py [SPEC] [--timeout S]

SPEC defaults to examples/digits/spec.json. The head endpoint and the keys
come from where the ztune CLI finds them (python/CLIENT.md): ZTUNE_HEAD,
ZTUNE_KEY, ZTUNE_HEAD_KEY (`scripts/local-cluster.sh up` prints the export
line), else ~/.ztune/. Needs pyzmq (Debian: python3-zmq). Exits 1 when a
trial ended in ERROR or there is no best trial.
"""

import argparse
import json
import os
import sys

from ztune.client import Client, WaitTimeout

HERE = os.path.dirname(os.path.abspath(__file__))


def show(exp):
    counts = ", ".join("%d %s" % (n, s) for s, n in exp["trial_counts"].items() if n)
    best = exp.get("best_trial")
    line = "%s: %s - %s" % (exp["experiment_id"], exp["status"], counts or "no trials yet")
    if best:
        line += "; best so far %s %s=%.4f" % (best["trial_id"], best["metric"], best["value"])
    print(line, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", nargs="?", default=os.path.join(HERE, "spec.json"))
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds to wait for the experiment (default 1800)")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)

    # retries: reads (wait's polls) ride out a head restart; submit is never resent.
    with Client(retries=3) as c:
        exp = c.submit(spec)
        print("submitted %s (%s)" % (exp, spec.get("name", spec["trainable"])))
        try:
            final = c.wait(exp, poll_s=1.0, timeout_s=args.timeout, on_update=show)
        except WaitTimeout as e:
            print("still running after %g s; `ztune stop %s` stops it" % (args.timeout, exp),
                  file=sys.stderr)
            show(e.experiment)
            return 1

        failed = c.trials(exp, status="ERROR")
        for t in failed:
            print("%s ERROR: %s" % (t["trial_id"], t["error"]), file=sys.stderr)

        best = c.best_trial(exp)
        if best is None:
            print("no best trial: no trial reported %s" % final.get("metric"), file=sys.stderr)
            return 1
        print("\nbest trial %s: %s=%.4f at iteration %d"
              % (best["trial_id"], best["metric"], best["value"], best["iteration"]))
        print("config: %s" % json.dumps(best["config"], sort_keys=True))
        print("\nepoch  accuracy  loss")
        for r in c.results(best["trial_id"]):
            print("%5d  %8.4f  %.4f" % (r["epoch"], r["accuracy"], r["loss"]))

        # Results carry the host and pid of the worker that produced them;
        # the trial's stdout/stderr files are in that worker's --work-dir.
        trial = c.trial(best["trial_id"])
        last = trial["last_result"] or {}
        names = {(w["host"], w["pid"]): w["name"] for w in c.workers()}
        worker = names.get((last.get("hostname"), last.get("pid")), "?")
        print("\nits output: <work dir of worker %s on %s>/%s/stdout and stderr"
              % (worker, last.get("hostname", "?"), best["trial_id"]))
        if trial.get("exports"):
            print("exports: %s" % json.dumps(trial["exports"], sort_keys=True))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
