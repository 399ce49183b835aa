#!/usr/bin/python3
"""bench/bench_nn_kernels.py — single kernels of the transformer's
elementwise / normalisation path, lazytpu against the eager op on the same
shapes in the same run (issue 12).

Cases (f32): gelu / gelu_tanh / gelu_backward on [4096, 1024];
layer_norm forward (y only, and with its statistics) and
native_layer_norm_backward (dx, dw, db) on [4096, 256]; the bias-gradient
column sums of [4096, 1024] and [4096, 256]; a residual add of [32, 128,
256]. Linear + activation (GEMM epilogue, lazy/kernels/matmul.c) at the
MLP's first layer (64x784 -> 256) and the transformer's ff1 (4096x256 ->
1024): linear alone, + relu, + gelu (compare with LAZYTPU_GEMM_EPILOGUE=0
for the unfused program). lazytpu: trace, mark_step, wait (so a few tens of microseconds of
step overhead are included); eager: the op (its output allocation
included). Each side: best over `--reps` rounds of 3 runs, alternating.

Usage: .venv/bin/python bench/bench_nn_kernels.py [--reps 10] [case ...]
"""
import argparse
import time

import torch
import torch.nn.functional as F

import lazytpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    dev = lazytpu.device()
    torch.manual_seed(0)

    def lazy_ms(fn, reps=3):
        best = 1e9
        for _ in range(reps):
            lazytpu.wait_device_ops()
            t = time.perf_counter()
            r = fn()  # noqa: F841  (kept alive over the step)
            lazytpu.mark_step()
            lazytpu.wait_device_ops()
            best = min(best, time.perf_counter() - t)
        return best * 1e3

    def eager_ms(fn, reps=3):
        best = 1e9
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return best * 1e3

    x, g = torch.randn(4096, 1024), torch.randn(4096, 1024)
    x2, g2 = torch.randn(4096, 256), torch.randn(4096, 256)
    w, b = torch.randn(256), torch.randn(256)
    r1, r2 = torch.randn(32, 128, 256), torch.randn(32, 128, 256)
    xm, w1, b1 = torch.randn(64, 784), torch.randn(256, 784) * 0.03, torch.randn(256)
    w2, b2 = torch.randn(1024, 256) * 0.06, torch.randn(1024)
    _, mean, rstd = torch.native_layer_norm(x2, [256], w, b, 1e-5)
    L = {k: v.to(dev) for k, v in dict(x=x, g=g, x2=x2, g2=g2, w=w, b=b, r1=r1, r2=r2,
                                       mean=mean, rstd=rstd, xm=xm, w1=w1, b1=b1, w2=w2,
                                       b2=b2).items()}
    E = dict(x=x, g=g, x2=x2, g2=g2, w=w, b=b, r1=r1, r2=r2, mean=mean, rstd=rstd, xm=xm, w1=w1,
             b1=b1, w2=w2, b2=b2)
    gb = torch.ops.aten.gelu_backward
    lnb = torch.ops.aten.native_layer_norm_backward
    cases = {
        "gelu": lambda t: F.gelu(t["x"]),
        "gelu_tanh": lambda t: F.gelu(t["x"], approximate="tanh"),
        "gelu_backward": lambda t: gb(t["g"], t["x"]),
        "layer_norm": lambda t: F.layer_norm(t["x2"], [256], t["w"], t["b"], 1e-5),
        "layer_norm+stats": lambda t: torch.native_layer_norm(t["x2"], [256], t["w"], t["b"], 1e-5),
        "layer_norm_bwd": lambda t: lnb(t["g2"], t["x2"], [256], t["mean"], t["rstd"], t["w"],
                                        t["b"], [True, True, True]),
        "colsum_1024": lambda t: t["g"].sum(0),
        "colsum_256": lambda t: t["g2"].sum(0),
        "add": lambda t: t["r1"] + t["r2"],
        "linear_mlp": lambda t: F.linear(t["xm"], t["w1"], t["b1"]),
        "linear_relu_mlp": lambda t: F.relu(F.linear(t["xm"], t["w1"], t["b1"])),
        "linear_gelu_mlp": lambda t: F.gelu(F.linear(t["xm"], t["w1"], t["b1"])),
        "linear_tf": lambda t: F.linear(t["x2"], t["w2"], t["b2"]),
        "linear_relu_tf": lambda t: F.relu(F.linear(t["x2"], t["w2"], t["b2"])),
        "linear_gelu_tf": lambda t: F.gelu(F.linear(t["x2"], t["w2"], t["b2"])),
    }
    names = a.cases or list(cases)
    print("%-18s %10s %10s %7s" % ("case", "eager ms", "lazy ms", "ratio"))
    for n in names:
        fn = cases[n]
        want = fn(E)
        got = fn(L)
        want = want[0] if isinstance(want, tuple) else want
        got = got[0] if isinstance(got, tuple) else got
        err = float((want - got.cpu()).abs().max())
        eager_ms(lambda: fn(E))
        lazy_ms(lambda: fn(L))
        e = c = 1e9
        for _ in range(a.reps):
            e = min(e, eager_ms(lambda: fn(E)))
            c = min(c, lazy_ms(lambda: fn(L)))
        print("%-18s %10.3f %10.3f %7.2f   max|diff| %.2g" % (n, e, c, c / e, err))


if __name__ == "__main__":
    main()
