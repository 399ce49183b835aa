"""A process that used its cores makes children that use them too.

    fork_child.py MODE      MODE: os.fork | fork | spawn | forkserver | nested

The parent runs device work (a GEMM, a convolution, reductions: the core's
helper threads, OpenMP and OpenBLAS), leaves one result computed, one
program queued and one value pending, then starts two children at once
(os.fork, or a multiprocessing context of that start method; "nested": a
forked child that forks again after using its cores). Each child runs
device work of its own, checked against eager PyTorch on the CPU, and (for
the fork modes) reads the parent's three device tensors. A child that hangs
is killed after CHILD_TIMEOUT seconds and reported. The parent then keeps
using its cores. Prints "OK <mode>" when everything matched.
"""
import multiprocessing as mp
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import lazytpu

CHILD_TIMEOUT = 120

g = torch.Generator().manual_seed(0)
X = torch.randn(96, 80, generator=g)
W = torch.randn(80, 64, generator=g)
IMG = torch.randn(2, 3, 20, 20, generator=g)
K = torch.randn(8, 3, 3, 3, generator=g)


def device_work(scale):
    """(device result, CPU reference) of a small program."""
    dev = lazytpu.device()

    def prog(x, w, img, k):
        y = torch.tanh(x @ w) * scale
        c = F.conv2d(img, k, padding=1)
        return torch.cat([y.sum(1), c.mean((0, 2, 3)), (y.max(0).values + 1).log()])

    got = prog(X.to(dev), W.to(dev), IMG.to(dev), K.to(dev)).cpu()
    return got, prog(X, W, IMG, K)


def check(scale, what):
    got, want = device_work(scale)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
        raise AssertionError("%s: device result differs from the CPU: max error %g"
                             % (what, (got - want).abs().max()))


def check_inherited(held):
    """The parent's device tensors, read in the child."""
    done, queued, pending = held
    want = torch.tanh(X @ W)
    for name, t, ref in (("computed", done, want), ("queued", queued, want * 2),
                         ("pending", pending, want.sum())):
        if not torch.allclose(t.cpu(), ref, rtol=1e-4, atol=1e-4):
            raise AssertionError("child read the parent's %s tensor wrong" % name)


def child_main(index, held, nested=False):
    """Runs in a child; exits 0 when every result matched. PyTorch's own
    CPU ops need one thread in a forked child (their OpenMP threads stayed
    in the parent; DataLoader workers do the same); lazytpu's cores make
    their threads afresh."""
    torch.set_num_threads(1)
    try:
        check(1.5 + index, "child %d" % index)
        if held is not None:
            check_inherited(held)
        if nested:
            pid = os.fork()
            if pid == 0:
                _child_exit(lambda: check(7.0, "grandchild"))
            wait_pid(pid, "grandchild")
            check(2.5, "child %d after its fork" % index)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def _child_exit(fn):
    try:
        fn()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def wait_pid(pid, what):
    deadline = time.time() + CHILD_TIMEOUT
    while time.time() < deadline:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p == pid:
            code = os.waitstatus_to_exitcode(st)
            if code != 0:
                raise AssertionError("%s exited with %d" % (what, code))
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("%s HUNG (killed after %d s)" % (what, CHILD_TIMEOUT))


def main(mode):
    dev = lazytpu.device()
    check(1.0, "parent before the fork")
    x, w = X.to(dev), W.to(dev)
    done = torch.tanh(x @ w)
    lazytpu.mark_step()
    done.cpu()                                   # computed
    queued = torch.tanh(x @ w) * 2
    for _ in range(5):                           # several programs queued
        filler = torch.tanh(x @ w @ w.t() @ w)
        lazytpu.mark_step()
    del filler
    pending = torch.tanh(x @ w).sum()            # traced, no program yet
    held = (done, queued, pending)

    if mode in ("os.fork", "nested"):
        pids = []
        for i in range(2):
            pid = os.fork()
            if pid == 0:
                child_main(i, held, nested=(mode == "nested"))
            pids.append(pid)
        for i, pid in enumerate(pids):
            wait_pid(pid, "child %d" % i)
    else:
        ctx = mp.get_context(mode)
        inherit = held if mode == "fork" else None
        procs = [ctx.Process(target=child_main, args=(i, inherit)) for i in range(2)]
        for p in procs:
            p.start()
        for i, p in enumerate(procs):
            p.join(CHILD_TIMEOUT)
            if p.exitcode is None:
                p.kill()
                p.join()
                raise AssertionError("child %d HUNG (killed after %d s)" % (i, CHILD_TIMEOUT))
            if p.exitcode != 0:
                raise AssertionError("child %d exited with %d" % (i, p.exitcode))

    check_inherited(held)
    check(3.0, "parent after the fork")
    print("OK", mode)


if __name__ == "__main__":
    main(sys.argv[1])
