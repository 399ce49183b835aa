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


def test_pickle_and_torch_save_of_device_tensors(dev, tmp_path):
    import io
    import pickle
    t = torch.arange(6.0).reshape(2, 3).to(dev) * 2
    # pickle round trip: comes back on the device with the same values
    u = pickle.loads(pickle.dumps(t))
    assert u.device == t.device and torch.equal(u.cpu(), t.cpu())
    # torch.save / torch.load of a device tensor inside a structure
    buf = io.BytesIO()
    torch.save({"t": t, "l": [t + 1]}, buf)
    buf.seek(0)
    d = torch.load(buf)
    assert d["t"].device == t.device and torch.equal(d["t"].cpu(), t.cpu())
    assert torch.equal(d["l"][0].cpu(), (t + 1).cpu())
    buf.seek(0)
    c = torch.load(buf, map_location="cpu")
    assert c["t"].device.type == "cpu" and torch.equal(c["t"], t.cpu())
    # deepcopy of a tensor and of a requires_grad parameter
    p = torch.nn.Parameter(torch.ones(3, device=dev))
    q = copy.deepcopy(p)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.device == dev
    assert torch.equal(q.cpu(), p.cpu())


def test_optimizer_state_dict_round_trip(dev, tmp_path):
    m = _model().to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    m(torch.randn(2, 1, 6, 6, device=dev)).sum().backward()
    opt.step()
    lazytpu.mark_step()
    path = tmp_path / "opt.pt"
    torch.save({"m": m.state_dict(), "o": opt.state_dict()}, path)
    ck = torch.load(path, map_location="cpu")
    m2 = _model()
    m2.load_state_dict(ck["m"])
    opt2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
    opt2.load_state_dict(ck["o"])
    _same_state(m, m2)
    st = opt2.state_dict()["state"][0]
    assert st["exp_avg"].device.type == "cpu"
    torch.testing.assert_close(st["exp_avg"], opt.state_dict()["state"][0]["exp_avg"].cpu())
