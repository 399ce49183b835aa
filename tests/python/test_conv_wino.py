"""The Winograd F(2x2,3x3) convolution path (lazy/kernels/conv_wino.c) run on
the device: values and gradients against eager PyTorch on CPU, with
LAZYTPU_CONV_ALGO forcing Winograd, forcing im2col + GEMM, and left to the
default heuristic (read by the kernel on every call; it sends a forward
conv of one input channel, the CNN's first layer, to conv_direct.c).

Shapes: ResNet-18's 3x3 stride-1 layers at batch 16 and the CNN's (1->16 at
28x28, 16->32 at 14x14), odd sizes (half-empty edge tiles), padding 0, 1
and 2, batch 1; f32 and bf16 storage (computed in f32).

Tolerances: f32 as the im2col tests' (2e-5 of the output's scale + 1e-4
relative): Winograd's transforms only add, subtract and halve, its sums have
~4x more terms of the same size, measured error ~1e-6 of the scale. bf16:
1/64 of the scale + 2% (one bf16 rounding of the result is 1/256 relative).
The weight gradient takes the path too (Winograd's adjoint, conv_wino.c).
Measured max error / scale against float64 on ResNet-18's and the CNN's
shapes: Winograd 2e-7..8e-7, im2col 2e-7..6e-7, eager 1e-7..2.5e-6 (all
three gradients). A test below also checks that forcing Winograd really changes the
computation (results not bitwise those of im2col), so a dispatch that
silently ignored the variable would fail.
"""
import pytest
import torch
import torch.nn.functional as F

import lazytpu

DEV = torch.device("lazytpu")

# (N, C, H, W, O, pad)
CASES = [
    (16, 64, 16, 16, 64, 1),     # ResNet-18 layer1
    (16, 128, 8, 8, 128, 1),     # layer2
    (16, 256, 4, 4, 256, 1),     # layer3
    (16, 512, 2, 2, 512, 1),     # layer4 (heuristic: im2col)
    (32, 1, 28, 28, 16, 1),      # CNN conv1 (heuristic: direct forward, im2col gradients)
    (32, 16, 14, 14, 32, 1),     # CNN conv2
    (1, 24, 15, 13, 40, 1),      # batch 1, odd sizes
    (3, 9, 11, 7, 10, 0),        # padding 0, odd, channels off the 8-wide step
    (1, 1, 9, 6, 5, 0),          # one input channel, batch 1, padding 0
    (2, 16, 5, 6, 12, 2),        # padding 2 (input gradient with padding 0)
]


def _close(a, b, dt):
    b = b.float()
    scale = float(b.abs().max()) if b.numel() else 1.0
    tol = (dict(atol=scale / 64, rtol=2e-2) if dt == torch.bfloat16
           else dict(atol=2e-5 * max(scale, 1.0), rtol=1e-4))
    torch.testing.assert_close(a.cpu().float(), b, **tol)


def _set_algo(monkeypatch, algo):
    if algo == "auto":
        monkeypatch.delenv("LAZYTPU_CONV_ALGO", raising=False)
    else:
        monkeypatch.setenv("LAZYTPU_CONV_ALGO", algo)


def _run(case, dt):
    N, C, H, W, O, p = case
    gen = torch.Generator().manual_seed(N * 1000 + C + H + O)
    x = torch.randn(N, C, H, W, generator=gen).to(dt)
    w = (torch.randn(O, C, 3, 3, generator=gen) / (C * 9) ** 0.5).to(dt)
    xr, wr = x.float().clone().requires_grad_(), w.float().clone().requires_grad_()
    y = F.conv2d(xr, wr, None, 1, p)
    gy = torch.randn(y.shape, generator=gen).to(dt)
    y.backward(gy.float())
    xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    yd = F.conv2d(xd, wd, None, 1, p)
    yd.backward(gy.to(DEV))
    lazytpu.mark_step(wait=True)
    return (yd, xd.grad, wd.grad), (y.detach(), xr.grad, wr.grad)


@pytest.mark.parametrize("algo", ["winograd", "im2col", "auto"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "N%d_C%d_%dx%d_O%d_p%d" % c)
def test_conv3x3_values_and_grads(case, dt, algo, monkeypatch):
    if algo != "winograd" and case[0] * case[1] > 2048 and dt == torch.bfloat16:
        pytest.skip("large bf16 im2col cases are covered by test_conv_pool_paths.py")
    _set_algo(monkeypatch, algo)
    ours, ref = _run(case, dt)
    for a, b in zip(ours, ref):
        _close(a, b, dt)


@pytest.mark.parametrize("case", [CASES[0], CASES[6], CASES[7]],
                         ids=lambda c: "N%d_C%d_%dx%d_O%d_p%d" % c)
def test_forcing_changes_the_path(case, monkeypatch):
    _set_algo(monkeypatch, "winograd")
    wino, ref = _run(case, torch.float32)
    _set_algo(monkeypatch, "im2col")
    im2col, _ = _run(case, torch.float32)
    for a, b, r in zip(wino, im2col, ref):
        a, b = a.cpu(), b.cpu()
        # different sums: some elements differ in their last bits ...
        assert not torch.equal(a, b)
        # ... both within the f32 tolerance of eager
        _close(a, r, torch.float32)
        _close(b, r, torch.float32)

