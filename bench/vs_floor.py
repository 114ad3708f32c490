#!/usr/bin/python3
"""ztune against the floor of its dependencies, alternated in one run.

The floor is ../shared/bench/limit (one ROUTER, forked DEALER workers,
msgpack results, one fsync'd RocksDB WriteBatch per poll wake-up; no
scheduling, no JSON, no bookkeeping). Absolute numbers on a shared 2-core
machine move by 30% from run to run, so each round runs ztune and the floor
back to back (which one goes first alternates by round), and the ratio is
taken per round. Workloads (docs/benchmarks.md, "ztune against the floor"):

  durable    100 trials x 1000 iterations of noop on 2 workers, plain TCP,
             fsync'd commits; results/s at --buffer 1 and 10 (the floor has
             no buffer: it is compared against both)
  latency    1 trial x 5000 iterations: the step cycle's p50 and p99 (ztune:
             bench/throughput --latency; the floor: limit --latency)

Prints one JSON object: every round's figures, and per workload the median
over the rounds of ztune, the floor and their ratio.

    /usr/bin/python3 bench/vs_floor.py [--rounds 3] [--cpus-per-worker 50]

Needs the release build (scripts/build.sh); builds the floor into
build/limit (cmake) when it is not there. --cpus-per-worker 50 lets all 100
trials run at once, as the floor's 100 actors do.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOOR_SRC = os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "limit"))
FLOOR_BUILD = os.path.join(ROOT, "build", "limit")
FLOOR_BIN = os.path.join(FLOOR_BUILD, "limit")
THROUGHPUT = os.path.join(ROOT, "build", "release", "bench", "throughput")


def build_floor():
    if os.access(FLOOR_BIN, os.X_OK):
        return
    subprocess.run(["cmake", "-S", FLOOR_SRC, "-B", FLOOR_BUILD, "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", FLOOR_BUILD, "-j2"], check=True, stdout=subprocess.DEVNULL)


def floor(trials, iterations, workers, port, latency=False):
    args = [FLOOR_BIN, str(trials), str(iterations), str(workers), "--persist", "--sync"]
    if latency:
        args.append("--latency")
    out = subprocess.run(args, check=True, capture_output=True, text=True,
                         env=dict(os.environ, LIMIT_TCP=str(port)), timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ztune(shape, buffer, cpus_per_worker, latency=False):
    args = [THROUGHPUT, "--shapes", shape, "--buffer", str(buffer), "--security", "insecure",
            "--cpus-per-worker", str(cpus_per_worker)]
    if latency:
        args.append("--latency")
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=1800)
    run = json.loads(out.stdout)["runs"][0]
    if "error" in run:
        raise RuntimeError("bench/throughput: " + run["error"])
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus-per-worker", type=int, default=50)
    ap.add_argument("--port", type=int, default=24101, help="the floor's first TCP port")
    opts = ap.parse_args()
    if not os.access(THROUGHPUT, os.X_OK):
        sys.exit("build/release/bench/throughput is missing: run scripts/build.sh")
    build_floor()

    rounds = []
    port = opts.port
    for r in range(opts.rounds):
        ztune_first = r % 2 == 0
        got = {}

        def pair(name, run_ztune, run_floor):
            nonlocal port
            port += 1
            order = [("ztune", run_ztune), ("floor", run_floor)]
            for who, fn in (order if ztune_first else order[::-1]):
                got.setdefault(name, {})[who] = fn()

        pair("durable_buffer1",
             lambda: ztune("100x1000", 1, opts.cpus_per_worker),
             lambda: floor(100, 1000, 2, port))
        pair("durable_buffer10",
             lambda: ztune("100x1000", 10, opts.cpus_per_worker),
             lambda: floor(100, 1000, 2, port))
        pair("latency",
             lambda: ztune("1x5000", 1, opts.cpus_per_worker, latency=True),
             lambda: floor(1, 5000, 1, port, latency=True))
        row = {"round": r + 1, "first": "ztune" if ztune_first else "floor"}
        for name in ("durable_buffer1", "durable_buffer10"):
            z, f = got[name]["ztune"], got[name]["floor"]
            row[name] = {"ztune_results_per_s": round(z["results_per_s"]),
                         "floor_results_per_s": f["results_per_s"],
                         "ratio": z["results_per_s"] / f["results_per_s"],
                         "ztune_head_cpu_us_per_result": z["head_cpu_us_per_result"]}
        z, f = got["latency"]["ztune"]["step_cycle"], got["latency"]["floor"]
        row["latency"] = {"ztune_p50_us": z["p50_us"], "ztune_p99_us": z["p99_us"],
                          "floor_p50_us": f["p50_us"], "floor_p99_us": f["p99_us"],
                          "p50_ratio": z["p50_us"] / f["p50_us"],
                          "p99_ratio": z["p99_us"] / f["p99_us"]}
        rounds.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    def median(path):
        return statistics.median(row[path[0]][path[1]] for row in rounds)

    summary = {}
    for name in ("durable_buffer1", "durable_buffer10"):
        summary[name] = {k: median((name, k)) for k in rounds[0][name]}
    summary["latency"] = {k: median(("latency", k)) for k in rounds[0]["latency"]}
    print(json.dumps({"benchmark": "vs_floor", "rounds": rounds, "median": summary}, indent=2))


if __name__ == "__main__":
    main()
