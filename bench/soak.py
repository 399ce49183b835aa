"""Soak: a long training run on 1 core and on N cores, checking that nothing
grows (issue 14, point 4).

    .venv/bin/python bench/soak.py                    # 10,000 steps, 1 and 8 cores
    .venv/bin/python bench/soak.py --steps 300 --checkpoints 100,300 --cores 1 \
        --json out.json                               # the small version (a test)

Each core trains the MLP of examples/fashion_mnist.py (784-256-10, SGD with
momentum, cross entropy) on synthetic batches copied to the device every
step (a fresh host->device transfer, as a loader does), with
lazytpu.optimizer_step + lazytpu.mark_step ending each step (8 cores: the
gradient all-reduce is in the step's graph). At each checkpoint step every core waits for its
device, collects garbage and records:
  - rss_mb           resident memory of its process (VmRSS)
  - buffers, bytes   live device buffers and the bytes they hold
  - tensors          live device tensors
  - loss             the step's loss (a host read at checkpoints only)
Flat means: between the first and the last checkpoint the buffer, byte and
tensor counts do not change and RSS grows by less than --rss-slack-mb.
Prints one line per core and checkpoint and a verdict; --json writes the
figures. Exit status 1 when something grew.
"""
import argparse
import gc
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402
import lazytpu.debug  # noqa: E402


# the model of the example, not a copy of it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))
from fashion_mnist import MLP  # noqa: E402


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def sample(dev, step, loss, t0):
    lazytpu.mark_step()
    lazytpu.wait_device_ops()
    gc.collect()
    core = dev.index or 0
    mi = lazytpu.get_memory_info(dev)
    return {"step": step, "rss_mb": round(rss_mb(), 1), "buffers": mi["buffers_used"],
            "bytes": mi["bytes_used"], "tensors": lazytpu.debug.live_tensors(core),
            "loss": round(float(loss.detach()), 4), "seconds": round(time.time() - t0, 1)}


def worker(index, steps, checkpoints, batch, out_dir):
    ws = lazytpu.world_size() if lazytpu.world_size() else 1
    dev = lazytpu.device()
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(100 + index)
    pool = [(torch.randn(batch // ws, 1, 28, 28, generator=g),
             torch.randint(0, 10, (batch // ws,), generator=g)) for _ in range(8)]
    marks = set(checkpoints)
    out = []
    t0 = time.time()
    for step in range(1, steps + 1):
        x, y = pool[step % len(pool)]
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        lazytpu.optimizer_step(opt)
        lazytpu.mark_step()      # the step boundary (a loader would mark it)
        if step in marks:
            out.append(sample(dev, step, loss, t0))
    with open(os.path.join(out_dir, "rank%d.json" % index), "w") as f:
        json.dump(out, f)


def run(cores, steps, checkpoints, batch):
    """{rank: [checkpoint dicts]} of one run."""
    d = tempfile.mkdtemp(prefix="lazytpu-soak-")
    args = (steps, checkpoints, batch, d)
    if cores == 1:
        worker(0, *args)
    else:
        lazytpu.spawn(worker, args=args, nprocs=cores, timeout=24 * 3600)
    res = {}
    for r in range(cores):
        p = os.path.join(d, "rank%d.json" % r)
        with open(p) as f:
            res[r] = json.load(f)
        os.unlink(p)
    os.rmdir(d)
    return res


def grew(points, rss_slack_mb):
    """What grew between the first and the last checkpoint ([] = flat)."""
    a, b = points[0], points[-1]
    bad = ["%s %s -> %s" % (k, a[k], b[k]) for k in ("buffers", "bytes", "tensors")
           if b[k] != a[k]]
    if b["rss_mb"] - a["rss_mb"] >= rss_slack_mb:
        bad.append("rss_mb %.1f -> %.1f" % (a["rss_mb"], b["rss_mb"]))
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--checkpoints", default="1000,10000",
                   help="steps at which to sample (comma separated)")
    p.add_argument("--cores", default="1,8", help="runs, e.g. 1,8")
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--rss-slack-mb", type=float, default=8.0)
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    checkpoints = sorted(int(s) for s in a.checkpoints.split(","))
    if checkpoints[-1] > a.steps or len(checkpoints) < 2:
        p.error("need at least two checkpoints <= --steps")
    report, ok = {}, True
    for cores in [int(c) for c in a.cores.split(",")]:
        t = time.time()
        res = run(cores, a.steps, checkpoints, a.batch)
        dt = time.time() - t
        runs = {}
        for r, pts in sorted(res.items()):
            for q in pts:
                print("%d core%s, rank %d, step %6d: RSS %7.1f MB, %4d device buffers "
                      "(%9d bytes), %4d live tensors, loss %.4f" % (
                          cores, "s" if cores > 1 else "", r, q["step"], q["rss_mb"],
                          q["buffers"], q["bytes"], q["tensors"], q["loss"]))
            bad = grew(pts, a.rss_slack_mb)
            ok = ok and not bad
            runs[r] = {"points": pts, "grew": bad}
        verdict = [b for r in runs.values() for b in r["grew"]]
        print("%d core%s, %d steps in %.0f s: %s" % (
            cores, "s" if cores > 1 else "", a.steps, dt,
            "flat" if not verdict else "GREW: " + "; ".join(verdict)))
        sys.stdout.flush()
        report[str(cores)] = {"seconds": round(dt, 1), "ranks": runs}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
