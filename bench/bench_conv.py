#!/usr/bin/python3
"""bench/bench_conv.py — lazytpu's convolution and max-pool kernels against
eager PyTorch (oneDNN) on ResNet-18's layer shapes, in the same run.

For each shape (ResNet-18's: batch 16, 3x64x64 input, as bench/models.py's
resnet18; the CNN's: batch 32, 1x28x28) it times, best of --reps:
  fwd   conv2d forward
  bin   convolution_backward, input gradient only
  bw    convolution_backward, weight gradient only
eager: torch.ops.aten on CPU tensors; lazytpu: the same aten ops on device
tensors, one sync per call, timed by the kernel profile (LAZYTPU_PROFILE=1
is set here: KernelTime::<op> accumulator deltas, i.e. the kernel alone,
without tracing). The max-pool line is the stem's 3x3/2 pad-1 pool with
indices and its backward.

Usage: .venv/bin/python bench/bench_conv.py [--reps 5] [--only bw,bin,fwd]
           [--threads 1] [--models resnet18,cnn]
Prints per shape eager ms, lazytpu ms (default algorithm choice) and the
ratio, then lazytpu with LAZYTPU_CONV_ALGO=im2col (the im2col + GEMM path
forced, read per kernel call: the A/B of the Winograd path in the same run;
"-" where both are the same path), then the totals weighted by how often
each shape occurs in its model (the figure that matters for the train
step). --threads sets both sides' thread count (torch.set_num_threads and
LAZYTPU_OMP_THREADS; default 1: kernel against kernel). Only same-run
ratios mean anything on a shared machine.
"""
import argparse
import os
import sys
import time

os.environ["LAZYTPU_PROFILE"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _threads_arg():
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


os.environ["LAZYTPU_OMP_THREADS"] = _threads_arg()   # read when the cores start

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402
import lazytpu.metrics as met  # noqa: E402

# (name, count in its model, N, C, H, O, k, stride, pad); ResNet-18's
SHAPES = [
    ("stem 7x7/2", 1, 16, 3, 64, 64, 7, 2, 3),
    ("l1 3x3 64", 4, 16, 64, 16, 64, 3, 1, 1),
    ("l2 3x3/2 64-128", 1, 16, 64, 16, 128, 3, 2, 1),
    ("l2 3x3 128", 3, 16, 128, 8, 128, 3, 1, 1),
    ("l2 1x1/2 ds", 1, 16, 64, 16, 128, 1, 2, 0),
    ("l3 3x3/2 128-256", 1, 16, 128, 8, 256, 3, 2, 1),
    ("l3 3x3 256", 3, 16, 256, 4, 256, 3, 1, 1),
    ("l3 1x1/2 ds", 1, 16, 128, 8, 256, 1, 2, 0),
    ("l4 3x3/2 256-512", 1, 16, 256, 4, 512, 3, 2, 1),
    ("l4 3x3 512", 3, 16, 512, 2, 512, 3, 1, 1),
    ("l4 1x1/2 ds", 1, 16, 256, 4, 512, 1, 2, 0),
]
# bench/models.py's CNN (batch 32, 1x28x28)
CNN_SHAPES = [
    ("cnn 3x3 1-16", 1, 32, 1, 28, 16, 3, 1, 1),
    ("cnn 3x3 16-32", 1, 32, 16, 14, 32, 3, 1, 1),
]

KERNEL = {"fwd": "KernelTime::conv2d", "bin": "KernelTime::conv2d_backward_input",
          "bw": "KernelTime::conv2d_backward_weight"}


def kernel_ns(names):
    tot = 0.0
    for n in names:
        d = met.metric_data(n)
        if d:
            tot += d[1]
    return tot


def conv_call(which, x, w, gy, s, p):
    if which == "fwd":
        return F.conv2d(x, w, None, s, p)
    mask = [which == "bin", which == "bw", False]
    return torch.ops.aten.convolution_backward(gy, x, w, None, [s, s], [p, p], [1, 1], False,
                                               [0, 0], 1, mask)


def best_eager(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def best_lazy(fn, names, reps):
    r = fn()   # kept alive: the sync computes only live tensors
    lazytpu.mark_step(wait=True)
    best = float("inf")
    for _ in range(reps):
        k0 = kernel_ns(names)
        r = fn()
        lazytpu.mark_step(wait=True)
        best = min(best, (kernel_ns(names) - k0) / 1e6)
    del r
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="fwd,bin,bw")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="resnet18,cnn")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    whichs = args.only.split(",")
    models = args.models.split(",")
    for m in models:
        run_model(m, SHAPES if m == "resnet18" else CNN_SHAPES, whichs, args.reps)
    if "resnet18" in models:
        bench_pool(args.reps)


def lazy_im2col(fn, names, reps):
    os.environ["LAZYTPU_CONV_ALGO"] = "im2col"
    try:
        return best_lazy(fn, names, reps)
    finally:
        del os.environ["LAZYTPU_CONV_ALGO"]


def wino_shape(k, s):
    # the shapes the Winograd path may take (lazy/kernels/conv_wino.c)
    return k == 3 and s == 1


def run_model(model, shapes, whichs, reps):
    dev = torch.device("lazytpu")
    tot = {wh: [0.0, 0.0, 0.0] for wh in whichs}
    print("%-18s %4s %9s %9s %6s %10s %6s" % ("shape", "op", "eager ms", "ours ms", "ratio",
                                             "im2col ms", "ratio"))
    for name, cnt, N, C, H, O, k, s, p in shapes:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(N, C, H, H, generator=g)
        w = torch.randn(O, C, k, k, generator=g)
        oh = (H + 2 * p - k) // s + 1
        gy = torch.randn(N, O, oh, oh, generator=g)
        xd, wd, gyd = x.to(dev), w.to(dev), gy.to(dev)
        for wh in whichs:
            e = best_eager(lambda: conv_call(wh, x, w, gy, s, p), reps)
            fn = lambda: conv_call(wh, xd, wd, gyd, s, p)  # noqa: E731
            ours = best_lazy(fn, [KERNEL[wh]], reps)
            alt = lazy_im2col(fn, [KERNEL[wh]], reps) if wino_shape(k, s) else ours
            tot[wh][0] += cnt * e
            tot[wh][1] += cnt * ours
            tot[wh][2] += cnt * alt
            alts = ("%10.3f %6.2f" % (alt, alt / e)) if alt is not ours else "%10s %6s" % ("-", "")
            print("%-18s %4s %9.3f %9.3f %6.2f %s" % (name, wh, e, ours, ours / e, alts),
                  flush=True)
    for wh in whichs:
        print("%s total %4s: eager %.2f ms, ours %.2f ms, ratio %.2f (im2col %.2f ms, %.2f)"
              % (model, wh, tot[wh][0], tot[wh][1], tot[wh][1] / tot[wh][0], tot[wh][2],
                 tot[wh][2] / tot[wh][0]))


def bench_pool(reps):
    dev = torch.device("lazytpu")
    # the stem's max pool: forward with indices + backward
    x = torch.randn(16, 64, 32, 32, requires_grad=True)
    gy = torch.randn(16, 64, 16, 16)

    def pool_eager():
        x.grad = None
        y = F.max_pool2d(x, 3, 2, 1)
        y.backward(gy)
        return y

    xd = x.detach().to(dev).requires_grad_()
    gyd = gy.to(dev)

    def pool_ours():
        xd.grad = None
        y = F.max_pool2d(xd, 3, 2, 1)
        y.backward(gyd)
        return y, xd.grad

    e = best_eager(pool_eager, reps)
    r = pool_ours()
    lazytpu.mark_step(wait=True)
    del r
    names = [n for n in met.metric_names() if "max_pool" in n]
    ours = best_lazy(pool_ours, names, reps)
    print("max_pool2d 3x3/2 [16,64,32,32] fwd+bwd: eager %.3f ms, ours %.3f ms (%s), ratio %.2f"
          % (e, ours, ",".join(n.split("::")[1] for n in names), ours / e))


if __name__ == "__main__":
    main()
