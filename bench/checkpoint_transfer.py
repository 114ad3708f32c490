#!/usr/bin/python3
"""A large checkpoint made durable at the head, against the disk's own speed.

Workload (docs/benchmarks.md, "Large checkpoints"): one head and one worker on
loopback (plain TCP), one `blob` trial of --bytes checkpoint bytes (1 GiB by
default, the blob trainable's largest) that stops at iteration 1 with a
checkpoint at the end. The data directory is on the disk under test (a fresh
directory under --dir). Each round also writes the same number of bytes with
`dd oflag=direct conv=fsync` to that disk; which one goes first alternates by
round, and ratios are taken per round (absolute numbers on these machines
move by 30%).

Figures per round:
  dd_mb_s            the disk's sequential write speed (dd, O_DIRECT + fsync)
  head_mb_s          the head's own figure: bytes / time from the SAVE reply's
                     header to the file being durable (fdatasync, rename,
                     directory fsync), from its log line
  save_mb_s          bytes / time from the trial's first result being stored
                     to the checkpoint's record being visible to a client: the
                     worker's Save (the blob is generated), the envelope's
                     CRC, the transfer, the fsync and the commit
  head_extra_mib     the head's peak RSS (VmHWM) minus its RSS before the trial
  worker_extra_mib   the same for the worker, minus the checkpoint's own bytes
                     (the trainable's Save() returns them: one copy is the
                     trainable's, not the executor's)

Prints one JSON object: every round, and the median of each figure and of
head_mb_s / dd_mb_s and save_mb_s / dd_mb_s.

    /usr/bin/python3 bench/checkpoint_transfer.py [--bytes 1073741824] [--rounds 3] [--dir /work]

Needs the release build (scripts/build.sh) and python3-zmq / python3-msgpack
(the ztune client in python/).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "release")
HEAD = os.path.join(BUILD, "head", "ztune-head")
WORKER = os.path.join(BUILD, "worker", "ztune-worker")
sys.path.insert(0, os.path.join(ROOT, "python"))
from ztune.client import Client  # noqa: E402

MIB = 1 << 20


def proc_bytes(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


def wait_for(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.005)
    raise RuntimeError("timed out waiting for " + what)


def dd(directory, nbytes):
    path = os.path.join(directory, "dd.bin")
    start = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", "of=" + path, "bs=1M", f"count={nbytes // MIB}",
                    "oflag=direct", "conv=fsync"], check=True, capture_output=True)
    seconds = time.monotonic() - start
    os.unlink(path)
    return nbytes / seconds / 1e6


def ztune(directory, nbytes):
    run_dir = tempfile.mkdtemp(prefix="ckpt-bench-", dir=directory)
    procs = []
    try:
        endpoints = os.path.join(run_dir, "endpoints.json")
        head_log = open(os.path.join(run_dir, "head.log"), "w")
        head = subprocess.Popen([HEAD, "--data-dir", os.path.join(run_dir, "data"), "--insecure",
                                 "--worker-endpoint", "tcp://127.0.0.1:*",
                                 "--client-endpoint", "tcp://127.0.0.1:*",
                                 "--endpoints-file", endpoints],
                                stdout=head_log, stderr=subprocess.STDOUT)
        procs.append(head)
        wait_for(lambda: os.path.exists(endpoints), 30, "the head")
        with open(endpoints) as f:
            ep = json.load(f)
        worker_log = open(os.path.join(run_dir, "worker.log"), "w")
        worker = subprocess.Popen([WORKER, "--head", ep["worker_endpoint"], "--cpus", "1",
                                   "--insecure", "--work-dir", os.path.join(run_dir, "work"),
                                   "--name", "w"],
                                  stdout=worker_log, stderr=subprocess.STDOUT)
        procs.append(worker)
        client = Client(ep["client_endpoint"], insecure=True, timeout_s=60)
        wait_for(lambda: any(w["alive"] for w in client.workers()), 30, "the worker")
        head_before = proc_bytes(head.pid, "VmRSS")
        worker_before = proc_bytes(worker.pid, "VmRSS")
        exp = client.submit({"trainable": "blob", "param_space": {"checkpoint_bytes": nbytes},
                             "stop": {"training_iteration": 1},
                             "checkpoint": {"at_end": True}})
        trial_id = f"{exp}_00000"
        wait_for(lambda: client.trial(trial_id).get("iteration", 0) >= 1, 60, "result 1")
        first_result = time.monotonic()
        wait_for(lambda: client.trial(trial_id).get("checkpoints"), 600, "the checkpoint")
        recorded = time.monotonic()
        head_peak = proc_bytes(head.pid, "VmHWM")
        worker_peak = proc_bytes(worker.pid, "VmHWM")
        client.close()
        head_log.flush()
        with open(os.path.join(run_dir, "head.log")) as f:
            m = re.search(r"bytes durable ([0-9.]+) ms after its header", f.read())
        if m is None:
            raise RuntimeError("the head did not log the checkpoint file")
        head_ms = float(m.group(1))
        return {
            "head_mb_s": nbytes / (head_ms / 1000) / 1e6,
            "save_mb_s": nbytes / (recorded - first_result) / 1e6,
            "head_extra_mib": (head_peak - head_before) / MIB,
            "worker_extra_mib": (worker_peak - worker_before - nbytes) / MIB,
        }
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(run_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=ROOT, help="a directory on the disk under test")
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        figures = {}
        for which in (["dd", "ztune"] if r % 2 == 0 else ["ztune", "dd"]):
            if which == "dd":
                figures["dd_mb_s"] = dd(args.dir, args.bytes)
            else:
                figures.update(ztune(args.dir, args.bytes))
        figures["head_vs_dd"] = figures["head_mb_s"] / figures["dd_mb_s"]
        figures["save_vs_dd"] = figures["save_mb_s"] / figures["dd_mb_s"]
        rounds.append(figures)
        print(json.dumps({"round": r, **figures}), file=sys.stderr)
    median = {k: statistics.median(f[k] for f in rounds) for k in rounds[0]}
    print(json.dumps({"bytes": args.bytes, "rounds": rounds, "median": median}))


if __name__ == "__main__":
    main()
