"""The lazytpu Python API: devices, steps, closures, rng, bf16 mode, the
device module and the metrics functions."""
import os
import subprocess
import sys
import textwrap

import torch

import lazytpu
import lazytpu.metrics as met

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_devices_and_world():
    assert lazytpu.device() == torch.device("lazytpu", 0)
    assert lazytpu.device(3) == torch.device("lazytpu:3")
    assert lazytpu.xm.xla_device() == lazytpu.device()
    assert len(lazytpu.devices()) == lazytpu.device_count() >= 2
    assert lazytpu.get_ordinal() == 0 and lazytpu.world_size() == 1
    assert lazytpu.is_master_ordinal()
    assert torch.lazytpu.is_available()
    assert torch.lazytpu.device_count() == lazytpu.device_count()


def test_tensors_on_several_cores():
    a = torch.arange(4.0).to(lazytpu.device(1))
    b = torch.arange(4.0).to(lazytpu.device(2))
    assert (a * 2).device == lazytpu.device(1)
    assert torch.equal((a + 1).cpu(), torch.arange(4.0) + 1)
    assert torch.equal(b.to(lazytpu.device(1)).cpu(), torch.arange(4.0))  # core -> core
    assert lazytpu.debug.tensor_info(a * 2)["core"] == "1"
    lazytpu.mark_step(wait=True)


def test_mark_step_counts_and_caches():
    dev = lazytpu.device()
    x = torch.randn(8, 8).to(dev)
    met.clear_all()
    for _ in range(3):
        y = (x @ x).relu().sum()
        lazytpu.mark_step()
    assert met.counter_value("MarkStep") == 3
    assert met.counter_value("UncachedCompile") == 1
    assert met.counter_value("CachedCompile") == 2
    assert "CompileTime" in met.metric_names()
    lazytpu.wait_device_ops()
    samples, acc = met.metric_data("ExecuteTime")
    assert samples == 3 and acc > 0
    assert "Counter: MarkStep" in met.metrics_report()
    assert "MarkStep" in met.short_metrics_report()
    lazytpu.wait_device_ops()
    assert y.item() >= 0


def test_step_closure_runs_after_step():
    dev = lazytpu.device()
    got = []
    x = torch.ones(3).to(dev) * 2
    lazytpu.add_step_closure(lambda t: got.append(t.sum().item()), (x,))
    assert got == []
    lazytpu.mark_step()
    assert got == [6.0]


def test_rng_state():
    dev = lazytpu.device()
    lazytpu.set_rng_state(42)
    s = lazytpu.get_rng_state()
    a = torch.rand(100, device=dev).cpu()
    assert lazytpu.get_rng_state() != s          # advanced
    lazytpu.set_rng_state(42)
    b = torch.rand(100, device=dev).cpu()
    assert torch.equal(a, b)
    assert 0.0 <= a.min().item() and a.max().item() < 1.0
    assert abs(a.mean().item() - 0.5) < 0.15


def test_optimizer_step_barrier():
    dev = lazytpu.device()
    p = torch.nn.Parameter(torch.ones(3).to(dev))
    opt = torch.optim.SGD([p], lr=0.5)
    p.sum().backward()
    met.clear_all()
    lazytpu.optimizer_step(opt, barrier=True)
    assert torch.equal(p.detach().cpu(), torch.full((3,), 0.5))


def test_bf16_mode_subprocess():
    code = textwrap.dedent("""
        import torch, lazytpu
        assert lazytpu._C.bf16_mode()
        d = lazytpu.device()
        x = torch.tensor([1.0, 1.00390625, 3.14159]).to(d)
        assert x.dtype == torch.float32 and x.cpu().dtype == torch.float32
        info = lazytpu.debug.tensor_info(x)
        assert info["storage_dtype"] == "bf16", info
        # stored as bf16: 1 + 2^-8 rounds to 1 (nearest even), pi to 3.140625
        assert x.cpu().tolist() == [1.0, 1.0, 3.140625], x.cpu().tolist()
        w = torch.randn(16, 8)
        y = (w.to(d) @ torch.ones(8, 4).to(d)).cpu()
        assert torch.allclose(y, w @ torch.ones(8, 4), atol=0.1, rtol=2e-2)
        print("ok")
    """)
    env = dict(os.environ, LAZYTPU_USE_BF16="1",
               PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_inference_mode_runs_on_the_device():
    """torch.inference_mode (which Lightning's predict loop and many inference
    scripts use) works on device tensors: views included, like no_grad."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    md = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    md.load_state_dict(m.state_dict())
    md = md.to(lazytpu.device())
    x = torch.randn(4, 6)

    @torch.inference_mode()
    def predict(model, a):
        out = model(a)
        return out.t()[1:].reshape(-1)

    got = predict(md, x.to(lazytpu.device()))
    assert not got.requires_grad
    torch.testing.assert_close(got.cpu(), predict(m, x))
    with torch.inference_mode():
        w = torch.ones(3, device=lazytpu.device())
        w.add_(1)
        assert w.view(3, 1)[1:].cpu().sum().item() == 4.0
    assert torch.is_grad_enabled()
