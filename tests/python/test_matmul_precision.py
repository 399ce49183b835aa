"""TPU matmul precision (lazytpu.set_matmul_precision, torch_xla.backends):
f32 matmuls, bmm, linear, convolutions and their gradients at each level
against an emulation of XLA's bf16 passes written here in numpy, and the
mantissa bits each level keeps (8 / 14 / 22, +-1, the figures
pytorch/xla's test/test_mat_mul_precision.py holds a TPU to).

Bit for bit where every output is one product per pass (diagonal matrices,
outer products, 1x1 convolutions of diagonal weights: accumulation order
cannot matter); elsewhere within f32 accumulation noise of the emulation,
and visibly off plain f32 (a level that is not applied fails).
"""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LEVELS = ("default", "high", "highest")
BITS = {"default": 8, "high": 14, "highest": 22}

# ---------------------------------------------------------------- emulation


def _trunc(x):
    """f32 -> f32 with the low 16 bits cleared (bf16 by truncation)."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _rne(x):
    """f32 -> the nearest bf16 value (ties to even), as f32; NaN stays NaN."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, r).astype(np.float32)


def split(x, level):
    """XLA's split of an f32 operand into bf16 parts (hi first)."""
    x = np.asarray(x, np.float32)
    if level == "default":
        return [_rne(x)]
    hi = _trunc(x)
    r = (x - hi).astype(np.float32)
    if level == "high":
        return [hi, _rne(r)]
    mid = _trunc(r)
    return [hi, mid, _rne((r - mid).astype(np.float32))]


PASSES = {"default": [(0, 0)],
          "high": [(1, 0), (0, 1), (0, 0)],                                    # lo*hi, hi*lo, hi*hi
          "highest": [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0)]}         # mm hl lh hm mh hh


def emulate(op, a, b, level):
    """op(a, b) (a bilinear numpy function) at `level`: each pass computed
    exactly in float64 and rounded to f32 (the MXU: exact products, f32
    result), the passes summed in f32 in XLA's order, NaN -> 0 before the
    last."""
    pa, pb = split(a, level), split(b, level)
    ps = PASSES[level]
    acc = None
    for k, (i, j) in enumerate(ps):
        p = np.asarray(op(pa[i].astype(np.float64), pb[j].astype(np.float64)), np.float32)
        if k == 0:
            acc = p
        elif k < len(ps) - 1:
            acc = (acc + p).astype(np.float32)
        else:
            acc = (np.where(np.isnan(acc), np.float32(0), acc) + p).astype(np.float32)
    return acc


def mm_np(a, b):
    return a @ b


def mantissa_bits(got, ref):
    """-log2 of the largest relative error. pytorch/xla's test holds a
    product of two values near 1 at b bits to an error in
    ((1 + 2^-b)^2 - 1) * [1/4, 1] ~ [2^(-1-b), 2^(1-b)]: b +- 1 here."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    mask = ref != 0
    err = np.max(np.abs(got[mask] - ref[mask]) / np.abs(ref[mask]))
    return math.inf if err == 0 else -math.log2(err)


def near_one(shape, gen):
    """Values in [0.99, 1.01): the inputs of pytorch/xla's precision test."""
    return (0.99 + 0.02 * torch.rand(shape, generator=gen, dtype=torch.float64)).float()


def diag(n, gen):
    return torch.diag(near_one((n,), gen))


@pytest.fixture
def level():
    """Restores the level a test changed (the rest of the suite runs f32)."""
    before = lazytpu.get_matmul_precision()
    yield lazytpu.set_matmul_precision
    lazytpu.set_matmul_precision(before)
    lazytpu.mark_step()


def run_at(lv, fn, *args):
    """fn(*device args) synced at level lv; host values of its results."""
    lazytpu.set_matmul_precision(lv)
    dev = lazytpu.device()
    out = fn(*[a.to(dev) for a in args])
    out = out if isinstance(out, (tuple, list)) else (out,)
    lazytpu.mark_step()
    return [o.cpu() for o in out]


# -------------------------------------------------------------------- tests


def test_levels_api(level):
    assert lazytpu.get_matmul_precision() == "f32"      # lazytpu's own default
    for lv in ("default", "high", "highest", "f32"):
        level(lv)
        assert lazytpu.get_matmul_precision() == lv
    with pytest.raises(ValueError, match="expected one of f32, default, high, highest"):
        lazytpu.set_matmul_precision("medium")
    assert lazytpu.get_matmul_precision() == "f32"
    level("high")
    assert met.metrics_report().startswith(
        "lazytpu: f32 matrix products at matmul precision 'high' (3 bf16 passes")


@pytest.mark.parametrize("lv", LEVELS)
def test_mm_bits_and_emulation(level, lv):
    """pytorch/xla's measurement (diagonal matrices near 1: one product per
    output) on mm, bmm and linear; every value equals the emulation."""
    g = torch.Generator().manual_seed(1)
    x, y = diag(1024, g), diag(1024, g)
    xb, yb = torch.stack([diag(256, g) for _ in range(4)]), torch.stack([diag(256, g) for _ in range(4)])
    bias = torch.randn(1024, generator=g)
    mm, bmm, lin = run_at(lv, lambda a, b, c, d, e: (a @ b, torch.bmm(c, d), F.linear(a, b.t(), e)),
                          x, y, xb, yb, bias)
    want = emulate(mm_np, x.numpy(), y.numpy(), lv)
    assert np.array_equal(mm.numpy(), want)
    assert np.array_equal(bmm.numpy(), emulate(np.matmul, xb.numpy(), yb.numpy(), lv))
    # linear: the bias is added to the passes' sum
    assert np.array_equal(lin.numpy(), (want + bias.numpy()[None, :]).astype(np.float32))
    # the GEMM epilogue (Linear + ReLU in one step)
    (act,) = run_at(lv, lambda a, b, e: torch.relu(F.linear(a, b.t(), e)), x, y, bias)
    assert np.array_equal(act.numpy(), np.maximum(want + bias.numpy()[None, :], 0))
    exact = x.double() @ y.double()
    bits = mantissa_bits(mm, exact)
    assert abs(bits - BITS[lv]) <= 1, "%s: %.2f bits" % (lv, bits)
    assert abs(mantissa_bits(bmm, xb.double() @ yb.double()) - BITS[lv]) <= 1


def test_f32_level_is_plain_f32(level):
    g = torch.Generator().manual_seed(2)
    x, y = diag(256, g), diag(256, g)
    (got,) = run_at("f32", lambda a, b: a @ b, x, y)
    assert torch.equal(got, x @ y)                      # one f32 rounding per output
    assert mantissa_bits(got, x.double() @ y.double()) >= 23


@pytest.mark.parametrize("lv", LEVELS)
def test_gradients_bits_and_emulation(level, lv):
    """y = x @ w with diagonal x, w and upstream gradient: grad_x = g @ w^T
    and grad_w = x^T @ g are one product per output too."""
    gen = torch.Generator().manual_seed(3)
    x, w, gu = diag(384, gen), diag(384, gen), diag(384, gen)
    lazytpu.set_matmul_precision(lv)
    dev = lazytpu.device()
    xd, wd = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
    ((xd @ wd) * gu.to(dev)).sum().backward()
    lazytpu.mark_step()
    gx, gw = xd.grad.cpu(), wd.grad.cpu()
    assert np.array_equal(gx.numpy(), emulate(mm_np, gu.numpy(), w.numpy().T, lv))
    assert np.array_equal(gw.numpy(), emulate(mm_np, x.numpy().T, gu.numpy(), lv))
    for got, ref in ((gx, gu.double() @ w.double().t()), (gw, x.double().t() @ gu.double())):
        bits = mantissa_bits(got, ref)
        assert abs(bits - BITS[lv]) <= 1, "%s: %.2f bits" % (lv, bits)


def _conv_np(x, w):
    """1x1 convolution, stride 1: y[n, o, h, w] = sum_c w[o, c] x[n, c, h, w]."""
    return np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x)


@pytest.mark.parametrize("lv", LEVELS)
def test_conv_bits_emulation_and_gradients(level, lv):
    """A 1x1 convolution with a diagonal weight on a 1x1 image: output,
    input gradient and weight gradient are one product per value."""
    gen = torch.Generator().manual_seed(4)
    C = 256
    x = near_one((1, C, 1, 1), gen)
    w = torch.diag(near_one((C,), gen)).reshape(C, C, 1, 1)
    gu = near_one((1, C, 1, 1), gen)
    lazytpu.set_matmul_precision(lv)
    dev = lazytpu.device()
    xd, wd = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
    y = F.conv2d(xd, wd)
    (y * gu.to(dev)).sum().backward()
    lazytpu.mark_step()
    y, gx, gw = y.detach().cpu(), xd.grad.cpu(), wd.grad.cpu()
    assert np.array_equal(y.numpy(), emulate(_conv_np, x.numpy(), w.numpy(), lv))
    # grad_x[c] = sum_o w[o, c] gu[o]; grad_w[o, c] = gu[o] x[c]
    want_gx = emulate(lambda g_, w_: np.einsum("oc,nohw->nchw", w_[:, :, 0, 0], g_),
                      gu.numpy(), w.numpy(), lv)
    assert np.array_equal(gx.numpy(), want_gx)
    want_gw = emulate(lambda g_, x_: np.einsum("no,nc->oc", g_[:, :, 0, 0], x_[:, :, 0, 0]),
                      gu.numpy(), x.numpy(), lv).reshape(C, C, 1, 1)
    assert np.array_equal(gw.numpy(), want_gw)
    ref_y = F.conv2d(x.double(), w.double())
    assert abs(mantissa_bits(y[y != 0], ref_y[ref_y != 0]) - BITS[lv]) <= 1
    ref_gw = gu.double().reshape(C, 1) * x.double().reshape(1, C)
    assert abs(mantissa_bits(gw.reshape(C, C), ref_gw) - BITS[lv]) <= 1


def _close_to_emulation(got, want, scale, k, what):
    """|got - want| within f32 accumulation noise over k terms (and the
    passes' sums) of the emulation, relative to sum |a_i b_i| (scale)."""
    err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)) / (scale + 1e-30))
    assert err <= (k + 8) * 2.0 ** -23, "%s: %.3g off the emulation" % (what, err)


def _off_f32(got, exact, scale):
    return np.max(np.abs(got.astype(np.float64) - exact) / (scale + 1e-30))


@pytest.mark.parametrize("lv", LEVELS)
def test_random_matmul_and_gradients(level, lv):
    """Dense random products on every GEMM path (BLAS, the own small GEMM,
    the K split over workers, the GEMM epilogue of Linear + ReLU) and
    Linear's gradients, against the emulation."""
    gen = torch.Generator().manual_seed(5)
    for M, K, N in [(7, 13, 5), (64, 64, 64), (16, 8192, 16), (96, 128, 80)]:
        a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
        bias, gu = torch.randn(N, generator=gen), torch.randn(M, N, generator=gen)
        an, bn, gn = a.numpy(), b.numpy(), gu.numpy()
        scale = np.abs(an).astype(np.float64) @ np.abs(bn) + np.abs(bias.numpy())
        pre = (emulate(mm_np, an, bn, lv) + bias.numpy()).astype(np.float32)
        (y,) = run_at(lv, lambda p, q, c: torch.relu(F.linear(p, q.t(), c)), a, b, bias)
        _close_to_emulation(y.numpy(), np.maximum(pre, 0), scale, K, "linear + relu")
        if K <= 128 and lv != "highest":
            exact = an.astype(np.float64) @ bn + bias.numpy()
            pos = pre > 0
            off = _off_f32(y.numpy()[pos], exact[pos], scale[pos])
            assert off > 2.0 ** (-BITS[lv] - 6), "%s %s: looks like plain f32" % (lv, (M, K, N))
        dev = lazytpu.device()
        ad, bd = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
        (F.linear(ad, bd.t(), bias.to(dev)) * gu.to(dev)).sum().backward()
        lazytpu.mark_step()
        _close_to_emulation(ad.grad.cpu().numpy(), emulate(mm_np, gn, bn.T, lv),
                            np.abs(gn).astype(np.float64) @ np.abs(bn.T), N, "grad_x")
        _close_to_emulation(bd.grad.cpu().numpy(), emulate(mm_np, an.T, gn, lv),
                            np.abs(an.T).astype(np.float64) @ np.abs(gn), M, "grad_w")


@pytest.mark.parametrize("lv", LEVELS)
def test_random_conv_and_gradients(level, lv):
    """3x3 convolutions (im2col, the input gradient as a forward
    convolution, never Winograd at a level) and a strided grouped one."""
    gen = torch.Generator().manual_seed(6)
    for (n, c, o, hw, stride, groups) in [(4, 16, 16, 12, 1, 1), (2, 8, 12, 9, 2, 2)]:
        x = torch.randn(n, c, hw, hw, generator=gen)
        w = torch.randn(o, c // groups, 3, 3, generator=gen)
        lazytpu.set_matmul_precision(lv)
        dev = lazytpu.device()
        xd, wd = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
        y = F.conv2d(xd, wd, stride=stride, padding=1, groups=groups)
        gu = torch.randn(y.shape, generator=gen)
        (y * gu.to(dev)).sum().backward()
        lazytpu.mark_step()

        def conv(a, b):
            return F.conv2d(torch.from_numpy(a), torch.from_numpy(b), stride=stride, padding=1,
                            groups=groups).numpy()

        def conv_gx(g_, w_):
            return torch.nn.grad.conv2d_input(x.shape, torch.from_numpy(w_), torch.from_numpy(g_),
                                              stride=stride, padding=1, groups=groups).numpy()

        def conv_gw(g_, x_):
            return torch.nn.grad.conv2d_weight(torch.from_numpy(x_), w.shape, torch.from_numpy(g_),
                                               stride=stride, padding=1, groups=groups).numpy()

        xn, wn, gn = x.numpy(), w.numpy(), gu.numpy()
        ax, aw, ag = np.abs(xn).astype(np.float64), np.abs(wn).astype(np.float64), np.abs(gn).astype(np.float64)
        k = c // groups * 9
        _close_to_emulation(y.detach().cpu().numpy(), emulate(conv, xn, wn, lv), conv(ax, aw), k, "conv")
        _close_to_emulation(xd.grad.cpu().numpy(), emulate(conv_gx, gn, wn, lv), conv_gx(ag, aw),
                            o * 9, "conv grad_x")
        _close_to_emulation(wd.grad.cpu().numpy(), emulate(conv_gw, gn, xn, lv), conv_gw(ag, ax),
                            n * hw * hw, "conv grad_w")
        if lv != "highest":
            exact = conv(xn.astype(np.float64), wn.astype(np.float64))
            assert _off_f32(y.detach().cpu().numpy(), exact, conv(ax, aw)) > 2.0 ** (-BITS[lv] - 6)


def test_bf16_operands_are_exact_at_every_level(level):
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(32, 48, generator=gen).bfloat16(), torch.randn(48, 16, generator=gen).bfloat16()
    outs = [run_at(lv, lambda p, q: p @ q, a, b)[0] for lv in ("f32", "default", "high", "highest")]
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


def test_switching_levels_recompiles(level):
    """The level is part of the graph key: a switch compiles anew (the
    recompilation note names it), switching back hits the cache; a graph
    without products keeps its program."""
    dev = lazytpu.device()
    a, b = torch.randn(8, 8).to(dev), torch.randn(8, 8).to(dev)
    got = {}

    def step(lv):
        lazytpu.set_matmul_precision(lv)
        c0 = met.counter_value("UncachedCompile") or 0
        y, z = a @ b, a * 2
        lazytpu.mark_step()
        got[lv] = y.cpu()
        return (met.counter_value("UncachedCompile") or 0) - c0

    step("f32")
    assert step("f32") == 0
    assert step("default") == 1
    assert step("high") == 1
    assert step("default") == 0 and step("f32") == 0
    assert not torch.equal(got["default"], got["f32"])
    assert "matmul precision default -> high" in met.metrics_report() or \
        "matmul precision f32 -> default" in met.metrics_report()
    c0 = met.counter_value("UncachedCompile") or 0
    for lv in ("f32", "highest"):
        lazytpu.set_matmul_precision(lv)
        a * 3
        lazytpu.mark_step()
    assert (met.counter_value("UncachedCompile") or 0) - c0 <= 1


def test_compiled_graph_follows_the_level(level):
    """torch.compile(backend="lazytpu") replays a recorded program; after a
    switch the graph runs at the new level (spliced into the lazy step)."""
    import lazytpu.compile  # noqa: F401  (registers the backend)
    g = torch.Generator().manual_seed(8)
    x, y = diag(256, g), diag(256, g)
    dev = lazytpu.device()
    f = torch.compile(lambda a, b: (a @ b) * 1.0, backend="lazytpu")
    xd, yd = x.to(dev), y.to(dev)
    for lv in ("f32", "default", "high", "f32"):
        lazytpu.set_matmul_precision(lv)
        for _ in range(2):
            got = f(xd, yd)
            lazytpu.mark_step()
            want = (x @ y).numpy() if lv == "f32" else emulate(mm_np, x.numpy(), y.numpy(), lv)
            assert np.array_equal(got.cpu().numpy(), want), lv


# ------------------------------------------------- torch_xla compatibility mode

COMPAT = textwrap.dedent("""
    import logging, sys
    import numpy as np, torch, torch_xla, torch_xla.backends, torch_xla.core.xla_model as xm
    import lazytpu
    d = xm.xla_device()
    g = torch.Generator().manual_seed(0)
    x = torch.diag(0.99 + 0.02 * torch.rand(256, generator=g, dtype=torch.float64)).float()
    def bits():
        got = (x.to(d) @ x.to(d)).cpu().double()
        ref = x.double() @ x.double()
        m = ref != 0
        e = ((got[m] - ref[m]).abs() / ref[m]).max().item()
        return "inf" if e == 0 else "%.1f" % -np.log2(e)
    print("START", torch_xla.backends.get_mat_mul_precision(), lazytpu.get_matmul_precision(),
          bits(), xm.xla_device_hw(d))
    for p in sys.argv[1:]:
        torch_xla.backends.set_mat_mul_precision(p)
        print("SET", p, torch_xla.backends.get_mat_mul_precision(), bits())
    try:
        torch_xla.backends.set_mat_mul_precision("f32")
    except ValueError as e:
        print("VALUEERROR", e)
""")


def _compat(env_extra, *args):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-m", "lazytpu", "-c", COMPAT] + list(args), env=env,
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _bits(line):
    v = line.split()[-2] if line.startswith("START") else line.split()[-1]
    return float(v)


def test_compat_tpu_default_is_a_tpu_run():
    """PJRT_DEVICE unset or TPU: products at the TPU's DEFAULT from the
    start; set_mat_mul_precision switches levels inside one process (the
    test_all pytorch/xla marks as an expected failure, #9129)."""
    for env in ({}, {"PJRT_DEVICE": "TPU"}):
        p = _compat(env, "highest", "high", "default")
        lines = p.stdout.splitlines()
        start = lines[0].split()
        assert start[:3] == ["START", "default", "default"] and start[-1] == "TPU"
        assert abs(_bits(lines[0]) - 8) <= 1
        for line, want in zip(lines[1:4], ("highest", "high", "default")):
            assert line.split()[1:3] == [want, want]
            assert abs(_bits(line) - BITS[want]) <= 1, line
        assert "VALUEERROR Invalid precision: f32" in p.stdout
        # torch_xla's warning through its logger, once per call
        assert p.stderr.count("Setting mat mul precision multiple times is not recommended") == 3


def test_compat_cpu_is_full_f32_and_env_overrides():
    """PJRT_DEVICE=CPU: f32 products (XLA:CPU), whatever set_mat_mul_precision
    says; LAZYTPU_MATMUL_PRECISION overrides the start in either mode."""
    p = _compat({"PJRT_DEVICE": "CPU"}, "high")
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["START", "default", "f32"] and lines[0].split()[-1] == "CPU"
    assert _bits(lines[0]) >= 23
    assert lines[1].split()[:3] == ["SET", "high", "high"] and _bits(lines[1]) >= 23
    p = _compat({"PJRT_DEVICE": "CPU", "LAZYTPU_MATMUL_PRECISION": "high"})
    line = p.stdout.splitlines()[0]
    assert line.split()[1:3] == ["high", "high"] and abs(_bits(line) - 14) <= 1
    p = _compat({"LAZYTPU_MATMUL_PRECISION": "f32"})
    line = p.stdout.splitlines()[0]
    assert line.split()[1:3] == ["default", "f32"] and _bits(line) >= 23


def test_bad_env_value_is_refused():
    env = dict(os.environ, LAZYTPU_MATMUL_PRECISION="bf16", PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, "-c", "import torch, lazytpu; torch.ones(1, device='lazytpu')"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode != 0
    assert "LAZYTPU_MATMUL_PRECISION=bf16: expected f32, default, high or highest" in p.stderr
