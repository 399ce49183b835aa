"""The transformer's kernels in isolation (bench/models.py's transformer:
batch 32, sequence 128, width 256, 4 heads of 64, ff 1024): lazytpu vs eager
PyTorch on the CPU in the same run, eager and lazytpu runs interleaved, best
of N each (the machine is shared: only same-run ratios mean anything).

    .venv/bin/python bench/bench_attention.py [--reps 9] [--case all|attention|linear]

  attention  the attention block forward + backward from the qkv projection's
             output to the gradient of it: split, per-head reshape/transpose,
             q @ k^T * scale, softmax, @ v, transpose/reshape back; backward
             through all of it (bmm, softmax_backward, the q/k/v gradient cat).
             lazytpu: one step (trace, sync, wait).
  linear     nn.Linear forward (addmm, weight transposed, bias) at the
             transformer's four shapes, 4 independent products per step.

Prints eager ms, lazytpu ms and the ratio per case (< 1: lazytpu faster).
"""
import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402

B, S, H, DH = 32, 128, 4, 64
D = H * DH


def attention(qkv, g):
    q, k, v = qkv.split(D, dim=2)
    q, k, v = (t.reshape(B, S, H, DH).transpose(1, 2) for t in (q, k, v))
    att = torch.softmax(q @ k.transpose(-2, -1) * DH ** -0.5, dim=-1)
    o = (att @ v).transpose(1, 2).reshape(B, S, D)
    (o * g).sum().backward()


def bench(name, eager, lazy, reps):
    for _ in range(2):
        eager()
        lazy()
    te = tl = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        eager()
        te = min(te, time.perf_counter() - t)
        t = time.perf_counter()
        lazy()
        tl = min(tl, time.perf_counter() - t)
    print("%-34s eager %8.2f ms  lazytpu %8.2f ms  ratio %.3f" % (name, te * 1e3, tl * 1e3, tl / te))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--case", default="all", choices=["all", "attention", "linear"])
    a = p.parse_args()
    dev = lazytpu.device()
    torch.manual_seed(0)
    print("torch %s, %d threads, load average %.2f" % (torch.__version__, torch.get_num_threads(),
                                                       os.getloadavg()[0]))
    if a.case in ("all", "attention"):
        xe = torch.randn(B, S, 3 * D, requires_grad=True)
        ge = torch.randn(B, S, D)
        xl = xe.detach().to(dev).requires_grad_()
        gl = ge.to(dev)

        def eager():
            xe.grad = None
            attention(xe, ge)

        def lazy():
            xl.grad = None
            attention(xl, gl)
            lazytpu.mark_step()
            lazytpu.wait_device_ops()
        bench("attention fwd+bwd", eager, lazy, a.reps)
    if a.case in ("all", "linear"):
        for (m, k, n) in [(B * S, D, 3 * D), (B * S, D, D), (B * S, D, 1024), (B * S, 1024, D)]:
            xs = [torch.randn(m, k) for _ in range(4)]
            w, b = torch.randn(n, k), torch.randn(n)
            xd = [x.to(dev) for x in xs]
            wd, bd = w.to(dev), b.to(dev)

            def eager():
                [F.linear(x, w, b) for x in xs]

            def lazy():
                ys = [F.linear(x, wd, bd) for x in xd]  # noqa: F841
                lazytpu.mark_step()
                lazytpu.wait_device_ops()
            bench("linear [%d,%d]x[%d,%d]^T + b (x4)" % (m, k, n, k), eager, lazy, a.reps)


if __name__ == "__main__":
    main()
