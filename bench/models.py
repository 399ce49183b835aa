"""Train-step time of four models on four ways of running them, in one run:

    .venv/bin/python bench/models.py [--runs 5] [--steps N] [--only mlp,cnn]
        [--no-multicore] [--plot docs/benchmarks.png] [--json out.json]

Models (SGD with momentum, cross entropy, synthetic data):
  mlp          784-256-10, batch 64
  cnn          2 conv + batch norm + max pool + linear, batch 32, 28x28
  transformer  4 pre-norm encoder layers, width 256, 4 heads, ff 1024,
               batch 32, sequence 128, mean-pooled 10-class head
  resnet18     ResNet-18 (own definition: torchvision cannot be installed),
               batch 16, 64x64, 10 classes
Ways:
  eager        PyTorch on the CPU
  inductor     torch.compile(model) (default backend) on the CPU, optimizer
               step eager: what a CPU user would pick instead
  lazy         lazytpu, every op traced lazily, lazytpu.optimizer_step +
               mark_step per step
  compile      lazytpu, torch.compile(model, backend="lazytpu"): forward and
               backward graphs replayed; the optimizer traced lazily
  lazy-sync, compile-sync
               the same, each step waiting for its result (mark_step +
               wait_device_ops per step: nothing of step N+1 overlaps step
               N); eager and inductor are synchronous already

For one model every way is built and warmed up first (compiles), each in a
process of its own (ways sharing a process handicap each other: after
torch.compile has run in a process, its eager CPU ops run slower), then the
timed runs go round-robin over the ways (run r of each way back to back, the
order alternating), so that load on the machine hits all ways alike. Each run is `steps` steps and
ends waiting for the device. Reported per way: the median ms/step over the
runs, the worst run / median ("spread"), and the ratios of medians. Then the
8-core data-parallel throughput against 1 core (bench/bench_multicore.py, MLP)
and a PNG plot of the ratios. Also per model: the FLOPs of one step's matrix
products and convolutions (torch.utils.flop_counter) and the time they take at
the machine's best f32 GEMM rate measured in the same run (MKL, all threads):
the floor under every way's step time, as a ratio to eager. The load average is printed: the targets of
DESIGN.md section 7 are for a quiet machine.

Every way runs at its own defaults: no OpenMP variable is set here (an
OMP_WAIT_POLICY=PASSIVE would slow eager's small steps ~2x; lazytpu sets
nothing for itself either).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402
import lazytpu.compile  # noqa: E402,F401  (the "lazytpu" dynamo backend)

HERE = os.path.dirname(os.path.abspath(__file__))
# ResNet-18 is the example's own definition (torchvision cannot be installed)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
_OMP_BEFORE = {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "KMP_", "GOMP_"))}
from resnet18 import ResNet18  # noqa: E402

# every child process inherits this environment: nothing imported here may
# set an OpenMP variable for the peers (eager, inductor)
assert {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "KMP_", "GOMP_"))} == \
    _OMP_BEFORE, "an import set an OpenMP variable: the peers would not run at their defaults"
WAYS = ["eager", "inductor", "lazy", "compile", "lazy-sync", "compile-sync"]


# ------------------------------------------------------------------ models

def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.reshape(b, s, h, d // h).transpose(1, 2)
        k = k.reshape(b, s, h, d // h).transpose(1, 2)
        v = v.reshape(b, s, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) * (d // h) ** -0.5, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(o)
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, d=256, heads=4, ff=1024, layers=4, classes=10):
        super().__init__()
        self.layers = nn.Sequential(*[EncoderLayer(d, heads, ff) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.ln(self.layers(x)).mean(1))


# name: (model, input shape, default timed steps per run)
MODELS = {
    "mlp": (mlp, (64, 784), 400),
    "cnn": (CNN, (32, 1, 28, 28), 100),
    "transformer": (Transformer, (32, 128, 256), 2),
    "resnet18": (lambda: ResNet18(num_classes=10), (16, 3, 64, 64), 4),
}


# ------------------------------------------------------------------ timing

class Way:
    """One model trained one way: build() then step()/wait()."""

    def __init__(self, name, way):
        make, shape, _ = MODELS[name]
        torch.manual_seed(0)
        self.sync = way.endswith("-sync")      # wait for every step's result
        way = way.replace("-sync", "")
        self.way = way
        dev = lazytpu.device() if way in ("lazy", "compile") else torch.device("cpu")
        self.model = make().to(dev)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(*shape).to(dev)
        self.y = torch.randint(0, 10, (shape[0],)).to(dev)
        self.fwd = self.model
        if way == "inductor":
            self.fwd = torch.compile(self.model)
        elif way == "compile":
            self.fwd = torch.compile(self.model, backend="lazytpu")

    def step(self):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.fwd(self.x), self.y)
        loss.backward()
        if self.way in ("lazy", "compile"):
            lazytpu.optimizer_step(self.opt)
            lazytpu.mark_step()
            if self.sync:
                lazytpu.wait_device_ops()
        else:
            self.opt.step()
        return loss

    def wait(self):
        if self.way in ("lazy", "compile"):
            lazytpu.wait_device_ops()

    def run(self, steps):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = self.step()
        self.wait()
        return (time.perf_counter() - t0) / steps, loss


class Child:
    """A way of a model in a process of its own (`--child`): built and warmed
    up once, then one timed run per request. One process per way: in a
    process where torch.compile has run, eager CPU ops run slower (measured:
    the transformer's eager step 62 ms beside the compile way, 35 ms alone),
    so ways sharing a process would handicap each other."""

    def __init__(self, name, way, warmup):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--ways", way,
               "--warmup", str(warmup)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        self.warm = self.reply()["warmup_s"]

    def reply(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            sys.exit("bench child failed (exit %s)" % self.p.returncode)
        return json.loads(line)

    def run(self, steps):
        self.p.stdin.write("run %d\n" % steps)
        return self.reply()["s_per_step"]

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.close()
        self.p.wait()


def child_main(name, way, warmup):
    """`--child`: build one way, warm it up, then answer `run N` with the
    mean s/step of N steps (ending with the device's wait) until `quit`."""
    t0 = time.perf_counter()
    w = Way(name, way)
    for _ in range(warmup):
        w.step()
    w.wait()
    print(json.dumps({"warmup_s": time.perf_counter() - t0}), flush=True)
    loss = None
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            break
        dt, loss = w.run(int(cmd[1]))
        print(json.dumps({"s_per_step": dt}), flush=True)
    if loss is not None:
        float(loss.detach().cpu())      # the steps really ran


def bench_model(name, ways, runs, steps, warmup):
    """Every way in its own process (Child), built one after the other; then
    `runs` rounds, each one run of every way, the order alternating from round
    to round, so that load on the machine hits all ways alike."""
    built = {}
    for w in ways:
        built[w] = Child(name, w, warmup)
        print("  %-12s %-12s warm-up %.1fs" % (name, w, built[w].warm), flush=True)
    times = {w: [] for w in ways}
    for r in range(runs):
        for w in (ways if r % 2 == 0 else ways[::-1]):
            times[w].append(built[w].run(steps))
    for w in ways:
        built[w].close()
    return times


def machine_gemm_peak():
    """The best f32 GEMM rate this machine reaches, GFLOP/s: MKL's sgemm (what
    eager calls) on all threads, 2048^3, best of 5 in this run."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * 2048 ** 3 / best / 1e9


def step_gemm_flops(name):
    """FLOPs of one eager training step's matrix products and convolutions
    (forward and backward), counted by torch.utils.flop_counter."""
    from torch.utils.flop_counter import FlopCounterMode
    w = Way(name, "eager")
    w.step()
    with FlopCounterMode(display=False) as fc:
        w.step()
    return fc.get_total_flops()


def multicore_ratio():
    """8 cores vs 1 core images/s on the MLP (bench_multicore.py)."""
    cmd = [sys.executable, os.path.join(HERE, "bench_multicore.py"), "--model", "mlp",
           "--steps", "40", "--warmup", "5"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = [l for l in p.stdout.splitlines() if "ratio" in l]
    if p.returncode != 0 or not line:
        return None, (p.stderr or p.stdout)[-500:]
    m = re.search(r"1 core (\d+) images/s \| (\d+) cores (\d+) images/s.*ratio ([\d.]+)x", line[0])
    return ({"one": float(m.group(1)), "cores": int(m.group(2)), "many": float(m.group(3)),
             "ratio": float(m.group(4))} if m else None), line[0]


def plot(results, path, load):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    ways = [w for w in WAYS if all(w in results[n] for n in names)]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(ways)
    for i, w in enumerate(ways):
        vals = [results[n][w]["median"] / results[n]["eager"]["median"] for n in names]
        bars = ax.bar([k + i * width for k in range(len(names))], vals, width, label=w)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v, "%.2f" % v, ha="center",
                    va="bottom", fontsize=7)
    ax.set_xticks([k + width * (len(ways) - 1) / 2 for k in range(len(names))])
    ax.set_xticklabels(["%s\n%.1f ms eager" % (n, results[n]["eager"]["median"] * 1e3)
                        for n in names])
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_ylabel("step time / eager (lower is better)")
    ax.set_title("train step, median of runs (load average %s)" % load)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=0, help="steps per run (0: per model)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default=",".join(MODELS))
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--no-multicore", action="store_true")
    p.add_argument("--plot", default=os.path.join(HERE, "..", "docs", "benchmarks.png"))
    p.add_argument("--json")
    p.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child_main(args.child, args.ways, args.warmup)
        return
    ways = args.ways.split(",")
    load0 = os.getloadavg()[0]
    print("torch %s, %d threads, load average %.2f" % (torch.__version__,
                                                       torch.get_num_threads(), load0))
    results = {}
    for name in args.only.split(","):
        steps = args.steps or MODELS[name][2]
        times = bench_model(name, ways, args.runs, steps, args.warmup)
        r = results[name] = {}
        for w in ways:
            med = statistics.median(times[w])
            r[w] = {"median": med, "spread": max(times[w]) / med, "runs": times[w]}
        for w in ways:
            line = "%-12s %-12s %9.2f ms/step  worst/median %.2f  vs eager %.2fx" % (
                name, w, r[w]["median"] * 1e3, r[w]["spread"],
                r[w]["median"] / r["eager"]["median"] if "eager" in r else float("nan"))
            if "inductor" in r:
                line += "  vs inductor %.2fx" % (r[w]["median"] / r["inductor"]["median"])
            print(line, flush=True)
    if "eager" in ways:
        # No way can beat the time its products take at the machine's best
        # GEMM rate: the floor below which a ratio target is not reachable.
        peak = machine_gemm_peak()
        print("machine f32 GEMM peak (MKL, %d threads, 2048^3): %.0f GFLOP/s" % (
            torch.get_num_threads(), peak))
        for name, r in results.items():
            fl = step_gemm_flops(name)
            floor = fl / (peak * 1e9)
            r["floor"] = {"gflop": fl / 1e9, "peak": peak, "ms": floor * 1e3,
                          "vs_eager": floor / r["eager"]["median"]}
            print("%-12s products %.2f GFLOP/step: at peak %.1f ms = %.2fx eager" % (
                name, fl / 1e9, floor * 1e3, floor / r["eager"]["median"]), flush=True)
    load1 = os.getloadavg()[0]
    mc = None
    if not args.no_multicore:
        mc, line = multicore_ratio()
        print("multicore (MLP, global batch 256): %s" % line)
    load = "%.1f-%.1f" % (min(load0, load1), max(load0, load1))
    print("load average during the run: %s" % load)
    if args.plot and "eager" in ways:
        plot(results, args.plot, load)
        print("plot: %s" % os.path.normpath(args.plot))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "multicore": mc, "load": load}, f, indent=1)


if __name__ == "__main__":
    main()
