"""torch.autocast("lazytpu", dtype=torch.bfloat16) against CPU autocast and
against float32: forward dtypes follow the op lists (matmul / conv / linear
in bf16; softmax, reductions and losses in f32), values and gradients are as
close to float32 as CPU autocast gets (TPU-MXU numerics: bf16 inputs, f32
accumulation)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

DEV = torch.device("lazytpu")


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    return {"mlp": (mlp, (16, 32)), "cnn": (cnn, (4, 3, 8, 8))}


def run(model, x, y, device, autocast):
    m = copy.deepcopy(model).to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        out = m(x.to(device))
        loss = F.cross_entropy(out, y.to(device))
    loss.backward()
    lazytpu.mark_step()
    return out, loss, [p.grad.cpu() for p in m.parameters()]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_autocast_forward_backward_vs_cpu_autocast(name):
    model, shape = models()[name]
    torch.manual_seed(1)
    x, y = torch.randn(*shape), torch.randint(0, 10, (shape[0],))
    before = set(met.executed_fallback_ops())
    o32, l32, g32 = run(model, x, y, torch.device("cpu"), False)
    oc, lc, gc = run(model, x, y, torch.device("cpu"), True)
    ol, ll, gl = run(model, x, y, DEV, True)
    assert set(met.executed_fallback_ops()) == before, "CPU fallbacks ran"
    assert ol.device.type == "lazytpu"
    assert oc.dtype == ol.dtype == torch.bfloat16          # the last Linear ran in bf16
    assert lc.dtype == ll.dtype == torch.float32           # the loss in f32
    # as close to float32 as CPU autocast, within a factor (bf16 rounding noise)
    assert abs(ll.item() - l32.item()) <= 2 * abs(lc.item() - l32.item()) + 2e-2
    for i, (a, b, c) in enumerate(zip(g32, gc, gl)):
        assert c.dtype == torch.float32
        err_cpu = (b - a).abs().max().item()
        err_lt = (c - a).abs().max().item()
        assert err_lt <= 2 * err_cpu + 4e-3 * a.abs().max().item() + 1e-4, (i, err_lt, err_cpu)
    # autocast really changed the numerics (the test can tell f32 from bf16)
    assert max((c - a).abs().max().item() for a, c in zip(g32, gl)) > 0


def test_autocast_policies():
    a = torch.randn(8, 16, device=DEV)
    b = torch.randn(16, 4, device=DEV)
    with torch.autocast("lazytpu", dtype=torch.bfloat16):
        mm = a @ b
        sm = torch.softmax(mm, -1)
        s = mm.sum()
        r = torch.relu(mm)
        ln = F.layer_norm(mm, (4,))
    assert mm.dtype == torch.bfloat16
    assert sm.dtype == torch.float32 and s.dtype == torch.float32
    assert r.dtype == torch.bfloat16          # falls through: runs in its input's dtype
    assert ln.dtype == torch.float32
    # MXU numerics: bf16 inputs, f32 accumulation, result rounded to bf16
    want = (a.cpu().bfloat16().float() @ b.cpu().bfloat16().float()).bfloat16()
    torch.testing.assert_close(mm.cpu(), want, atol=0, rtol=0)


def test_autocast_disabled_and_nested():
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast("lazytpu", dtype=torch.bfloat16):
        with torch.autocast("lazytpu", enabled=False):
            assert (a @ a).dtype == torch.float32
        assert (a @ a).dtype == torch.bfloat16
    assert (a @ a).dtype == torch.float32


def test_binary_cross_entropy_is_refused_under_autocast():
    p = torch.rand(4, device=DEV)
    t = torch.rand(4, device=DEV)
    with torch.autocast("lazytpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_cross_entropy_runs_in_f32_under_autocast(reduction):
    # cross_entropy passes its input's dtype to log_softmax explicitly: unless
    # the whole loss is on the fp32 list (torch_xla 2.9 and CPU autocast list
    # it), the log-probs of bf16 logits are rounded to bf16 first.
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    w = torch.randn(10, 64) * 0.05
    y = torch.randint(0, 10, (16,))
    with torch.autocast("lazytpu", dtype=torch.bfloat16):
        logits = F.linear(x.to(DEV), w.to(DEV))
        ce = F.cross_entropy(logits, y.to(DEV), reduction=reduction)
    assert logits.dtype == torch.bfloat16 and ce.dtype == torch.float32
    want = F.cross_entropy(logits.cpu().float(), y, reduction=reduction)
    torch.testing.assert_close(ce.cpu(), want, atol=2e-6, rtol=2e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu = F.cross_entropy(F.linear(x, w), y, reduction=reduction)
    torch.testing.assert_close(ce.cpu(), cpu, atol=2e-6, rtol=2e-6)
