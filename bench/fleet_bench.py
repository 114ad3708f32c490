#!/usr/bin/python3
"""The head under a simulated fleet (bench/fleet): one real ztune-head with
CURVE on, W simulated workers of C CPUs each on their own connections, one
experiment of T one-CPU trials of simulated steps, and a client that reads
while it runs. Prints one JSON document.

Scenarios:
  steady   T trials run at once for --iterations steps of --step-ms. Once every
           trial is RUNNING, three measurement windows of --window-s: the fleet
           alone, then with a client that reads without pause, then (phase
           "spread", when the steps' jitter has spread the bursts the trials'
           common start made; --iterations must outlast 3 windows) the fleet
           alone again. Per window:
           ACK latency of results (the simulated worker's send to the head's
           ACK, i.e. arrival to durable commit plus both socket hops and the
           fleet's own queueing), results acknowledged per second, the longest
           silence of the head any registered worker saw, silence reconnects
           (missed heartbeats), the head's CPU; the head's own figures
           (head_stats: how long results waited in the head for their ACK,
           its turns and their phases); per thread kind of the head and of
           the fleet, CPU and time spent runnable but waiting for a core
           (/proc schedstat); in the second, the latency of
           `status EXP` (one page of 100 trials), `trials EXP` (a page of 100
           at a random offset) and `experiments`, timed one after another.
  restart  T trials run; once all are RUNNING the head is killed -9 and
           restarted on its data: the time from the kill until it serves a
           client, until every actor is re-attached (no trial awaiting_reattach)
           and until every trial trains again (none awaiting the replay of the
           step it was taking when the head died, at most one step later);
           new attempts (there should be none) and the experiment's outcome.
  storm    T trials run (max_failures 1) on W workers; --kill-workers of them
           die at once (a second fleet process, killed -9): when the head
           declares them dead, when their trials run again on live workers,
           that each was retried once and that no other trial was disturbed.

Usage: bench/fleet_bench.py steady --workers 1000 --cpus 10 --trials 10000 \\
           --step-ms 1000 --iterations 40
On a machine of 4 or more cores, --head-cpus 0-1 --fleet-cpus 2-3 keeps the
head apart from the fleet (and from this benchmark and its reader), as a head
with the machines it serves elsewhere would be; --head-nice N runs it under
nice -n N. Binaries from build/release (ZTUNE_BUILD_DIR overrides).
"""
import argparse
import collections
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("ZTUNE_BUILD_DIR") or os.path.join(ROOT, "build", "release")
HEAD = os.path.join(BUILD, "head", "ztune-head")
CLI = os.path.join(BUILD, "client", "ztune")
FLEET = os.path.join(BUILD, "bench", "fleet", "fleet")
sys.path.insert(0, os.path.join(ROOT, "python"))
from ztune.client import Client  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout_s, what, interval_s=0.1):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(interval_s)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def percentiles(samples):
    if not samples:
        return {"count": 0}
    s = sorted(samples)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"count": len(s), "p50": round(at(0.5), 3), "p99": round(at(0.99), 3),
            "max": round(s[-1], 3)}


def histogram_between(start, end):
    """Percentiles of what a head_stats histogram counted between two
    replies (buckets are cumulative: [[upper_us, count], ...]); values in ms,
    each the upper bound of its bucket (within 12.5% above)."""
    before = {upper: n for upper, n in start["buckets"]}
    counts = [(upper, n - before.get(upper, 0)) for upper, n in end["buckets"]]
    counts = [(upper, n) for upper, n in counts if n > 0]
    total = sum(n for _, n in counts)
    if total == 0:
        return {"count": 0}

    def at(q):
        rank, seen = max(1, math.ceil(q * total)), 0
        for upper, n in counts:
            seen += n
            if seen >= rank:
                return round(upper / 1000, 2)

    return {"count": total, "p50": at(0.5), "p99": at(0.99), "max": at(1.0)}


def head_times_between(start, end):
    """The head's own figures for a window, from head_stats at its ends."""
    return {phase: histogram_between(start["times"][phase], end["times"][phase])
            for phase in end["times"]}


def thread_times(pid):
    """{thread kind: [on-CPU ns, runnable-but-waiting ns]} of a process's
    threads from /proc/PID/task/*/schedstat: "loop" (the main thread),
    "zmq io", "other"."""
    times = {"loop": [0, 0], "zmq io": [0, 0], "other": [0, 0]}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
        except OSError:  # the thread ended
            continue
        kind = ("loop" if int(tid) == pid else
                "zmq io" if comm.startswith("ZMQbg/IO") else "other")
        times[kind][0] += run_ns
        times[kind][1] += wait_ns
    return times


def thread_share(start, end, seconds):
    """Per thread kind, CPU and run-queue wait in seconds per second between
    two thread_times(): how much a thread ran, and how long it was ready to
    run but another process (or thread) had the core."""
    return {kind: {"cpu": round((end[kind][0] - start[kind][0]) / 1e9 / seconds, 3),
                   "runqueue_wait": round((end[kind][1] - start[kind][1]) / 1e9 / seconds, 3)}
            for kind in end}


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Cluster:
    """A head with CURVE, its keys, the fleet, and an admin client."""

    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="ztune-fleet-bench-")
        self.data = os.path.join(self.dir, "data")
        self.keys = os.path.join(self.dir, "keys")
        os.makedirs(self.keys)
        self.worker_port, self.client_port = free_port(), free_port()
        self.procs = []
        # The head makes its key pair (data/head.key, head.pub) and exits.
        subprocess.run([HEAD, "--data-dir", self.data, "--print-public-key"],
                       capture_output=True, text=True, check=True)
        self.head_pub = os.path.join(self.data, "head.pub")
        self.worker_key = self.keygen("worker")
        self.client_key = self.keygen("admin")
        with open(os.path.join(self.keys, "workers.allow"), "w") as f:
            f.write(self.public("worker") + " fleet\n")
        with open(os.path.join(self.keys, "clients.allow"), "w") as f:
            f.write(self.public("admin") + " admin bench\n")
        self.head = None
        self.fleet = None  # the first fleet started

    def keygen(self, name):
        base = os.path.join(self.keys, name)
        subprocess.run([CLI, "keygen", "--out", base], capture_output=True, check=True)
        return base + ".key"

    def public(self, name):
        with open(os.path.join(self.keys, name + ".pub")) as f:
            return next(l.split("=", 1)[1].strip() for l in f if l.startswith("public-key"))

    def spawn(self, args, log, cpus=None):
        """Starts `args` logging to `log`; on the CPUs in `cpus` (a set of
        ints) when given, and on this process's otherwise."""
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        with open(os.path.join(self.dir, log), "ab") as f:
            p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=pin)
        self.procs.append(p)
        return p

    def start_head(self):
        # --head-nice: the head's threads (and the RocksDB threads it starts)
        # get the cores before the fleet and the reader, as a head on a
        # machine of its own would; the fleet's ACK latency then also holds
        # the fleet's own waits for a core, the head's result_wait does not.
        nice = ["nice", "-n", str(self.args.head_nice)] if self.args.head_nice else []
        self.head = self.spawn(
            [*nice, HEAD, "--data-dir", self.data,
             "--worker-endpoint", f"tcp://127.0.0.1:{self.worker_port}",
             "--client-endpoint", f"tcp://127.0.0.1:{self.client_port}",
             "--workers-allow", os.path.join(self.keys, "workers.allow"),
             "--clients-allow", os.path.join(self.keys, "clients.allow"),
             "--heartbeat-ms", str(self.args.heartbeat_ms), "--liveness", str(self.args.liveness),
             "--max-trials-per-experiment", str(max(100000, self.args.trials))],
            "head.log", cpus=self.args.head_cpus)
        started = time.monotonic()
        wait_for(lambda: self.try_client(), 60, "the head to serve")
        return time.monotonic() - started

    def try_client(self):
        try:
            c = self.client(timeout_s=1)
            c.experiments()
            c.close()
            return True
        except Exception:  # not serving yet
            return False

    def client(self, timeout_s=30):
        return Client(f"tcp://127.0.0.1:{self.client_port}", client_key=self.client_key,
                      head_key=self.head_pub, timeout_s=timeout_s)

    def start_fleet(self, workers=None, prefix="sim", extra=()):
        """The fleet of --workers (or `workers`) simulated workers named
        PREFIX0, PREFIX1, ...; returns its process (the first is self.fleet)."""
        stats = os.path.join(self.dir, f"fleet-{prefix}-stats.json")
        proc = self.spawn(
            [FLEET, "--head", f"tcp://127.0.0.1:{self.worker_port}", "--key", self.worker_key,
             "--head-key", self.head_pub, "--workers", str(workers or self.args.workers),
             "--cpus", str(self.args.cpus), "--step-ms", str(self.args.step_ms),
             "--heartbeat-ms", str(self.args.heartbeat_ms), "--liveness", str(self.args.liveness),
             "--name-prefix", prefix, "--report-s", "2", "--stats-file", stats,
             # Results sent per 100 ms (kept with --keep).
             "--series-file", os.path.join(self.dir, f"fleet-{prefix}-series.txt"),
             *(["--no-coalesce"] if self.args.no_coalesce else []),
             *(["--no-ack-trains"] if self.args.no_ack_trains else []),
             *(["--no-one-frame"] if self.args.no_one_frame else []), *extra],
            f"fleet-{prefix}.log")  # on --fleet-cpus: this process's, inherited
        if self.fleet is None:
            self.fleet, self.fleet_stats, self.window_stats = proc, stats, []
        return proc

    def next_window(self):
        """Ends the fleet's measurement window and starts the next; returns
        the figures of the window that ended."""
        path = f"{self.fleet_stats}.window{len(self.window_stats)}"
        self.fleet.send_signal(signal.SIGUSR1)
        wait_for(lambda: os.path.exists(path), 30, "the fleet's window figures", 0.02)
        with open(path) as f:
            self.window_stats.append(json.load(f))
        return self.window_stats[-1]

    def fleet_result(self):
        self.fleet.send_signal(signal.SIGTERM)
        self.fleet.wait(timeout=120)
        with open(self.fleet_stats) as f:
            return json.load(f)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def spec(args, max_failures=0):
    return {"name": "fleet-bench", "trainable": "sim",
            "param_space": {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
            "num_samples": args.trials, "metric": "score", "mode": "max",
            "stop": {"training_iteration": args.iterations},
            "resources": {"bundles": [{"CPU": 1}]},
            "checkpoint": {"frequency": args.checkpoint_every}, "max_failures": max_failures,
            "seed": 1}


def counts(client, exp):
    trials = client.trials(exp)
    return collections.Counter(t["status"] for t in trials), trials


class Reader(threading.Thread):
    """Times client reads while the experiment runs."""

    def __init__(self, cluster, exp, trials):
        super().__init__(daemon=True)
        self.client = cluster.client()
        self.exp, self.trials = exp, trials
        self.samples = collections.defaultdict(list)
        self.errors = 0
        self.stop = threading.Event()

    def run(self):
        rng = random.Random(1)
        reads = [
            ("status", lambda: self.client.request("status", experiment_id=self.exp, limit=100)),
            ("trials_page", lambda: self.client.request(
                "trials", experiment_id=self.exp,
                offset=rng.randrange(max(1, self.trials - 100)), limit=100)),
            ("experiments", lambda: self.client.request("experiments")),
        ]
        while not self.stop.is_set():
            for name, read in reads:
                t0 = time.perf_counter()
                try:
                    read()
                except Exception:
                    self.errors += 1
                    continue
                self.samples[name].append((time.perf_counter() - t0) * 1000)

    def result(self):
        self.stop.set()
        self.join(timeout=60)
        self.client.close()
        out = {name: percentiles(s) for name, s in self.samples.items()}
        out["errors"] = self.errors
        return out


def message_counts(start, end):
    """TRAINs and results per message between two fleet statistics: how
    much the coalesced TRAINS and RESULTS (docs/protocol.md §4.12) grouped."""
    def delta(key, sub=None):
        a, b = (start.get(key, 0), end.get(key, 0)) if sub is None else (
            start["commands"].get(sub, 0), end["commands"].get(sub, 0))
        return b - a
    trains = delta("commands", "TRAIN")
    in_acks = delta("trains_in_acks")
    # TRAIN and TRAINS messages, and the TRAINs they carried; those inside an
    # ACK (docs/protocol.md §4.11) came in no message of their own.
    train_messages = trains - delta("coalesced_trains") - in_acks + delta("commands", "TRAINS")
    alone = trains - in_acks
    results = delta("results_sent") + delta("results_replayed")
    result_messages = delta("result_messages")
    return {"train_messages": train_messages,
            "trains_per_message": round(alone / train_messages, 2) if train_messages else None,
            "trains_in_acks": in_acks,
            "acks": delta("commands", "ACK"),
            "heartbeats": delta("commands", "HEARTBEAT"),
            "result_messages": result_messages,
            "results_per_message": round(results / result_messages, 2) if result_messages else None}


def steady(args, c):
    c.start_head()
    c.start_fleet()
    client = c.client()
    wait_for(lambda: sum(w["alive"] for w in client.workers()) == args.workers, 300,
             "every simulated worker to register")
    head_cpu0 = proc_cpu_s(c.head.pid)
    t0 = time.monotonic()
    exp = client.submit(spec(args))
    wait_for(lambda: counts(client, exp)[0].get("RUNNING", 0) == args.trials, 600,
             "every trial to run", interval_s=0.5)
    ramp_s = time.monotonic() - t0
    # Window 1: the fleet alone, right after every trial started (their
    # steps still end in the bursts their starts made). Window 2: the same
    # with a client reading without pause. Window 3: the fleet alone again,
    # once the steps' jitter has spread their ends. The fleet writes each
    # window's figures when it ends.
    c.next_window()
    head_stats = client.head_stats()
    windows = []
    for with_reads, phase in ((False, "start"), (True, "start"), (False, "spread")):
        reader = Reader(c, exp, args.trials) if with_reads else None
        if reader:
            reader.start()
        w0, cpu0 = time.monotonic(), proc_cpu_s(c.head.pid)
        fleet_cpu0 = proc_cpu_s(c.fleet.pid)
        head_threads0, fleet_threads0 = thread_times(c.head.pid), thread_times(c.fleet.pid)
        time.sleep(args.window_s)
        seconds = time.monotonic() - w0
        window = {"client_reads": with_reads, "phase": phase, "seconds": round(seconds, 2),
                  "head_cpu_s_per_s": round((proc_cpu_s(c.head.pid) - cpu0) / seconds, 3),
                  "head_threads_s_per_s": thread_share(
                      head_threads0, thread_times(c.head.pid), seconds),
                  "fleet_threads_s_per_s": thread_share(
                      fleet_threads0, thread_times(c.fleet.pid), seconds)}
        if reader:
            window["reads_ms"] = reader.result()
        start, end = c.window_stats[-1], c.next_window()
        head_stats, head_stats0 = client.head_stats(), head_stats
        # The head's part of the ACK latency (result_wait) and its turns,
        # measured in the head (docs/client-protocol.md, head_stats).
        window["head_ms"] = head_times_between(head_stats0, head_stats)
        window["results_acked_per_s"] = round(
            (end["results_acked"] - start["results_acked"]) / end["window_s"])
        window.update({k: end[k] for k in ("ack_latency_ms", "max_head_silence_ms")})
        # The most results the fleet sent in one 100 ms of the window.
        window["peak_results_per_100ms"] = end.get("peak_results_per_100ms")
        # How late the fleet ran its timers (steps ending late, and together).
        window["fleet_timer_lateness_ms"] = end.get("timer_lateness_ms")
        window.update(message_counts(start, end))
        window.update({k: end[k] - start[k] for k in (
            "silence_reconnects", "disconnects_received")})
        window["fleet_cpu_s_per_s"] = round((proc_cpu_s(c.fleet.pid) - fleet_cpu0) / seconds, 3)
        windows.append(window)
    final = client.wait(exp, poll_s=1, timeout_s=args.iterations * args.step_ms / 1000 * 3 + 600)
    statuses, _ = counts(client, exp)
    fleet = c.fleet_result()
    return {
        "ramp_up_s": round(ramp_s, 2),
        "windows": windows,
        "head_cpu_s_total": round(proc_cpu_s(c.head.pid) - head_cpu0, 2),
        "head_rss_mib": round(proc_kib(c.head.pid, "VmRSS") / 1024, 1),
        "head_peak_rss_mib": round(proc_kib(c.head.pid, "VmHWM") / 1024, 1),
        "finished": final["finished"],
        "statuses": dict(statuses),
        "fleet_total": {k: fleet[k] for k in (
            "results_acked", "results_sent", "results_replayed", "silence_reconnects",
            "disconnects_received", "connection_cuts", "undecodable", "refusals")},
    }


def restart(args, c):
    c.start_head()
    c.start_fleet()
    client = c.client()
    wait_for(lambda: sum(w["alive"] for w in client.workers()) == args.workers, 300,
             "every simulated worker to register")
    exp = client.submit(spec(args))
    wait_for(lambda: counts(client, exp)[0].get("RUNNING", 0) == args.trials, 600,
             "every trial to run", interval_s=0.5)
    time.sleep(args.window_s)
    before = {t["trial_id"]: t.get("attempt") for t in client.trials(exp)}
    client.close()
    os.kill(c.head.pid, signal.SIGKILL)
    c.head.wait()
    killed = time.monotonic()
    serving_s = c.start_head()
    client = c.client()

    # Re-attached: the head knows each trial's actor again (its worker
    # registered and listed it); an actor whose step was running when the head
    # died is then awaiting_replay until that step's batch arrives.
    def phases_clear(waiting):
        st, trials = counts(client, exp)
        return st.get("RUNNING", 0) == args.trials and all(
            t.get("phase") not in waiting for t in trials)
    wait_for(lambda: phases_clear(("awaiting_reattach",)), 600, "every actor re-attached",
             interval_s=0.02)
    reattach_s = time.monotonic() - killed
    wait_for(lambda: phases_clear(("awaiting_reattach", "awaiting_replay", "starting")), 600,
             "every trial training again", interval_s=0.02)
    training_s = time.monotonic() - killed
    after = {t["trial_id"]: t.get("attempt") for t in client.trials(exp)}
    final = client.wait(exp, poll_s=1, timeout_s=args.iterations * args.step_ms / 1000 * 3 + 600)
    statuses, _ = counts(client, exp)
    fleet = c.fleet_result()
    return {"head_serving_after_restart_s": round(serving_s, 3),
            "all_reattached_after_kill_s": round(reattach_s, 3),
            "all_training_again_after_kill_s": round(training_s, 3),
            "new_attempts": sum(1 for k in before if after.get(k) != before[k]),
            "finished": final["finished"], "statuses": dict(statuses),
            "fleet_total": {k: fleet[k] for k in (
                "epoch_changes", "silence_reconnects", "results_replayed", "refusals")}}


def storm(args, c):
    """--kill-workers of the --workers die at once: a second fleet process
    hosts them and is killed -9 (every connection gone in the same instant,
    nothing said). Trials leave room (T below the slots of the survivors) so
    that the dead workers' trials can start again at once."""
    survivors = args.workers - args.kill_workers
    c.start_head()
    c.start_fleet(workers=survivors, prefix="live")
    doomed = c.start_fleet(workers=args.kill_workers, prefix="doomed")
    client = c.client()
    wait_for(lambda: sum(w["alive"] for w in client.workers()) == args.workers, 300,
             "every simulated worker to register")
    exp = client.submit(spec(args, max_failures=1))
    wait_for(lambda: counts(client, exp)[0].get("RUNNING", 0) == args.trials, 600,
             "every trial to run", interval_s=0.5)
    time.sleep(args.window_s)
    before = {t["trial_id"]: (t["attempt"], t.get("worker") or "") for t in client.trials(exp)}
    on_doomed = {k for k, (_, w) in before.items() if w.startswith("doomed")}
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    killed = time.monotonic()
    wait_for(lambda: sum(not w["alive"] for w in client.workers()) == args.kill_workers, 600,
             "the dead workers to be declared dead", interval_s=0.02)
    dead_s = time.monotonic() - killed

    def restarted():
        trials = {t["trial_id"]: t for t in client.trials(exp)}
        return all(trials[k]["attempt"] > before[k][0] and trials[k]["status"] == "RUNNING" and
                   (trials[k].get("worker") or "").startswith("live") for k in on_doomed)
    wait_for(restarted, 600, "the dead workers' trials to run again", interval_s=0.05)
    restarted_s = time.monotonic() - killed
    final = client.wait(exp, poll_s=1, timeout_s=args.iterations * args.step_ms / 1000 * 3 + 600)
    after = {t["trial_id"]: t for t in client.trials(exp)}
    statuses = collections.Counter(t["status"] for t in after.values())
    fleet = c.fleet_result()
    return {"killed_workers": args.kill_workers,
            "trials_on_killed_workers": len(on_doomed),
            "declared_dead_after_s": round(dead_s, 3),
            "their_trials_running_again_after_s": round(restarted_s, 3),
            "retried_once": sum(after[k]["attempt"] == before[k][0] + 1 for k in on_doomed),
            "others_disturbed": sum(after[k]["attempt"] != before[k][0] or
                                    after[k]["num_failures"] != 0
                                    for k in before if k not in on_doomed),
            "finished": final["finished"], "statuses": dict(statuses),
            "fleet_live": {k: fleet[k] for k in (
                "silence_reconnects", "disconnects_received", "refusals")}}


def cpu_list(text):
    """A set of CPU numbers from taskset's list syntax ("0-1,4"), each one this
    process may run on."""
    cpus = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a CPU list such as 0-1,4")
    if not cpus:
        raise argparse.ArgumentTypeError(f"'{text}' names no CPU")
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        raise argparse.ArgumentTypeError(
            f"CPUs {sorted(cpus - allowed)} are not among this machine's "
            f"{sorted(allowed)}")
    return cpus


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenario", choices=["steady", "restart", "storm"])
    ap.add_argument("--workers", type=int, default=100)
    ap.add_argument("--cpus", type=int, default=10)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--step-ms", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--window-s", type=float, default=10, help="measured time once all run")
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    ap.add_argument("--liveness", type=int, default=3)
    ap.add_argument("--kill-workers", type=int, default=100, help="storm: workers that die")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    ap.add_argument("--no-coalesce", action="store_true",
                    help="the fleet announces no TRAINS/RESULTS: a message per TRAIN and RESULT")
    ap.add_argument("--no-ack-trains", action="store_true",
                    help="the fleet does not announce ack_trains: no TRAIN comes inside an ACK")
    ap.add_argument("--no-one-frame", action="store_true",
                    help="the fleet does not announce one_frame: version, command and header "
                         "in frames of their own")
    ap.add_argument("--head-nice", type=int, default=0,
                    help="run the head under nice -n N (negative: before the fleet; needs root)")
    ap.add_argument("--head-cpus", type=cpu_list, default=None,
                    help="CPUs the head runs on (as taskset -c: 0-1,4); default any")
    ap.add_argument("--fleet-cpus", type=cpu_list, default=None,
                    help="CPUs the fleets, and this benchmark with its reader, run on: on a "
                         "machine of 4+ cores, apart from --head-cpus, the fleet stands apart "
                         "from the head as the machines it simulates would; default any")
    args = ap.parse_args()
    if args.fleet_cpus:
        # The reader is a client machine too; the fleets inherit it.
        os.sched_setaffinity(0, args.fleet_cpus)
    c = Cluster(args)
    try:
        run = {"steady": steady, "restart": restart, "storm": storm}[args.scenario]
        result = run(args, c)
    finally:
        c.close()
    doc = {"scenario": args.scenario, "workers": args.workers, "cpus_per_worker": args.cpus,
           "trials": args.trials, "step_ms": args.step_ms, "iterations": args.iterations,
           "heartbeat_ms": args.heartbeat_ms, "liveness": args.liveness,
           "head_nice": args.head_nice,
           "head_cpus": sorted(args.head_cpus) if args.head_cpus else None,
           "fleet_cpus": sorted(args.fleet_cpus) if args.fleet_cpus else None,
           "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), **result}
    if args.keep:
        doc["run_dir"] = c.dir
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
