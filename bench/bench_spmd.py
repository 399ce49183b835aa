"""SPMD data-parallel training throughput: one process, the batch sharded
over an 8-core mesh (lazytpu.spmd.mark_sharding on each input batch) vs the
same training on one core with no sharding, at the same global batch, as
images/s and a ratio, in one run.

    .venv/bin/python bench/bench_spmd.py [--model mlp|cnn|both]
        [--batch 256] [--steps N] [--warmup 5] [--repeat 5]

Models: the MLP and CNN of examples/fashion_mnist.py, SGD with momentum,
cross entropy, synthetic Fashion-MNIST-shaped data fed through
lazytpu.loader.MpDeviceLoader (input_sharding= for SPMD). Both runs use the
same batches. The two runs alternate `repeat` times, each timed run in a
fresh process of its own; the ratio is of the medians of each side (the
spread, min-max, is printed beside it). Steps per timed run, unless
--steps says: MLP 300, CNN 40 (each run ~1.5-3 s; a 40-step MLP run lasts
0.2 s, where one scheduler hiccup moves it by 10%).

The "max diff" column: both runs again in float64, same batches, same
warmup+steps steps, untimed; the max abs difference of the state dict
(parameters AND buffers: batch norm's running_mean / running_var) between
them. It is ~1e-15 when SPMD computes what one core computes. The float32
timed runs' own end-of-run difference is printed beside it ("f32 end") but
means little after many steps: SPMD sums the batch in a different order
(per-core partial sums, then the all-reduce), the ~1e-8 rounding
difference of step 1 is amplified by training (the CNN: 7e-9 after step 1,
3e-8 after 5, 2e-5 after 10, 2e-4 after 20, ~1e-3-2e-2 after 45 at lr
0.01, momentum 0.9: any change in summation order drifts as much, and the
run-to-run figure changes with the all-reduce's order).

What runs: the SPMD run is partitioned, lazytpu's default
(LAZYTPU_SPMD_PARTITION=1; --unpartitioned sets 0: the step runs whole on
one core): each step runs over the 8 cores (per-core programs on local
shapes, the gradients' all-reduce in-process; docs/spmd.md); "partitioned"
in the output is read from the SpmdPartitionedExecute counter. Target
(issue 23): SPMD >= 0.8x one core.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402
import lazytpu.metrics as met  # noqa: E402
import lazytpu.spmd as xs  # noqa: E402
from lazytpu.loader import MpDeviceLoader  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from fashion_mnist import CNN, MLP  # noqa: E402


def _batches(n, batch):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


PARTITION = True


def run(model_cls, batches, warmup, spmd, dtype=torch.float32):
    dev = lazytpu.device()
    torch.manual_seed(0)
    model = model_cls().to(dtype).to(dev)
    if dtype != torch.float32:
        batches = [(x.to(dtype), y) for x, y in batches]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    kw = {}
    if spmd:
        mesh = xs.get_1d_mesh("data")
        kw["input_sharding"] = xs.ShardingSpec(mesh, ("data", None, None, None))
    os.environ["LAZYTPU_SPMD_PARTITION"] = "1" if spmd and PARTITION else "0"
    t0 = None
    n = 0
    for k, (x, y) in enumerate(MpDeviceLoader(batches, dev, **kw)):
        if k == warmup:
            lazytpu.mark_step(wait=True)
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if k >= warmup:
            n += x.shape[0]
    lazytpu.mark_step(wait=True)
    dt = time.perf_counter() - t0
    return n / dt, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _max_diff(a, b):
    """Max abs difference over the floating entries of two state dicts."""
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].is_floating_point())


def child_run(a):
    """One timed run in this fresh process; prints its images/s as JSON."""
    cls = MLP if a.child == "mlp" else CNN
    batches = _batches(a.warmup + a.steps, a.batch)
    rate, _ = run(cls, batches, a.warmup, spmd=a.spmd)
    print(json.dumps({"img_s": rate}))


def timed(name, spmd, a, steps):
    """A timed run in a process of its own: a core's thread budget and
    inline execution depend on how many cores the process has started, so a
    one-core run after an SPMD run in the same process would get 1 of the
    2 CPUs and no inline execution (a handicapped peer)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--batch", str(a.batch),
           "--steps", str(steps), "--warmup", str(a.warmup)] + (["--spmd"] if spmd else []) + \
        (["--unpartitioned"] if a.unpartitioned else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("timed run failed:\n" + p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])["img_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="both", choices=["mlp", "cnn", "both"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=None, help="per timed run (default: MLP 300, CNN 40)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--unpartitioned", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spmd", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    global PARTITION
    PARTITION = not a.unpartitioned
    xs.use_spmd()
    if a.child:
        child_run(a)
        return
    print("load average %.2f" % os.getloadavg()[0], flush=True)
    res = {}
    for name in (["mlp", "cnn"] if a.model == "both" else [a.model]):
        cls = MLP if name == "mlp" else CNN
        steps = a.steps or (300 if name == "mlp" else 40)
        batches = _batches(a.warmup + steps, a.batch)
        ones, sps = [], []
        for r in range(a.repeat):       # interleaved: the machine's drift hits both
            for spmd in ((False, True) if r % 2 == 0 else (True, False)):
                (sps if spmd else ones).append(timed(name, spmd, a, steps))
        one, sp = statistics.median(ones), statistics.median(sps)
        # untimed, in this process: the same steps in float32 and float64
        runs0 = met.counter_value("SpmdPartitionedExecute") or 0
        _, p1 = run(cls, batches, a.warmup, spmd=False)
        _, p8 = run(cls, batches, a.warmup, spmd=True)
        nparts = (met.counter_value("SpmdPartitionedExecute") or 0) - runs0
        d32 = _max_diff(p1, p8)
        _, q1 = run(cls, batches, a.warmup, spmd=False, dtype=torch.float64)
        _, q8 = run(cls, batches, a.warmup, spmd=True, dtype=torch.float64)
        diff = _max_diff(q1, q8)
        res[name] = {"one_core_img_s": one, "spmd8_img_s": sp, "ratio": sp / one,
                     "one_core_runs": ones, "spmd8_runs": sps,
                     "max_state_diff_f64": diff, "max_state_diff_f32_end": d32,
                     "partitioned_steps": nparts}
        print("%s: one core %.0f img/s (%.0f-%.0f), SPMD 8-way DP %.0f img/s (%.0f-%.0f), "
              "ratio of medians %.2fx, max diff %.1e in float64 (f32 end %.1e) "
              "(batch %d, %d steps x %d runs each, %d steps ran partitioned)"
              % (name, one, min(ones), max(ones), sp, min(sps), max(sps), sp / one, diff, d32,
                 a.batch, steps, a.repeat, res[name]["partitioned_steps"]), flush=True)
    print("load average %.2f" % os.getloadavg()[0])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
