"""Moving models and tensors between the device and the host: torch.save /
load, lazytpu.save, copy.deepcopy, model.to('cpu') round trips."""
import copy

import torch
import torch.nn as nn

import lazytpu


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 3))


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k].cpu(), sb[k].cpu(), msg=lambda m: k + ": " + m)


def test_torch_save_load_of_device_state(dev, tmp_path):
    m = _model().to(dev)
    m(torch.randn(2, 1, 6, 6, device=dev)).sum().backward()   # BN stats change
    p = tmp_path / "m.pt"
    torch.save(m.state_dict(), p)
    sd = torch.load(p)
    m2 = _model()
    m2.load_state_dict(sd)
    _same_state(m, m2)


def test_lazytpu_save_moves_to_cpu(dev, tmp_path):
    m = _model().to(dev)
    p = tmp_path / "m2.pt"
    lazytpu.save({"model": m.state_dict(), "step": 3, "t": [torch.ones(2, device=dev)]}, p)
    d = torch.load(p)
    assert d["step"] == 3
    assert all(v.device.type == "cpu" for v in d["model"].values())
    assert d["t"][0].device.type == "cpu" and d["t"][0].sum().item() == 2.0


def test_deepcopy_on_device(dev):
    m = _model().to(dev)
    m2 = copy.deepcopy(m)
    _same_state(m, m2)
    assert next(m2.parameters()).device == dev
    with torch.no_grad():                 # the copy is independent
        next(m2.parameters()).add_(1.0)
    assert not torch.equal(next(m.parameters()).cpu(), next(m2.parameters()).cpu())


def test_to_cpu_round_trip(dev):
    ref = _model()
    m = copy.deepcopy(ref).to(dev)
    back = m.to("cpu")
    assert next(back.parameters()).device.type == "cpu"
    _same_state(ref, back)
    again = back.to(dev)
    x = torch.randn(2, 1, 6, 6)
    ref.eval(), again.eval()
    torch.testing.assert_close(again(x.to(dev)).cpu(), ref(x), atol=1e-5, rtol=1e-5)


def test_load_state_dict_into_device_model(dev):
    src = _model()
    m = _model().to(dev)
    with torch.no_grad():
        for p in src.parameters():
            p.mul_(2)
    m.load_state_dict(src.state_dict())
    _same_state(src, m)
