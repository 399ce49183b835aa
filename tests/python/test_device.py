"""Device identity on PyTorch 2.x: the `lazytpu` device type, the generated
Tensor/Module methods, the torch.lazytpu device module, generators, and
PyTorch's backend autoloading (checked in fresh interpreters)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import lazytpu

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_py(code, env_extra=None):
    """Runs code in a fresh interpreter of this environment; returns stdout.
    PYTHONPATH is dropped so the installed package (entry points) is used."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=300, cwd="/")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_device_type_and_index():
    d = torch.device("lazytpu:3")
    assert d.type == "lazytpu" and d.index == 3
    t = torch.arange(4.0).to("lazytpu")
    assert t.device == torch.device("lazytpu", 0)
    assert t.is_lazytpu and not torch.ones(1).is_lazytpu
    assert str(t.device) == "lazytpu:0"
    assert lazytpu.device() == torch.device("lazytpu:0")
    u = torch.zeros(2, 3, device="lazytpu:2")
    assert u.device.index == 2 and u.is_lazytpu
    assert (u + 1).cpu().sum().item() == 6.0


def test_generated_methods():
    t = torch.ones(3).lazytpu()
    assert t.device == torch.device("lazytpu:0")
    t1 = torch.ones(3).lazytpu(1)
    assert t1.device == torch.device("lazytpu:1")
    m = nn.Linear(2, 3).lazytpu()
    assert all(p.is_lazytpu for p in m.parameters())
    assert m(torch.ones(4, 2, device="lazytpu")).shape == (4, 3)


def test_device_module():
    mod = torch.lazytpu
    assert mod.is_available() and mod.is_initialized()
    assert mod.device_count() == lazytpu.device_count() == 8
    assert mod.current_device() == 0
    mod.set_device(2)
    try:
        assert mod.current_device() == 2
    finally:
        mod.set_device(0)
    with pytest.raises(ValueError, match="there are 8 cores"):
        mod.set_device(8)
    assert mod.get_amp_supported_dtype() == [torch.bfloat16]
    x = torch.ones(1000, device="lazytpu") * 2
    mod.synchronize()                       # returns once queued programs ran
    mod.manual_seed(1234)
    a = torch.rand(5, device="lazytpu").cpu()
    mod.manual_seed(1234)
    b = torch.rand(5, device="lazytpu").cpu()
    assert torch.equal(a, b)
    state = mod.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert mod.initial_seed() == 1234
    c = torch.rand(5, device="lazytpu").cpu()
    mod.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="lazytpu").cpu(), c)
    assert x.sum().item() == 2000.0


def test_streams_and_distributed_checkpoint(tmp_path):
    """torch.lazytpu's streams (one per core: a core runs its programs in
    order) as torch.distributed.checkpoint uses them to copy device tensors
    to the CPU: saving and loading a device model's state_dict, and a CPU
    model's in a process that uses lazytpu (both raised AttributeError
    'current_stream' before)."""
    import torch.distributed.checkpoint as dist_cp
    import warnings
    dev = lazytpu.device()
    s = torch.lazytpu.current_stream()
    assert s == torch.lazytpu.current_stream(dev) and s.device == torch.device("lazytpu", 0)
    x = torch.randn(4, 4, device=dev) * 2
    with torch.lazytpu.stream(s):
        y = x.to("cpu", non_blocking=True)
    s.synchronize()
    assert s.query() and s.record_event().query()
    torch.testing.assert_close(y, x.cpu())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "torch.distributed is disabled ... single process"
        for where in (dev, "cpu"):
            torch.manual_seed(0)
            a = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(where)
            b = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(where)
            path = str(tmp_path / str(where))
            dist_cp.save(state_dict=a.state_dict(), storage_writer=dist_cp.FileSystemWriter(path))
            sd = b.state_dict()
            dist_cp.load(state_dict=sd, storage_reader=dist_cp.FileSystemReader(path))
            b.load_state_dict(sd)
            for p, q in zip(a.parameters(), b.parameters()):
                assert q.device.type == torch.device(where).type
                torch.testing.assert_close(q.cpu(), p.cpu(), rtol=0, atol=0)


def test_torch_manual_seed_reaches_the_device():
    torch.manual_seed(7)
    a = torch.rand(4, device="lazytpu").cpu()
    torch.manual_seed(7)
    b = torch.rand(4, device="lazytpu").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(8)
    assert not torch.equal(torch.rand(4, device="lazytpu").cpu(), a)


def test_generator_objects():
    g = torch.Generator(device="lazytpu")
    assert g.device == torch.device("lazytpu:0")
    g.manual_seed(42)
    assert g.initial_seed() == 42
    s = g.get_state()
    assert s.dtype == torch.uint8 and s.numel() == 16
    g2 = torch.Generator(device="lazytpu")
    g2.set_state(s)
    assert g2.initial_seed() == 42
    a = torch.rand(3, device="lazytpu", generator=g)  # accepted (kernels draw per core)
    assert a.shape == (3,)


def test_cores_are_separate_devices():
    a = torch.ones(2, device="lazytpu:0")
    b = torch.ones(2, device="lazytpu:1")
    with pytest.raises(RuntimeError, match="same device"):
        (a + b).cpu()


def test_autoload_registers_device_without_starting_the_engine():
    out = run_py("""
        import sys, threading, torch
        assert torch._C._get_privateuse1_backend_name() == "lazytpu"
        assert hasattr(torch, "lazytpu") and torch.Tensor.is_lazytpu
        d = torch.device("lazytpu:1")
        # cheap: the engine (lazytpu._C, the core worker threads) is not loaded
        assert "lazytpu._C" not in sys.modules, sorted(m for m in sys.modules if "lazytpu" in m)
        n0 = threading.active_count()
        x = torch.arange(3.0).to(d) * 2          # first use loads the engine
        assert "lazytpu._C" in sys.modules
        print(x.device, x.cpu().tolist())
    """)
    assert out.strip() == "lazytpu:1 [0.0, 2.0, 4.0]"


def test_autoload_can_be_disabled():
    out = run_py("""
        import torch
        try:
            torch.device("lazytpu")
            print("registered")
        except RuntimeError as e:
            print("unknown device")
        import lazytpu                               # explicit import registers it
        print(torch.ones(1, device="lazytpu").device)
    """, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert out.split() == ["unknown", "device", "lazytpu:0"]


def test_installed_package_metadata_and_launcher():
    out = run_py("""
        import importlib.metadata as md, shutil, os, sys
        print(md.version("lazytpu"))
        eps = [e for e in md.entry_points(group="torch.backends") if e.name == "lazytpu"]
        print(eps[0].value)
        print(os.path.exists(os.path.join(os.path.dirname(sys.executable), "lazytpu-run")))
    """)
    ver, ep, launcher = out.split()
    assert ver == lazytpu.__version__ and ep == "_lazytpu_device:autoload" and launcher == "True"


def test_launcher_runs_python_workers(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, lazytpu
        x = torch.ones(2, device="lazytpu") * (lazytpu.get_ordinal() + 1)
        # one write per line (shared pipe; print() splits it when unbuffered)
        sys.stdout.write("ordinal %d of %d %s\\n" % (lazytpu.get_ordinal(),
                                                     lazytpu.world_size(), x.sum().item()))
    """))
    launcher = os.path.join(os.path.dirname(sys.executable), "lazytpu-run")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.run([launcher, "-n", "2", "python", str(script)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(l for l in p.stdout.splitlines() if l.startswith("ordinal"))
    assert lines == ["ordinal 0 of 2 2.0", "ordinal 1 of 2 4.0"], p.stdout
