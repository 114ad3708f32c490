#!/usr/bin/python3
"""bench/reads_bench.py: what a client read costs the head's loop by itself.

Under load (bench/fleet_bench.py steady) a read's latency is mostly its wait
for the loop's turn; this measures the read alone, on an idle head, so that a
change to how reads are answered shows as itself. Workload:

    build/release/bench/recovery --skip-reattach --trials 100000 \\
        --results-per-trial 1 --wal-tail-mb 1 --live-trials 10 --keep-dirs
    bench/reads_bench.py --data-dir DIR/data [--head BIN_A --head BIN_B] \\
        [--rounds 3] [--reads 40]

The recovery benchmark writes a store of one experiment of 100,000
TERMINATED trials (metric "loss", mode "min") plus one of 10 RUNNING trials;
DIR is its "cold_start.dir". Each round starts every --head in turn on the
same data directory (--insecure, loopback, free ports), waits until it
serves, then times, one after another and --reads times each: `experiments`
(every experiment's document, best trial included), `status` of the big
experiment with a page of 100 trials, and `trials` of it, a page of 100 at a
random offset. The first `experiments` after the start (after a `workers`
read that connected) is timed apart (`first_experiments_ms`: a read that
finds no best trial kept yet walks every trial). Heads alternate within a
round: absolute numbers on these machines move by 30%.

Prints one JSON document: per head, per read, p50/p99/max milliseconds over
all rounds, and the per-round p50s.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("ZTUNE_BUILD_DIR") or os.path.join(ROOT, "build", "release")
sys.path.insert(0, os.path.join(ROOT, "python"))
from ztune.client import Client  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentiles(samples):
    s = sorted(samples)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"count": len(s), "p50": round(at(0.5), 3), "p99": round(at(0.99), 3),
            "max": round(s[-1], 3)}


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def one_round(head, data_dir, reads, rng, log):
    port_w, port_c = free_port(), free_port()
    proc = subprocess.Popen(
        [head, "--data-dir", data_dir, "--worker-endpoint", f"tcp://127.0.0.1:{port_w}",
         "--client-endpoint", f"tcp://127.0.0.1:{port_c}", "--insecure",
         "--max-trials-per-experiment", "1000000"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = Client(f"tcp://127.0.0.1:{port_c}", insecure=True, timeout_s=60)
        deadline = time.monotonic() + 120
        while True:
            try:
                # Connected and served once by a read that walks nothing, so
                # that the first `experiments` below is timed alone (not the
                # connection's setup nor ZeroMQ's reconnect interval).
                client.request("workers")
                break
            except Exception:  # not serving yet
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{head} did not serve (see the log)")
                time.sleep(0.05)
        first = timed(lambda: client.request("experiments"))
        exps = client.experiments()
        big = max(exps, key=lambda e: e["total_trials"])
        exp, n = big["experiment_id"], big["total_trials"]
        if big.get("best_trial") is None:
            raise RuntimeError(f"{exp} has no best trial: not the store this benchmark reads")
        samples = {"experiments": [], "status": [], "trials_page": []}
        for _ in range(reads):
            samples["experiments"].append(timed(lambda: client.request("experiments")))
            samples["status"].append(
                timed(lambda: client.request("status", experiment_id=exp, limit=100)))
            samples["trials_page"].append(timed(lambda: client.request(
                "trials", experiment_id=exp, offset=rng.randrange(max(1, n - 100)), limit=100)))
        client.close()
        return first, n, samples
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True, help="a head's data directory (see above)")
    ap.add_argument("--head", action="append",
                    help="ztune-head binaries to alternate (default: the build's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reads", type=int, default=40, help="reads of each kind per round")
    args = ap.parse_args()
    heads = args.head or [os.path.join(BUILD, "head", "ztune-head")]
    rng = random.Random(1)
    out = {h: {"first_experiments_ms": [], "p50_per_round": [], "all": {}} for h in heads}
    everything = {h: {} for h in heads}
    with tempfile.TemporaryDirectory(prefix="ztune-reads-") as tmp:
        for r in range(args.rounds):
            for i, head in enumerate(heads):
                with open(os.path.join(tmp, f"head-{i}-{r}.log"), "w") as log:
                    first, n, samples = one_round(head, args.data_dir, args.reads, rng, log)
                out[head]["trials"] = n
                out[head]["first_experiments_ms"].append(round(first, 2))
                out[head]["p50_per_round"].append(
                    {k: percentiles(v)["p50"] for k, v in samples.items()})
                for k, v in samples.items():
                    everything[head].setdefault(k, []).extend(v)
    for head in heads:
        out[head]["all"] = {k: percentiles(v) for k, v in everything[head].items()}
    print(json.dumps({"rounds": args.rounds, "reads": args.reads, "heads": out}, indent=2))


if __name__ == "__main__":
    main()
