"""The convolution and max-pool kernels' threading paths, run on the device
(the core's helper threads, not the OpenMP fallback the C tests use):
values and gradients against eager PyTorch.

conv.c picks per call between a batch split (chunks of samples on the
helpers, weight-gradient partials summed) and a GEMM split (chunks in order,
GEMM blocks and layout loops on the helpers) by the im2col columns per
thread, and computes a stride-1 input gradient as a forward convolution of
the flipped weight only from 1024 input pixels; pool.c's general max pooling
runs rows of outputs in tiles of 64 on the helpers. The shapes below sit on
both sides of each choice (ResNet-18's 16x16..2x2 layers at batch 16, the
stem, odd sizes), with strides, padding, dilation and groups, f32 and bf16.
"""
import pytest
import torch
import torch.nn.functional as F

import lazytpu  # noqa: F401

DEV = torch.device("lazytpu")

# (N, C, H, W, O, k, stride, pad, dilation, groups)
CONV = [
    (16, 64, 16, 16, 64, 3, 1, 1, 1, 1),     # batch split, bwd input as forward
    (16, 128, 8, 8, 128, 3, 1, 1, 1, 1),     # GEMM split, bwd input as forward (1024 px)
    (16, 256, 4, 4, 256, 3, 1, 1, 1, 1),     # GEMM split, bwd input by col2im
    (16, 256, 4, 4, 512, 3, 2, 1, 1, 1),     # strided, 2x2 output
    (16, 128, 8, 8, 256, 1, 2, 0, 1, 1),     # 1x1 strided downsample
    (8, 3, 45, 43, 32, 7, 2, 3, 1, 1),       # stem-like, odd size
    (6, 48, 9, 11, 36, 3, 1, 2, 2, 3),       # dilated, groups, odd size
    (5, 32, 7, 7, 64, 3, 2, 1, 1, 2),        # strided, groups, batch not a multiple
]


def _close(a, b, dt):
    """a (device, dt) against the f32 reference b: bf16 within a few
    roundings of the result's scale (sums of many products)."""
    b = b.float()
    scale = float(b.abs().max()) if b.numel() else 1.0
    tol = (dict(atol=scale / 64, rtol=2e-2) if dt == torch.bfloat16
           else dict(atol=2e-5 * max(scale, 1.0), rtol=1e-4))
    torch.testing.assert_close(a.cpu().float(), b, **tol)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CONV, ids=lambda c: "N%d_C%d_%dx%d_O%d_k%d_s%d_p%d_d%d_g%d" % c)
def test_conv_values_and_grads(case, dt):
    N, C, H, W, O, k, s, p, d, g = case
    gen = torch.Generator().manual_seed(hash(case) % 1000)
    x = torch.randn(N, C, H, W, generator=gen).to(dt)
    w = (torch.randn(O, C // g, k, k, generator=gen) / (C // g * k * k) ** 0.5).to(dt)
    # reference: eager f32 on the same (bf16-representable) values
    xr, wr = x.float().clone().requires_grad_(), w.float().clone().requires_grad_()
    y = F.conv2d(xr, wr, None, s, p, d, g)
    gy = torch.randn(y.shape, generator=gen).to(dt)
    y.backward(gy.float())
    xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    yd = F.conv2d(xd, wd, None, s, p, d, g)
    yd.backward(gy.to(DEV))
    _close(yd, y.detach(), dt)
    _close(xd.grad, xr.grad, dt)
    _close(wd.grad, wr.grad, dt)


# (shape, kernel, stride, padding, dilation, ceil_mode)
POOL = [
    ((16, 64, 32, 32), 3, 2, 1, 1, False),   # ResNet stem pool
    ((4, 8, 9, 150), (3, 2), 1, (1, 0), 1, False),   # stride 1, rows of 2+ tiles
    ((3, 5, 20, 131), 3, (2, 3), 1, (2, 1), True),   # dilation, ceil_mode, stride 3
    ((7, 33, 17), 3, 2, 1, 1, True),         # 3-D input, odd size
]


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", POOL, ids=lambda c: "x".join(map(str, c[0])))
def test_max_pool_values_indices_grads(case, dt):
    shape, k, s, p, d, ceil = case
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(shape, generator=gen) * 4).round().to(dt)   # ties
    x.view(-1)[::101] = float("nan")
    x.view(-1)[5::89] = float("-inf")
    xr = x.float().clone().requires_grad_()
    y, idx = F.max_pool2d(xr, k, s, p, d, ceil, return_indices=True)
    gy = torch.randn(y.shape, generator=gen).to(dt)
    y.backward(gy.float())
    xd = x.to(DEV).requires_grad_()
    yd, idxd = F.max_pool2d(xd, k, s, p, d, ceil, return_indices=True)
    yd.backward(gy.to(DEV))
    torch.testing.assert_close(yd.cpu().float(), y.detach(), equal_nan=True, atol=0, rtol=0)
    assert torch.equal(idxd.cpu(), idx)
    _close(xd.grad, xr.grad, dt)
