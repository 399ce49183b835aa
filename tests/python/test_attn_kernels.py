"""The transformer-path kernels of lazy/kernels/{matmul,kutil,cat,norm}.c at
shapes that take their parallel paths, against eager on the CPU: addmm with
the bias filled per GEMM block (row and column splits, transposed and
strided operands, strided bias, f32/f64/bf16), cat written row by row
(many inputs, strided and mixed-dtype inputs, every dim). Values and
gradients.
"""
import pytest
import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

DEV = lazytpu.device()


def _grads(fn, args, device):
    ts = [a.detach().clone().to(device).requires_grad_(a.is_floating_point())
          for a in args]
    out = fn(*ts)
    g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * g.to(device)).sum().backward()
    return [out.cpu().double()] + [t.grad.cpu().double() for t in ts
                                   if t.grad is not None]


def _count(name):
    return met.counter_value("lazytpu::" + name) or 0


def _close(want, got, tol):
    for i, (a, c) in enumerate(zip(want, got)):
        scale = max(1.0, float(a.abs().max()))
        assert a.shape == c.shape, i
        assert float((a - c).abs().max()) <= tol * scale, ("output %d" % i)


TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 0.1}


# (M, K, N): M >= N splits C's rows over the helpers, N > M its columns;
# all are above the 2 MFLOP split threshold of lt_kutil_gemm_par.
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mkn", [(300, 64, 129), (37, 256, 701), (4096 // 8, 256, 96)])
@pytest.mark.parametrize("layout", ["linear", "a_t", "bias_strided"])
def test_addmm_bias_per_block(dt, mkn, layout):
    M, K, N = mkn
    torch.manual_seed(0)
    x = torch.randn(M, K, dtype=dt)
    w = torch.randn(N, K, dtype=dt) / 8
    b = torch.randn(2 * N, dtype=dt)

    def fn(x, w, b):
        bias = b[::2] if layout == "bias_strided" else b[:N]
        if layout == "a_t":   # A read transposed in place: x.t().t()
            return torch.addmm(bias, x.t().contiguous().t(), w.t())
        return F.linear(x, w, bias)

    n0 = _count("addmm")
    want = _grads(fn, [x, w, b], "cpu")
    got = _grads(fn, [x, w, b], DEV)
    assert _count("addmm") > n0
    _close(want, got, TOL[dt])


def test_addmm_bias_k0_and_empty():
    """K = 0: the result is the bias on every row; M = 0: empty."""
    b = torch.randn(5)
    for M, K in ((7, 0), (0, 3)):
        x, w = torch.randn(M, K), torch.randn(5, K)
        got = F.linear(x.to(DEV), w.to(DEV), b.to(DEV)).cpu()
        assert torch.equal(got, F.linear(x, w, b))


# ---- softmax with a folded scale (lazy/compile_pattern.c, norm.c) ----

def _att(scale_kind, dim):
    def fn(q, k, v):
        s = q @ k.transpose(-2, -1)
        if scale_kind == "float":
            s = s * 0.125
        elif scale_kind == "neg_first":
            s = -0.3 * s
        elif scale_kind == "tensor":
            s = s * torch.tensor(0.25, dtype=s.dtype, device=s.device)
        elif scale_kind == "shared":     # the scaled scores have another user
            s = s * 0.125
            return torch.softmax(s, dim=dim) @ v + s.sum(-1, keepdim=True)
        elif scale_kind == "int":        # mul by an integer scalar
            s = s * 3
        return torch.softmax(s, dim=dim) @ v
    return fn


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("scale_kind", ["float", "neg_first", "tensor", "shared", "int", "none"])
@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax_scaled_attention(dt, scale_kind, dim):
    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 33, 16, dtype=dt) for _ in range(3))
    want = _grads(_att(scale_kind, dim), [q, k, v], "cpu")
    got = _grads(_att(scale_kind, dim), [q, k, v], DEV)
    _close(want, got, {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 0.05}[dt])


def test_softmax_scaled_noncontiguous_and_output():
    """The scaled scores a strided view (transposed) and a graph output
    themselves (then the mul is kept): values as eager's."""
    torch.manual_seed(0)
    x = torch.randn(4, 40, 24)
    for keep in (False, True):
        xd = x.to(DEV)
        s = xd.transpose(1, 2) * 0.5
        p = torch.softmax(s, -1)
        got = [p.cpu()] + ([s.cpu()] if keep else [])
        sw = x.transpose(1, 2) * 0.5
        want = [torch.softmax(sw, -1)] + ([sw] if keep else [])
        for a, c in zip(want, got):
            assert torch.allclose(a, c, atol=1e-6, rtol=1e-5)


FOLD_SCRIPT = r'''
import torch, lazytpu
dev = lazytpu.device()
torch.manual_seed(0)
q, k, v = (torch.randn(8, 64, 32, device=dev, requires_grad=True) for _ in range(3))
for _ in range(2):
    o = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1) @ v
    o.sum().backward()
    lazytpu.mark_step()
lazytpu.wait_device_ops()
print(lazytpu.metrics.metrics_report())
'''


def _profile_rows(script):
    import os
    import subprocess
    import sys
    env = dict(os.environ, LAZYTPU_NUM_CORES="1", LAZYTPU_PROFILE="1")
    env.pop("LAZYTPU_CHECK_FINITE", None)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    table = p.stdout[p.stdout.index("== kernel profile =="):]
    return [line.split()[0] for line in table.splitlines()[2:] if line.strip()], table


def test_softmax_scale_is_folded():
    """The only multiplications of attention (scale forward, scale of the
    scores' gradient backward) run inside softmax / softmax_backward: the
    kernel profile shows no fused(mul) step."""
    rows, table = _profile_rows(FOLD_SCRIPT)
    assert "softmax" in rows and "softmax_backward" in rows, table
    assert not any(r.startswith("fused(mul") for r in rows), table


# ---- cat reading reshape sources (compile_pattern.c, cat.c) ----

def _heads_cat(dim, kind):
    def fn(a, b, c):
        ts = [t * 1.0 for t in (a, b, c)]            # intermediates, [n, h, s, d]
        n, h, s_, d = ts[0].shape
        parts = [t.transpose(1, 2).reshape(n, s_, h * d) for t in ts]
        if kind == "shared":                         # a reshape with another user
            return torch.cat(parts, dim) + parts[0].sum()
        if kind == "twice":
            return torch.cat([parts[0], parts[1], parts[0]], dim)
        if kind == "mixed":                          # a contiguous input between
            return torch.cat([parts[0], torch.ones_like(parts[1]), parts[2]], dim)
        return torch.cat(parts, dim)
    return fn


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [-1, 1, 0])
@pytest.mark.parametrize("kind", ["plain", "shared", "twice", "mixed"])
def test_cat_of_transposed_reshapes(dt, dim, kind):
    torch.manual_seed(0)
    a, b, c = (torch.randn(5, 3, 7, 8, dtype=dt) for _ in range(3))
    want = _grads(_heads_cat(dim, kind), [a, b, c], "cpu")
    got = _grads(_heads_cat(dim, kind), [a, b, c], DEV)
    _close(want, got, {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 2e-2}[dt])


def test_cat_large_blocks_and_empty():
    """Blocks of the leading dim over the helpers (a large output), a
    length-1 leading dim, and legacy empty 1-D inputs between."""
    torch.manual_seed(0)
    for shape in ((32, 4, 128, 64), (1, 2, 300, 40)):
        xs = [torch.randn(*shape) for _ in range(3)]
        n, h, s_, d = shape

        def fn(*ts):
            ps = [(t + 0).transpose(1, 2).reshape(n, s_, h * d) for t in ts]
            return torch.cat([ps[0], torch.empty(0), ps[1], ps[2]], -1)
        got = fn(*[x.to(DEV) for x in xs]).cpu()
        assert torch.equal(got, fn(*xs))


CAT_SCRIPT = r'''
import torch, lazytpu
dev = lazytpu.device()
xs = [torch.randn(4, 2, 16, 8, device=dev) for _ in range(3)]
for _ in range(2):
    y = torch.cat([(x * 2).transpose(1, 2).reshape(4, 16, 16) for x in xs], -1)
    lazytpu.mark_step()
lazytpu.wait_device_ops()
print(lazytpu.metrics.metrics_report())
'''


def test_cat_reads_reshape_sources():
    """The transposed reshapes are not materialised before the cat."""
    rows, table = _profile_rows(CAT_SCRIPT)
    assert "cat" in rows, table
    assert "reshape" not in rows, table


# ---- bmm reading merged-heads sources in place (compile_pattern.c, matmul.c) ----

def _mha(x, wqkv, bqkv, wo, heads):
    b, s, d = x.shape
    q, k, v = F.linear(x, wqkv, bqkv).split(d, dim=2)
    q, k, v = (t.reshape(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    att = torch.softmax(q @ k.transpose(-2, -1) * (d // heads) ** -0.5, dim=-1)
    o = (att @ v).transpose(1, 2).reshape(b, s, d)
    return F.linear(o, wo)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bshd", [(3, 17, 3, 8), (2, 128, 4, 16), (1, 5, 2, 3)])
def test_multihead_attention(dt, bshd):
    """The models.py attention: q, k, v, the output gradient read by bmm
    as 4-D strided views (the heads merged into the batch), the q/k/v
    gradients cat straight from their transposed sources."""
    b, s, h, dh = bshd
    d = h * dh
    torch.manual_seed(0)
    x = torch.randn(b, s, d, dtype=dt)
    wqkv = torch.randn(3 * d, d, dtype=dt) / d ** 0.5
    bqkv = torch.randn(3 * d, dtype=dt)
    wo = torch.randn(d, d, dtype=dt) / d ** 0.5
    fn = lambda *a: _mha(*a, heads=h)   # noqa: E731
    want = _grads(fn, [x, wqkv, bqkv, wo], "cpu")
    got = _grads(fn, [x, wqkv, bqkv, wo], DEV)
    _close(want, got, {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 0.1}[dt])


def test_bmm_4d_broadcast_and_plain_batches():
    """A merged-heads operand whose source is expanded (stride 0) along the
    first dim, an operand also used elsewhere (stays a copy), integer bmm."""
    torch.manual_seed(0)
    a = torch.randn(1, 3, 5, 6)
    bm = torch.randn(4, 3, 6, 2)

    def fn(a, bm):
        ae = (a * 1).expand(4, 3, 5, 6).transpose(2, 3).reshape(12, 6, 5)
        return torch.bmm(ae.transpose(1, 2), bm.reshape(12, 6, 2))
    got = fn(a.to(DEV), bm.to(DEV)).cpu()
    assert torch.allclose(got, fn(a, bm), atol=1e-5)

    def fn2(a, bm):
        r = (a * 1).expand(4, 3, 5, 6).transpose(2, 3).reshape(12, 6, 5)
        return torch.bmm(r.transpose(1, 2), bm.reshape(12, 6, 2)), r.sum()
    for g, w in zip(fn2(a.to(DEV), bm.to(DEV)), fn2(a, bm)):
        assert torch.allclose(g.cpu(), w, atol=1e-5)
    ia = torch.randint(-5, 5, (2, 3, 4, 5))
    ib = torch.randint(-5, 5, (6, 5, 2))
    want = torch.bmm(ia.transpose(2, 3).reshape(6, 5, 4).transpose(1, 2), ib)
    got = torch.bmm(ia.to(DEV).transpose(2, 3).reshape(6, 5, 4).transpose(1, 2), ib.to(DEV)).cpu()
    assert torch.equal(got, want)


MHA_SCRIPT = r'''
import torch, lazytpu
import torch.nn.functional as F
dev = lazytpu.device()
torch.manual_seed(0)
b, s, h, dh = 2, 16, 4, 8
d = h * dh
x = torch.randn(b, s, d, device=dev)
w = torch.randn(3 * d, d, device=dev, requires_grad=True)
for _ in range(2):
    q, k, v = F.linear(x, w).split(d, dim=2)
    q, k, v = (t.reshape(b, s, h, dh).transpose(1, 2) for t in (q, k, v))
    att = torch.softmax(q @ k.transpose(-2, -1) * dh ** -0.5, dim=-1)
    (att @ v).sum().backward()
    lazytpu.mark_step()
lazytpu.wait_device_ops()
print(lazytpu.metrics.metrics_report())
'''


def test_attention_heads_not_copied():
    """No reshape copy is left in the attention (forward and backward):
    q, k, v and the output gradient are read in place by the bmms, the q/k/v
    gradients by the cat."""
    rows, table = _profile_rows(MHA_SCRIPT)
    assert "bmm" in rows and "cat" in rows, table
    assert "reshape" not in rows, table
