#!/usr/bin/python3
"""bench/bench_elementwise.py — DESIGN.md §7 target "8-op elementwise chain on
4M floats <= 0.25x eager PyTorch".

Runs the same 8-op chains in eager PyTorch (CPU, its default thread count)
and through lazytpu's C API (ctypes on build/liblazytpu.so): trace the 8 ops
on a device tensor that is already on the device, sync, wait. Timed: trace +
sync + execute (the compile happens once, in the warm-up). Best of N.

Chains (x is [4M] f32):
  tanh    relu(sigmoid(tanh(x * 1.5 + 0.5) * x - x / 3))
          mul, add, tanh, mul, div, sub, sigmoid, relu
  exp     relu(exp(x * 0.5 - 0.25) / 3 - x) * 1.5 + 0.5
          mul, sub, exp, div, sub, relu, mul, add
  arith   ((((x * 1.5 + 0.5) - x) * 0.25 + x) - 0.5) * x / 3
          mul, add, sub, mul, add, sub, mul, div

Usage: /usr/bin/python3 bench/bench_elementwise.py [--lib build/liblazytpu.so]
       [--n 4194304] [--reps 15] [--chain tanh,exp,arith]
Prints one line per chain: eager ms (torch's default thread count, and
with all cores), lazytpu ms, the ratios, and the max relative difference
of the results. The target is judged against the default eager setting.
"""
import argparse
import ctypes as C
import os
import sys
import time

import torch

LT_F32, LT_F64 = 0, 2
LT_SYNC_EXPLICIT = 5


class Shape(C.Structure):
    _fields_ = [("ndim", C.c_int), ("dims", C.c_int64 * 8)]


def op_table(root):
    """Op enum values by name, parsed from lazy/ops.def (order = enum)."""
    ops = {}
    with open(os.path.join(root, "lazy", "ops.def")) as f:
        for line in f:
            s = line.strip()
            if s.startswith("LT_OP(") and not s.startswith("LT_OP(name"):
                ops[s[6:s.index(",")].strip()] = len(ops)
    return ops


class Lazy:
    def __init__(self, lib, root):
        self.L = C.CDLL(lib)
        L = self.L
        L.lt_last_error.restype = C.c_char_p
        for name in ("lt_trace1", "lt_trace2"):
            getattr(L, name).restype = C.c_int
        L.lt_tensor_release.argtypes = [C.c_void_p]
        L.lt_scalar.argtypes = [C.c_int, C.c_double, C.c_int, C.c_int,
                                C.POINTER(C.c_void_p)]
        L.lt_trace1.argtypes = [C.c_int, C.c_void_p, C.c_void_p,
                                C.POINTER(C.c_void_p)]
        L.lt_trace2.argtypes = [C.c_int, C.c_void_p, C.c_void_p, C.c_void_p,
                                C.POINTER(C.c_void_p)]
        L.lt_sync.argtypes = [C.POINTER(C.c_void_p), C.c_int, C.c_int, C.c_int]
        L.lt_tensor_from_host.argtypes = [C.c_int, C.c_void_p, C.c_int,
                                          C.POINTER(Shape),
                                          C.POINTER(C.c_void_p)]
        L.lt_tensor_to_host.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
        self.ops = op_table(root)
        self.check(L.lt_init(), "lt_init")

    def check(self, st, what):
        if st != 0:
            raise RuntimeError("%s failed (%d): %s" % (
                what, st, self.L.lt_last_error().decode()))

    def from_torch(self, t):
        t = t.contiguous()
        s = Shape()
        s.ndim = t.dim()
        for k, d in enumerate(t.shape):
            s.dims[k] = d
        out = C.c_void_p()
        self.check(self.L.lt_tensor_from_host(0, t.data_ptr(), LT_F32,
                                              C.byref(s), C.byref(out)),
                   "from_host")
        return out

    def to_torch(self, h, shape):
        t = torch.empty(shape, dtype=torch.float32)
        self.check(self.L.lt_tensor_to_host(h, t.data_ptr(), LT_F32),
                   "to_host")
        return t

    def scalar(self, v):
        out = C.c_void_p()
        self.check(self.L.lt_scalar(0, v, LT_F64, 1, C.byref(out)), "scalar")
        return out

    def op(self, name, a, b=None):
        out = C.c_void_p()
        if b is None:
            st = self.L.lt_trace1(self.ops[name], a, None, C.byref(out))
        else:
            st = self.L.lt_trace2(self.ops[name], a, b, None, C.byref(out))
        self.check(st, name)
        return out

    def sync(self, h):
        arr = (C.c_void_p * 1)(h)
        self.check(self.L.lt_sync(arr, 1, LT_SYNC_EXPLICIT, 1), "sync")

    def release(self, *hs):
        for h in hs:
            self.L.lt_tensor_release(h)


class LazyChain:
    """Builds a chain with lazytpu handles; intermediates are released as
    soon as they are consumed (as Python would drop them), so only the
    result is a root of the graph."""

    def __init__(self, lz):
        self.lz = lz
        self.tmp = []

    def s(self, v):
        h = self.lz.scalar(v)
        self.tmp.append(h)
        return h

    def op(self, name, a, b=None):
        h = self.lz.op(name, a, b)
        self.tmp.append(h)
        return h

    def done(self, result):
        keep = [t for t in self.tmp if t.value != result.value]
        self.lz.release(*keep)
        self.tmp = []
        return result


def chain_tanh_torch(x):
    return torch.relu(torch.sigmoid(torch.tanh(x * 1.5 + 0.5) * x - x / 3))


def chain_tanh_lazy(c, x):
    t = c.op("mul", x, c.s(1.5))
    t = c.op("add", t, c.s(0.5))
    t = c.op("tanh", t)
    t = c.op("mul", t, x)
    u = c.op("div", x, c.s(3.0))
    t = c.op("sub", t, u)
    t = c.op("sigmoid", t)
    return c.done(c.op("relu", t))


def chain_exp_torch(x):
    return torch.relu(torch.exp(x * 0.5 - 0.25) / 3 - x) * 1.5 + 0.5


def chain_exp_lazy(c, x):
    t = c.op("mul", x, c.s(0.5))
    t = c.op("sub", t, c.s(0.25))
    t = c.op("exp", t)
    t = c.op("div", t, c.s(3.0))
    t = c.op("sub", t, x)
    t = c.op("relu", t)
    t = c.op("mul", t, c.s(1.5))
    return c.done(c.op("add", t, c.s(0.5)))


def chain_arith_torch(x):
    return ((((x * 1.5 + 0.5) - x) * 0.25 + x) - 0.5) * x / 3


def chain_arith_lazy(c, x):
    t = c.op("mul", x, c.s(1.5))
    t = c.op("add", t, c.s(0.5))
    t = c.op("sub", t, x)
    t = c.op("mul", t, c.s(0.25))
    t = c.op("add", t, x)
    t = c.op("sub", t, c.s(0.5))
    t = c.op("mul", t, x)
    return c.done(c.op("div", t, c.s(3.0)))


CHAINS = {
    "tanh": (chain_tanh_torch, chain_tanh_lazy),
    "exp": (chain_exp_torch, chain_exp_lazy),
    "arith": (chain_arith_torch, chain_arith_lazy),
}


def best_of(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(root, "build",
                                                  "liblazytpu.so"))
    ap.add_argument("--n", type=int, default=4 << 20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--chain", default="tanh,exp,arith")
    a = ap.parse_args()
    lz = Lazy(a.lib, root)
    torch.manual_seed(0)
    x = torch.randn(a.n) * 2
    hx = lz.from_torch(x)
    t_def = torch.get_num_threads()
    t_all = os.cpu_count() or 1
    print("n=%d floats, torch %s (default %d threads; also run with %d), "
          "best of %d" % (a.n, torch.__version__, t_def, t_all, a.reps))
    print("%-6s %10s %10s %10s %8s %8s %10s" % (
        "chain", "eager ms", "eager%d ms" % t_all, "lazy ms", "ratio",
        "ratio%d" % t_all, "max rel"))
    worst = 0.0
    for name in a.chain.split(","):
        ft, fl = CHAINS[name]
        want = ft(x)

        def lazy_once():
            c = LazyChain(lz)
            r = fl(c, hx)
            lz.sync(r)
            return r

        r = lazy_once()                        # compile (cache miss)
        got = lz.to_torch(r, x.shape)
        lz.release(r)
        err = ((got - want).abs() / (want.abs() + 1e-6)).max().item()
        for _ in range(2):                     # warm caches and allocator
            ft(x)
            lz.release(lazy_once())
        te = best_of(lambda: ft(x), a.reps)
        torch.set_num_threads(t_all)
        ft(x)
        te2 = best_of(lambda: ft(x), a.reps)
        torch.set_num_threads(t_def)
        tl = best_of(lambda: lz.release(lazy_once()), a.reps)
        worst = max(worst, tl / te)
        print("%-6s %10.3f %10.3f %10.3f %8.3f %8.3f %10.2e" % (
            name, te * 1e3, te2 * 1e3, tl * 1e3, tl / te, tl / te2, err))
        sys.stdout.flush()
    print("target: ratio <= 0.25 vs default eager (worst here %.3f)" % worst)
    lz.release(hx)


if __name__ == "__main__":
    main()
