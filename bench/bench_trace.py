"""Per-op host cost from Python: eager CPU vs lazytpu tracing, same run.

    .venv/bin/python bench/bench_trace.py [--reps 2000] [--rounds 7]

For a few op kinds on small tensors (so eager's compute is negligible and
what is measured is the host path: Python binding, dispatcher, autograd,
functionalization, the shim and the C core's trace call), times N calls in
a loop and reports microseconds per op, best of several rounds (rounds go
round-robin over eager and lazytpu so load hits both alike). lazytpu's
loop ends with a step boundary every `--chunk` ops (the graph would grow
otherwise); the boundary is timed outside the op loop.

Columns: eager us/op, lazytpu us/op, lazytpu/eager; with and without
requires_grad on the inputs. Target (issue 12): halve the lazy path's
per-op cost; the issue's baseline was lazytpu mul 7.9-8.3 us (no grad),
11.9-12.2 us (requires_grad), eager 7.1-8.5 us on a loaded machine.
"""
import argparse
import gc
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

import lazytpu  # noqa: E402


def kinds():
    """name -> (make inputs(device, grad), op)"""
    def two(shape):
        def make(dev, grad):
            a = torch.randn(shape).to(dev).requires_grad_(grad)
            b = torch.randn(shape).to(dev).requires_grad_(grad)
            return a, b
        return make

    return {
        "mul [4]": (two((4,)), lambda a, b: torch.mul(a, b)),
        "add [64,64]": (two((64, 64)), lambda a, b: a + b),
        "relu [64,64]": (two((64, 64)), lambda a, b: torch.relu(a)),
        "sum(1) [64,64]": (two((64, 64)), lambda a, b: a.sum(1)),
        "view+t [64,64]": (two((64, 64)), lambda a, b: a.view(4096).view(64, 64).t()),
        "matmul [16,16]": (two((16, 16)), lambda a, b: a @ b),
        "add_ [64,64]": (two((64, 64)), None),  # in-place, no grad only
    }


def run(dev, make, op, grad, reps, chunk, inplace):
    a, b = make(dev, grad)
    lazy = dev != "cpu"
    if lazy:
        lazytpu.mark_step(wait=True)
    n = 0
    t = 0.0
    while n < reps:
        k = min(chunk, reps - n)
        t0 = time.perf_counter()
        if inplace:
            for _ in range(k):
                a.add_(b)
        else:
            for _ in range(k):
                op(a, b)
        t += time.perf_counter() - t0
        n += k
        if lazy:
            lazytpu.mark_step(wait=True)
    return t / reps * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--chunk", type=int, default=200)
    p.add_argument("--only", help="comma-separated substrings of op names")
    args = p.parse_args()
    torch.set_num_threads(1)
    dev = lazytpu.device()
    ks = kinds()
    if args.only:
        want = args.only.split(",")
        ks = {k: v for k, v in ks.items() if any(w in k for w in want)}
    print("%-18s %-5s %10s %10s %8s" % ("op", "grad", "eager us", "lazytpu us", "ratio"))
    ratios = []
    for name, (make, op) in ks.items():
        inplace = op is None
        for grad in ((False,) if inplace else (False, True)):
            best = {"cpu": float("inf"), "lt": float("inf")}
            for _ in range(args.rounds):
                for which, d in (("cpu", "cpu"), ("lt", dev)):
                    gc.collect()
                    us = run(d, make, op, grad, args.reps, args.chunk, inplace)
                    best[which] = min(best[which], us)
            r = best["lt"] / best["cpu"]
            ratios.append(r)
            print("%-18s %-5s %10.2f %10.2f %7.2fx" % (name, "yes" if grad else "no",
                                                      best["cpu"], best["lt"], r),
                  flush=True)
    g = 1.0
    for r in ratios:
        g *= r
    print("geometric mean lazytpu/eager: %.2fx" % g ** (1.0 / len(ratios)))


if __name__ == "__main__":
    main()
