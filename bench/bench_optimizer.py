"""Optimizer step alone, ms per step, in one run:

    .venv/bin/python bench/bench_optimizer.py [--runs 7] [--steps 10]
        [--models transformer,resnet18] [--opts sgd,adamw]

The parameters (and gradients) of bench/models.py's models (and "small":
160 tensors of 64..16384 elements); optimizers SGD with momentum 0.9 and
AdamW. Ways:
  eager-foreach  torch.optim on the CPU, foreach=True (PyTorch's multi-tensor
                 kernels: one op over the list of parameters per math op)
  eager-loop     torch.optim on the CPU, foreach=False (per parameter ops)
  lazy           lazytpu: optimizer_step + mark_step (the step's program,
                 traced, cache hit, run); horizontal fusion on (the default:
                 one kernel for all parameters, lazy/compile_hfuse.c)
  lazy-nohf      the same with LAZYTPU_HFUSE=0 (one fused kernel per
                 parameter, or two)
The two lazy ways run in child processes (LAZYTPU_HFUSE is read once per
process) driven by this one: the timed runs go round-robin over all ways
(run r of each way back to back, every other run in reverse order) so
that load on the machine hits all ways alike. Reported: the median wall ms/step per way, the lazy ways' device
ms/step (ExecuteTime: the programs' runs on the core; the wall time also
holds the host tracing torch.optim's per-parameter ops, which overlaps the
device), and the ratios of medians.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


SMALL = [64, 256, 1024, 4096, 16384]


def params_of(model):
    """Fresh copies of model's parameters with fixed random gradients
    ("small": 160 tensors of 64..16384 elements, 1 MB in all, where the
    per-kernel costs show most)."""
    torch.manual_seed(0)
    if model == "small":
        ps = [torch.randn(SMALL[k % 5]).requires_grad_() for k in range(160)]
    else:
        import models as M
        ps = [p.detach().clone().requires_grad_() for p in M.MODELS[model][0]().parameters()]
    for p in ps:
        p.grad = torch.randn_like(p) * 1e-3
    return ps


def make_opt(name, params, foreach):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=foreach)


def child(model, opt):
    """Lazy way: reads 'run <steps>' lines, answers ms per step (wall) and
    ms of device time per step (the ExecuteTime metric: the program run on
    the core, kernels and their dispatch)."""
    import lazytpu
    import lazytpu.metrics as met
    dev = lazytpu.device()
    ps = [p.detach().to(dev).requires_grad_() for p in params_of(model)]
    grads = params_of(model)
    for p, q in zip(ps, grads):
        p.grad = q.grad.to(dev)
    o = make_opt(opt, ps, None)
    lazytpu.mark_step()
    for _ in range(3):          # compile, and the first (different) step
        lazytpu.optimizer_step(o)
        lazytpu.mark_step()
    lazytpu.wait_device_ops()
    print("ready", flush=True)
    for line in sys.stdin:
        steps = int(line.split()[1])
        e0 = (met.metric_data("ExecuteTime") or (0, 0.0))[1]
        t0 = time.perf_counter()
        for _ in range(steps):
            lazytpu.optimizer_step(o)
            lazytpu.mark_step()
        lazytpu.wait_device_ops()
        t = (time.perf_counter() - t0) / steps * 1e3
        e = ((met.metric_data("ExecuteTime") or (0, 0.0))[1] - e0) / steps / 1e6
        print(t, e, flush=True)


class Child:
    def __init__(self, model, opt, hfuse):
        env = dict(os.environ, LAZYTPU_HFUSE=hfuse)
        self.p = subprocess.Popen([sys.executable, __file__, "--child", model, opt],
                                  env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready"
        self.dev_times = []

    def run(self, steps):
        self.p.stdin.write(f"run {steps}\n")
        self.p.stdin.flush()
        t, self.device = map(float, self.p.stdout.readline().split())
        self.dev_times.append(self.device)
        return t

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def bench(model, opt, runs, steps):
    ways = {}
    for fe in (True, False):
        ps = params_of(model)
        o = make_opt(opt, ps, fe)
        for _ in range(3):
            o.step()

        def run(steps, o=o):
            t0 = time.perf_counter()
            for _ in range(steps):
                o.step()
            return (time.perf_counter() - t0) / steps * 1e3
        ways["eager-foreach" if fe else "eager-loop"] = run
    kids = [Child(model, opt, "1"), Child(model, opt, "0")]
    ways["lazy"] = kids[0].run
    ways["lazy-nohf"] = kids[1].run
    times = {w: [] for w in ways}
    order = list(ways)
    for r in range(runs):    # every other run in reverse: no way always first
        for w in (order if r % 2 == 0 else order[::-1]):
            times[w].append(ways[w](steps))
    for k in kids:
        k.close()
    m = {w: statistics.median(t) for w, t in times.items()}
    m["dev"] = statistics.median(kids[0].dev_times)
    m["dev-nohf"] = statistics.median(kids[1].dev_times)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="transformer,resnet18,small")
    ap.add_argument("--opts", default="sgd,adamw")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    print(f"load average {os.getloadavg()[0]:.2f}; ms per optimizer step, median of "
          f"{a.runs} runs of {a.steps} steps")
    print("lazy, lazy-nohf: wall ms per step (host tracing overlaps the device); "
          "dev, dev-nohf: device ms per step (ExecuteTime)")
    print(f"{'model':12s} {'opt':6s} {'params':>6s} {'eager-fe':>9s} {'eager-loop':>10s} "
          f"{'lazy':>8s} {'lazy-nohf':>9s} {'dev':>7s} {'dev-nohf':>8s}  {'lazy/nohf':>9s} "
          f"{'dev/nohf':>8s} {'lazy/fe':>8s} {'lazy/loop':>9s}")
    for model in a.models.split(","):
        n = len(params_of(model))
        for opt in a.opts.split(","):
            m = bench(model, opt, a.runs, a.steps)
            print(f"{model:12s} {opt:6s} {n:6d} {m['eager-foreach']:9.3f} "
                  f"{m['eager-loop']:10.3f} {m['lazy']:8.3f} {m['lazy-nohf']:9.3f} "
                  f"{m['dev']:7.3f} {m['dev-nohf']:8.3f}  "
                  f"{m['lazy'] / m['lazy-nohf']:9.2f} {m['dev'] / m['dev-nohf']:8.2f} "
                  f"{m['lazy'] / m['eager-foreach']:8.2f} "
                  f"{m['lazy'] / m['eager-loop']:9.2f}", flush=True)


if __name__ == "__main__":
    main()
