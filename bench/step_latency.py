"""Latency of one synchronous training step (a step that waits for its
result), lazytpu vs eager, in one run:

    .venv/bin/python bench/step_latency.py [--runs 7] [--steps 200]
        [--model mlp|cnn|transformer] [--ways eager,inductor,lazy,compile]
        [--ab LAZYTPU_INLINE_EXEC] [--no-breakdown] [--pipelined]
        [--jax-python PATH]

A step is zero_grad, forward, cross entropy, backward, the optimizer step
(SGD with momentum; AdamW for the transformer) and, on lazytpu, mark_step()
+ wait_device_ops(): nothing of step N+1 overlaps step N, so every fixed
cost of a step boundary shows. Ways: eager (PyTorch on the CPU), inductor
(torch.compile(model), default backend, optimizer eager: synchronous like
eager), lazy (every op traced) and compile (torch.compile(model,
backend="lazytpu")); every peer at its own defaults. Every run of every way is a fresh process of
its own (built, warmed up, then `steps` timed steps), the ways in turn,
alternating their order from run to run: one process running two ways would
handicap the second (after torch.compile has run in a process, eager CPU ops
in it run slower: the transformer's eager step took 62 ms beside the compile
way against 35 ms on its own). Reported per way over all its timed steps:
the 10th percentile and the median step time, and their ratios to eager
(and compile's to inductor). Then the spread of the runs (issue 25: no run
worse than 1.15x its median): per way, every run's median step time, the
worst run / the median of the runs, flagged "SPREAD" above 1.15x, and after
each run time the machine's core-to-core round trip measured right after
that run (build/bench_c2c, ns: "0.712@55"): on this VM the two vCPUs
sometimes sit far apart for minutes (~320 ns instead of ~55), and every way's
runs then fall on a level 2-2.5x slower.

Breakdown (default on): the lazytpu ways run once more in a child process
with LAZYTPU_PROFILE=1, which records per step boundary where the time goes
(metrics "StepTime::<phase>", lazy/sync.c, lazy/submit.c, lazy/device.c):

  trace      host time between two step boundaries (ops traced, Python,
             compiled graphs replayed)
  capture    roots taken, graph captured and hashed
  program    compile cache lookup (or compile)
  buffers    parameter binding, donation, output allocation, output nodes
  submit     the job queued (and its tensors replaced)
  wake       queued -> an executor (the core's worker, or the waiting
             caller inline) starts the job
  execute    the program runs (kernels; "KernelTime::*" splits it)
  done       the program finished -> the waiting caller returns
  wait       the caller's whole wait (wait_device_ops / the value read)
  kernels    the sum of the programs' "KernelTime::*"

--ab VAR runs the whole comparison twice per round in child processes,
VAR=0 and VAR=1 alternately (--ab VAR=a,b: a and b; rounds = --runs), and
prints both sides' medians and ratios to eager: an A/B of a lazytpu switch on a loaded machine.
--ab-tree DIR does the same with another source tree's build (DIR/python,
DIR/build, e.g. main's) as side "base" against this one's ("this").
--pipelined: the lazytpu ways do not wait after each step (mark_step() only,
the host traces step N+1 while the core runs step N; a run waits once at its
end, counted in its last step): to check that a change for the synchronous
step does not slow the pipelined one.
--jax-python PATH adds JAX jit on the CPU as a peer (way "jax", bench/jax_peer.py
run by PATH, an interpreter of a scratch environment with JAX: the same model
and optimizer, one jitted donated step, waited for per step; JAX at its own
defaults); it always waits per step (also under --pipelined).
The load average is printed: absolute times on a shared machine are noisy;
compare ratios taken in the same run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.compile  # noqa: F401  (the "lazytpu" dynamo backend)
import lazytpu.metrics as met

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from models import CNN, mlp, Transformer  # noqa: E402  (checks the OpenMP variables)

# name: (model, input shape, optimizer, default steps per run)
MODELS = {
    "mlp": (mlp, (64, 784), "sgd", 200),
    "cnn": (CNN, (32, 1, 28, 28), "sgd", 40),
    "transformer": (lambda: Transformer(d=128, heads=4, ff=512, layers=2), (16, 64, 128),
                    "adamw", 10),
}
PHASES = ["trace", "capture", "program", "buffers", "submit", "wake", "execute", "done",
          "wait"]


PIPELINED = False     # --pipelined: no wait after each step


class Way:
    def __init__(self, name, way):
        make, shape, opt, _ = MODELS[name]
        torch.manual_seed(0)
        self.lt = way in ("lazy", "compile")
        dev = lazytpu.device() if self.lt else torch.device("cpu")
        self.model = make().to(dev)
        if opt == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(*shape).to(dev)
        self.y = torch.randint(0, 10, (shape[0],)).to(dev)
        self.fwd = self.model
        if way == "compile":
            self.fwd = torch.compile(self.model, backend="lazytpu")
        elif way == "inductor":
            self.fwd = torch.compile(self.model)

    def step(self):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.fwd(self.x), self.y)
        loss.backward()
        if self.lt:
            lazytpu.optimizer_step(self.opt)
            lazytpu.mark_step()
            if not PIPELINED:
                lazytpu.wait_device_ops()
        else:
            self.opt.step()
        return loss

    def run(self, steps):
        """Per-step times (s) of `steps` steps."""
        ts = []
        t0 = time.perf_counter()
        for i in range(steps):
            self.step()
            if PIPELINED and self.lt and i == steps - 1:
                lazytpu.wait_device_ops()
            t1 = time.perf_counter()
            ts.append(t1 - t0)
            t0 = t1
        return ts


def measure(name, ways, runs, steps, warmup):
    built = {}
    for w in ways:
        built[w] = Way(name, w)
        for _ in range(warmup):
            built[w].step()
    times = {w: [] for w in ways}
    for _ in range(runs):
        for w in ways:
            times[w] += built[w].run(steps)
    for w in ways:
        float(built[w].step().detach().cpu())      # the steps really ran
    return times, built


def breakdown(name, ways, steps, warmup):
    """Per-phase mean us per step boundary (needs LAZYTPU_PROFILE=1)."""
    out = {}
    for w in ways:
        if w in ("eager", "inductor"):
            continue
        b = Way(name, w)
        for _ in range(warmup):
            b.step()
        met.clear_all()
        n = steps
        for _ in range(n):
            b.step()
        row = {}
        for ph in PHASES:
            d = met.metric_data("StepTime::" + ph)
            if d:
                row[ph] = (d[1] / n / 1e3, d[0] / n)    # us per step, samples per step
        kt = 0.0
        for m in met.metric_names():
            if m.startswith("KernelTime::"):
                kt += met.metric_data(m)[1]
        row["kernels"] = (kt / n / 1e3, 0)
        out[w] = row
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def print_times(name, ways, times, tag=""):
    """Per way over all its steps: the 10th percentile (the least disturbed
    steps: on a loaded machine the closest to a quiet one) and the median."""
    p10 = {w: pct(times[w], 0.1) for w in ways}
    med = {w: statistics.median(times[w]) for w in ways}
    for w in ways:
        line = "%-6s %-8s%s p10 %7.3f ms  median %7.3f ms  (%d steps)" % (
            name, w, tag, p10[w] * 1e3, med[w] * 1e3, len(times[w]))
        if "eager" in med:
            line += "  vs eager: p10 %.2fx median %.2fx" % (p10[w] / p10["eager"],
                                                           med[w] / med["eager"])
        if w == "compile" and "inductor" in med:
            line += "  vs inductor: p10 %.2fx median %.2fx" % (p10[w] / p10["inductor"],
                                                              med[w] / med["inductor"])
        print(line, flush=True)
    return med


SPREAD_MAX = 1.15     # issue 25: no run worse than 1.15x its median


def print_spread(name, ways, runs, tag="", c2c=None):
    """Per way: each run's median step time (a run = one process), the
    worst run / the median of the runs; flagged above SPREAD_MAX. With the
    probe (c2c_ns), each run's core-to-core round trip in ns follows its
    time ("0.712@55"), and runs measured with the CPUs far apart (a round
    trip over twice the least of the whole benchmark) are counted."""
    least = min((v for w in ways for v in (c2c or {}).get(w, []) if v), default=None)
    for w in ways:
        meds = [statistics.median(r) for r in runs[w] if r]
        if not meds:
            continue
        lat = (c2c or {}).get(w, [])
        mid = statistics.median(meds)
        worst = max(meds) / mid
        cells = ["%.3f" % (m * 1e3) + ("@%d" % lat[i] if i < len(lat) and lat[i] else "")
                 for i, m in enumerate(meds)]
        far = sum(1 for v in lat if v and least and v > 2 * least)
        print("%-6s %-8s%s runs (median ms): %s  worst/median %.2fx%s%s" % (
            name, w, tag, " ".join(cells), worst,
            "  SPREAD > %.2fx" % SPREAD_MAX if worst > SPREAD_MAX else "",
            "  (%d of %d runs with the CPUs far apart)" % (far, len(meds)) if far else ""),
            flush=True)


def child(args):
    """One measurement in this process; prints a JSON line."""
    ways = args.ways.split(",")
    steps = args.steps or MODELS[args.model][3]
    if args.breakdown_only:
        print(json.dumps({"breakdown": breakdown(args.model, ways, steps, args.warmup)}))
        return
    times, _ = measure(args.model, ways, args.runs, steps, args.warmup)
    print(json.dumps({"times": times}))


def run_child(args, env_extra, extra):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", args.model,
           "--ways", args.ways, "--steps", str(args.steps), "--warmup", str(args.warmup)] + \
        (["--pipelined"] if args.pipelined else []) + extra
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("child failed:\n" + p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_jax(args):
    """One run of the JAX peer (bench/jax_peer.py: the same model, one
    jitted step waited for per step) under the --jax-python interpreter."""
    cmd = [args.jax_python, os.path.join(HERE, "jax_peer.py"), "--model", args.model,
           "--steps", str(args.steps or MODELS[args.model][3]), "--warmup", str(args.warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("jax peer failed:\n" + p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])["times"]


def c2c_ns():
    """The machine's core-to-core round trip right now (build/bench_c2c:
    two threads pinned to CPUs 0 and 1 hand a cache line back and forth),
    in ns; None without the probe. This VM's two vCPUs sometimes sit far
    apart for minutes (~320 ns instead of ~55): every kernel two threads
    share then runs 2-2.5x slower, eager's as well, and a run falls on the
    slow level. Printed per run beside its step time."""
    exe = os.path.join(os.environ.get("LAZYTPU_BIN_DIR") or os.path.join(HERE, "..", "build"),
                       "bench_c2c")
    if not os.path.exists(exe):
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout
        return int(float(out.split()[0])) or None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def run_ways(args, ways, r, env_extra):
    """Run r of every way, each in a fresh process of its own (built, warmed
    up, one run of steps), in alternating order: (way, per-step times, the
    core-to-core round trip measured right after the run)."""
    for w in (ways if r % 2 == 0 else ways[::-1]):
        if w == "jax":
            got = run_jax(args)
        else:
            got = run_child(args, env_extra, ["--runs", "1", "--ways", w])["times"][w]
        yield w, got, c2c_ns()


def print_breakdown(bd, tag=""):
    for w, row in bd.items():
        parts = ["%s %.0f" % (ph, row[ph][0]) for ph in PHASES + ["kernels"] if ph in row]
        print("  %-8s%s us/step: %s" % (w, tag, ", ".join(parts)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mlp", choices=list(MODELS))
    p.add_argument("--ways", default="eager,inductor,lazy,compile")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--steps", type=int, default=0, help="steps per run (0: per model)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ab", default=None,
                   help="a LAZYTPU_ switch: alternate =0 / =1 runs (VAR=a,b: those values)")
    p.add_argument("--ab-tree", default=None,
                   help="another tree (its python/ and build/): alternate base / this runs")
    p.add_argument("--no-breakdown", action="store_true")
    p.add_argument("--pipelined", action="store_true",
                   help="lazytpu ways: no wait after each step (one at the end of a run)")
    p.add_argument("--jax-python", default=None,
                   help="an interpreter with JAX: adds the way jax (bench/jax_peer.py, jit on "
                        "the CPU), an optional peer (lazytpu's .venv has no JAX)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--breakdown-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    global PIPELINED
    PIPELINED = args.pipelined
    if args.child:
        child(args)
        return
    ways = args.ways.split(",") + (["jax"] if args.jax_python else [])
    load0 = os.getloadavg()[0]
    omp = " ".join("%s=%s" % kv for kv in sorted(os.environ.items()) if kv[0].startswith("OMP_"))
    print("torch %s, %d threads, load average %.2f, %s" % (
        torch.__version__, torch.get_num_threads(), load0, omp or "no OMP_* variable set"))
    if args.ab or args.ab_tree:
        # side tag -> the child's extra environment
        if args.ab_tree:
            base = os.path.abspath(args.ab_tree)
            sides = {"base": {"PYTHONPATH": os.path.join(base, "python"),
                              "LAZYTPU_BIN_DIR": os.path.join(base, "build")},
                     "this": {}}
        else:
            var, _, vals = args.ab.partition("=")
            sides = {"%s=%s" % (var, v): {var: v} for v in (vals or "0,1").split(",")}
        names = list(sides)
        # rounds of one run per side, alternating which side goes first
        t = {side: {w: [] for w in ways} for side in names}
        per_run = {side: {w: [] for w in ways} for side in names}
        lat = {side: {w: [] for w in ways} for side in names}
        for r in range(args.runs):
            for side in (names if r % 2 == 0 else names[::-1]):
                for w, got, ns in run_ways(args, ways, r, sides[side]):
                    t[side][w] += got
                    per_run[side][w].append(got)
                    lat[side][w].append(ns)
        for side in names:
            print_times(args.model, ways, t[side], tag=" " + side)
        for side in names:
            print_spread(args.model, ways, per_run[side], tag=" " + side, c2c=lat[side])
        if not args.no_breakdown:
            for side in names:
                bd = run_child(args, dict(sides[side], LAZYTPU_PROFILE="1"),
                               ["--breakdown-only"])["breakdown"]
                print_breakdown(bd, tag=" " + side)
    else:
        times = {w: [] for w in ways}
        per_run = {w: [] for w in ways}
        lat = {w: [] for w in ways}
        for r in range(args.runs):
            for w, got, ns in run_ways(args, ways, r, {}):
                times[w] += got
                per_run[w].append(got)
                lat[w].append(ns)
        print_times(args.model, ways, times)
        print_spread(args.model, ways, per_run, c2c=lat)
        if not args.no_breakdown:
            bd = run_child(args, {"LAZYTPU_PROFILE": "1"}, ["--breakdown-only"])["breakdown"]
            print_breakdown(bd)
    print("load average: %.2f -> %.2f" % (load0, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
