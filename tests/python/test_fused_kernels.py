"""The fused kernels of the transformer path against eager on the CPU:
layer norm (lazy/kernels/layernorm.c: one op forward, stats only when the
backward reads them, one op per backward output) and batched matmul at the
attention's shapes (whole matrices per helper). Values and gradients, f32,
f64, bf16 storage, mixed bf16 input with f32 parameters and under autocast.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

DEV = lazytpu.device()


def _grads(fn, args, device):
    ts = [a.detach().clone().to(device).requires_grad_(a.is_floating_point())
          if a is not None else None for a in args]
    out = fn(*ts)
    g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * g.to(device)).sum().backward()
    return [out.cpu().double()] + [t.grad.cpu().double() for t in ts if t is not None]


def _count(name):
    return met.counter_value("lazytpu::" + name) or 0


@pytest.mark.parametrize("dt,shape,k,affine", [
    (torch.float32, (4, 9, 33), 1, "wb"),
    (torch.float32, (3, 16), 1, ""),
    (torch.float32, (2, 5, 6, 8), 2, "w"),
    (torch.float64, (5, 6, 8), 2, "wb"),
    (torch.bfloat16, (4, 5, 32), 1, "wb"),
    (torch.float32, (70, 256), 1, "b"),   # several row chunks
    (torch.float32, (5, 1037), 1, "wb"),  # several 512-element spans + tail
    (torch.float32, (3, 7, 33), 2, "w"),  # odd width, no w-free path
    (torch.float64, (9, 1037), 1, ""),
    (torch.bfloat16, (6, 515), 1, "wb"),
    (torch.float32, (40, 200), 1, "wb-offset"),   # mean 1e3: two-pass variance
    (torch.float32, (33, 48), 1, "wb-transposed"),  # non-contiguous input
])
def test_layer_norm_values_and_grads(dt, shape, k, affine):
    torch.manual_seed(0)
    ns = shape[-k:]
    x = (torch.randn(*shape, dtype=torch.float64) * 3 + 1).to(dt)
    if "offset" in affine:
        x = x + 1000
    if "transposed" in affine:   # same shape, strided storage
        x = x.t().contiguous().t()
        assert not x.is_contiguous()
    w = torch.randn(*ns, dtype=dt) if "w" in affine else None
    b = torch.randn(*ns, dtype=dt) if "b" in affine else None

    def fn(x, w, b):
        return F.layer_norm(x, ns, w, b, 1e-5)

    n0 = [_count(n) for n in ("layer_norm", "layer_norm_backward",
                              "layer_norm_backward_affine", "mean")]
    want = _grads(fn, [x, w, b], "cpu")
    got = _grads(fn, [x, w, b], DEV)
    n1 = [_count(n) for n in ("layer_norm", "layer_norm_backward",
                              "layer_norm_backward_affine", "mean")]
    assert n1[0] > n0[0] and n1[1] > n0[1]
    assert (n1[2] > n0[2]) == bool(affine)
    assert n1[3] == n0[3], "layer norm must not decompose into reductions"
    tol = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 0.1}[dt]
    for i, (a, c) in enumerate(zip(want, got)):
        scale = max(1.0, float(a.detach().abs().max()))
        assert float((a - c).abs().max()) <= tol * scale, ("output %d" % i, a, c)


def test_layer_norm_mixed_dtype_statistics():
    """bf16 input, f32 parameters: eager returns f32 mean/rstd."""
    x = torch.randn(3, 8).bfloat16()
    w, b = torch.randn(8), torch.randn(8)
    want = torch.native_layer_norm(x, [8], w, b, 1e-5)
    got = torch.native_layer_norm(x.to(DEV), [8], w.to(DEV), b.to(DEV), 1e-5)
    for a, c in zip(want, got):
        assert a.dtype == c.dtype and a.shape == c.shape
        assert torch.allclose(a.double(), c.cpu().double(), atol=0.05, rtol=0.02)


def test_layer_norm_under_autocast():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    outs = []
    for dev in ("cpu", DEV):
        mm = copy.deepcopy(m).to(dev)
        with torch.autocast(torch.device(dev).type, dtype=torch.bfloat16):
            y = mm(x.to(dev))
        y.float().sum().backward()
        outs.append((y.float().cpu(), mm[1].weight.grad.cpu(), mm[0].weight.grad.cpu()))
    for a, c in zip(*outs):
        assert torch.allclose(a, c, atol=0.1, rtol=0.05), (a, c)


def test_attention_bmm_batches():
    """[B*heads, 128, 64] products (the batch split over whole matrices),
    with the transposed operands the attention and its backward use."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(16, 128, 64) for _ in range(3))

    def att(q, k, v):
        s = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)
        return s @ v

    want = _grads(att, [q, k, v], "cpu")
    got = _grads(att, [q, k, v], DEV)
    for a, c in zip(want, got):
        assert torch.allclose(a, c, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bias_shape", ["n", "1n"])
def test_linear_bias_is_one_addmm(dt, bias_shape):
    """nn.Linear's bias rides in the GEMM (one addmm op, no add pass):
    values and gradients as eager's, 2-D and 3-D inputs."""
    torch.manual_seed(0)
    x = torch.randn(6, 70, 33, dtype=dt)
    w = torch.randn(20, 33, dtype=dt)
    b = torch.randn(20, dtype=dt) if bias_shape == "n" else torch.randn(1, 20, dtype=dt)

    def fn(x, w, b):
        if b.dim() == 2:
            return torch.addmm(b, x.reshape(-1, 33), w.t())
        return F.linear(x, w, b)

    n0, a0 = _count("addmm"), _count("add")
    want = _grads(fn, [x, w, b], "cpu")
    got = _grads(fn, [x, w, b], DEV)
    assert _count("addmm") > n0
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 0.1}[dt]
    for i, (a, c) in enumerate(zip(want, got)):
        scale = max(1.0, float(a.detach().abs().max()))
        assert float((a - c).abs().max()) <= tol * scale, ("output %d" % i, a, c)


def test_addmm_scaled_keeps_the_general_path():
    """beta/alpha other than 1 and a [M, N] self still trace mm + add."""
    c, x, y = torch.randn(5, 4), torch.randn(5, 3), torch.randn(3, 4)
    n0 = _count("addmm")
    for kw, cc in (({"beta": 0.5, "alpha": 2}, torch.randn(4)), ({}, c)):
        got = torch.addmm(cc.to(DEV), x.to(DEV), y.to(DEV), **kw).cpu()
        assert torch.allclose(got, torch.addmm(cc, x, y, **kw), atol=1e-5)
    assert _count("addmm") == n0


def test_linear_under_autocast():
    torch.manual_seed(0)
    lin = nn.Linear(32, 16)
    x = torch.randn(8, 32)
    outs = []
    for dev in ("cpu", DEV):
        m = copy.deepcopy(lin).to(dev)
        with torch.autocast(torch.device(dev).type, dtype=torch.bfloat16):
            y = m(x.to(dev))
        assert y.dtype == torch.bfloat16
        y.float().sum().backward()
        outs.append((y.float().cpu(), m.weight.grad.cpu(), m.bias.grad.cpu()))
    for a, c in zip(*outs):
        assert torch.allclose(a, c, atol=0.05, rtol=0.02), (a, c)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("layout", ["odd", "transposed", "sliced"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_values_and_grads(dt, layout, approximate):
    """GELU (exact: the f32 interpreter's own CDF, lazy/kernels/vmath.h
    lt_vphif, shared with gelu_backward) and the tanh form: values and
    gradients as eager's, odd lengths (vector tails), non-contiguous
    inputs, the tails |x| ~ 10, bf16 storage."""
    torch.manual_seed(0)
    base = torch.randn(37, 515, dtype=torch.float64) * 3
    base[0, :40] = torch.linspace(-12, 12, 40, dtype=torch.float64)
    base = base.to(dt)

    def view(t):
        if layout == "transposed":
            return t.t()
        if layout == "sliced":
            return t[:, 1::2]
        return t

    def fn(x):
        return F.gelu(view(x), approximate=approximate)

    want = _grads(fn, [base], "cpu")
    got = _grads(fn, [base], DEV)
    tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 2e-2,
           torch.float16: 2e-3}[dt]
    for i, (a, c) in enumerate(zip(want, got)):
        # eager's f32 erf is within ~1.5e-7 absolute: relative to |x|
        err = (a.detach() - c).abs() / (1 + base.double().abs().reshape(a.shape)
                               if i else 1 + view(base.double()).abs())
        assert float(err.max()) <= tol, ("output %d" % i, float(err.max()))
