#!/usr/bin/python3
"""bench/bench_transformer_kernels.py — the elementwise and normalisation
kernels of bench/models.py's transformer, lazytpu against eager PyTorch in
the same run (issue 12).

Runs `steps` training steps of the transformer eagerly under
torch.profiler and through lazytpu with LAZYTPU_PROFILE=1 (the kernel
profile of the metrics report), alternating the two `rounds` times, and
prints per step the best round of each kernel group with the ratio
lazytpu / eager:
  gelu           fused(gelu)                  aten::gelu
  gelu_backward  fused(gelu_backward)         aten::gelu_backward
  layer norm     layer_norm, _stats, _backward, _backward_affine
                                              native_layer_norm (+ backward)
  add            fused(add)                   aten::add, aten::add_
  mul            fused(mul)                   aten::mul
  sum            reduce(sum)                  aten::sum
The machine is shared: only the ratios of one run mean anything.

Usage: LAZYTPU_PROFILE=1 .venv/bin/python bench/bench_transformer_kernels.py
       [--steps 3] [--rounds 2]
"""
import argparse
import os
import re
import sys

os.environ.setdefault("LAZYTPU_PROFILE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import lazytpu.metrics as met  # noqa: E402
import models  # noqa: E402

GROUPS = [
    ("gelu", ["fused(gelu)"], ["aten::gelu"]),
    ("gelu_backward", ["fused(gelu_backward)"], ["aten::gelu_backward"]),
    ("layer norm", ["layer_norm", "layer_norm_stats", "layer_norm_backward",
                    "layer_norm_backward_affine"],
     ["aten::native_layer_norm", "aten::native_layer_norm_backward"]),
    ("add", ["fused(add)"], ["aten::add", "aten::add_"]),
    ("mul", ["fused(mul)"], ["aten::mul"]),
    ("sum", ["reduce(sum)"], ["aten::sum"]),
]


def lazy_ms(way, steps):
    met.clear_all()
    for _ in range(steps):
        way.step()
    way.wait()
    rep = met.metrics_report()
    rep = rep[rep.find("== kernel profile"):]
    ms = {}
    for line in rep.splitlines():
        m = re.match(r"(\S+)\s+(\d+)\s+([\d.]+)\s+", line)
        if m:
            ms[m.group(1)] = float(m.group(3)) / steps
    return ms


def eager_ms(way, steps):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps):
            way.step()
    return {e.key: e.self_cpu_time_total / 1e3 / steps for e in p.key_averages()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    lw = models.Way("transformer", "lazy")
    ew = models.Way("transformer", "eager")
    for _ in range(2):
        lw.step()
        ew.step()
    lw.wait()
    best_l, best_e = {}, {}
    for _ in range(a.rounds):
        lm = lazy_ms(lw, a.steps)
        em = eager_ms(ew, a.steps)
        for name, ours, theirs in GROUPS:
            lv = sum(lm.get(k, 0.0) for k in ours)
            ev = sum(em.get(k, 0.0) for k in theirs)
            best_l[name] = min(best_l.get(name, lv), lv)
            best_e[name] = min(best_e.get(name, ev), ev)
    print("%-14s %12s %12s %7s" % ("kernel", "lazytpu ms", "eager ms", "ratio"))
    for name, _, _ in GROUPS:
        lv, ev = best_l[name], best_e[name]
        print("%-14s %12.2f %12.2f %7.2f" % (name, lv, ev, lv / ev if ev else float("nan")))
    print("(per training step, best of %d rounds of %d steps)" % (a.rounds, a.steps))


if __name__ == "__main__":
    main()
