"""Every torch_xla name lazytpu maps, checked by what it does (one process;
collectives across processes are in test_world.py)."""
import importlib.metadata as md
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.amp as xamp
import torch_xla.amp.syncfree  # noqa: F401  (a subpackage: imported, as in 2.9)
import torch_xla.backends
import torch_xla.core.xla_env_vars as xenv
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr
import torch_xla.test.test_utils as test_utils
import torch_xla.utils.utils as xu
from torch_xla._internal import tpu

import lazytpu


def test_version_and_metadata():
    assert torch_xla.__version__ == md.version("torch_xla") == "2.9.0"
    assert md.metadata("torch_xla")["Name"] == "torch_xla"
    assert torch_xla.__file__.startswith(lazytpu.compat.SITE)


def test_devices_are_xla_devices():
    d = torch_xla.device()
    assert d == xm.xla_device() == torch.device("xla", 0) and d.type == "xla"
    assert torch_xla.devices() == [torch.device("xla", i) for i in range(8)]
    assert torch_xla.device_count() == 8 and torch_xla.real_devices()[0] == "TPU:0"
    assert xm.get_xla_supported_devices() == ["xla:%d" % i for i in range(8)]
    assert xm.get_xla_supported_devices(max_devices=2) == ["xla:0", "xla:1"]
    assert xm.xla_device(3) == torch.device("xla:3")
    assert xm.xla_device_hw(d) == "TPU" and xr.device_type() == "TPU"
    t = torch.arange(4.0).to(d)
    assert t.device == d and xm.is_xla_tensor(t) and not xm.is_xla_tensor(torch.ones(1))
    assert torch.zeros(2, device="xla:1").device.index == 1
    assert (t * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_world_outside_spawn():
    assert xr.global_ordinal() == 0
    assert xm.get_local_ordinal() == xr.local_ordinal() == 0
    assert xr.world_size() == 1
    assert xr.host_index() == xr.process_index() == 0 and xr.process_count() == 1
    assert xr.addressable_device_count() == 8 == xr.global_device_count()
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    assert tpu.num_available_devices() == 8 and tpu.version() >= 2
    assert xr.using_pjrt() and not xr.is_spmd()       # SPMD: tests/python/test_spmd_compat.py
    assert xr.global_runtime_device_count() == 8


def test_steps_and_counters():
    met.clear_all()
    d = xm.xla_device()
    x = torch.ones(4, device=d)
    for _ in range(3):
        x = x * 2 + 1
        xm.mark_step()
    torch_xla.sync()
    assert x.cpu().tolist() == [15.0] * 4
    assert met.counter_value("MarkStep") >= 3
    assert met.counter_value("UncachedCompile") >= 1 and met.counter_value("CachedCompile") >= 1
    assert "CompileTime" in met.metric_names() and "MarkStep" in met.counter_names()
    n, acc = met.metric_data("CompileTime")[:2]
    assert n >= 1 and acc > 0
    assert "Counter: MarkStep" in met.metrics_report()
    assert "CompileTime" in met.short_metrics_report()
    met.clear_counters()
    assert (met.counter_value("MarkStep") or 0) == 0
    met.clear_metrics()
    assert met.executed_fallback_ops() == []
    xm.wait_device_ops()


def test_step_context_and_compile():
    d = xm.xla_device()
    w = torch.ones(3, device=d)
    with torch_xla.step():
        w = w + 1
    before = met.counter_value("MarkStep") or 0

    @torch_xla.compile
    def f(a):
        return a * 3

    assert f(w).cpu().tolist() == [6.0, 6.0, 6.0]
    assert (met.counter_value("MarkStep") or 0) - before == 2

    def reads(a):
        return (a * 2).sum().item()

    g = torch_xla.compile(reads, full_graph=True)
    with pytest.raises(RuntimeError, match=r"full_graph=True\): a value read"):
        g(w)

    # full_graph=True: one lazily traced step per call, compiled once
    h = torch_xla.compile(lambda a: a * 3 + 1, full_graph=True)
    u0 = met.counter_value("UncachedCompile") or 0
    for _ in range(3):
        assert h(w).cpu().tolist() == [7.0, 7.0, 7.0]
    assert (met.counter_value("UncachedCompile") or 0) - u0 == 1


def test_optimizer_step_barrier_and_closures():
    torch.manual_seed(0)
    d = xm.xla_device()
    m = nn.Linear(4, 2).to(d)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    seen, seen_async = [], []
    loss = m(torch.ones(3, 4, device=d)).sum()
    loss.backward()
    xm.add_step_closure(lambda v: seen.append(v.item()), args=(loss,))
    xm.add_step_closure(lambda v: seen_async.append(v.item()), args=(loss,), run_async=True)
    ret = xm.optimizer_step(opt, barrier=True, optimizer_args={"closure": None})
    assert ret is None and len(seen) == 1
    lazytpu.wait_step_closures()
    assert seen_async == seen
    ref = nn.Linear(4, 2)
    ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    assert torch.isfinite(ref.weight).all()
    grads = xm._fetch_gradients(opt)
    assert len(grads) == 2 and all(g.device.type == "xla" for g in grads)
    xm.reduce_gradients(opt)              # world of 1: unchanged
    assert torch.equal(grads[0].cpu(), m.weight.grad.cpu())


def test_single_process_collectives_are_identity():
    d = xm.xla_device()
    t = torch.arange(6.0, device=d).reshape(2, 3)
    assert torch.equal(xm.all_reduce(xm.REDUCE_SUM, t).cpu(), t.cpu())
    # one replica: a copy, the scale not applied (torch_xla 2.9)
    assert torch.equal(xm.all_reduce(xm.REDUCE_MAX, t, scale=2.0).cpu(), t.cpu())
    assert torch.equal(xm.all_gather(t, dim=1).cpu(), t.cpu())
    assert torch.equal(xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, 1).cpu(), t.cpu())
    assert torch.equal(xm.all_to_all(t, 1, 0, 1).cpu(), t.cpu())
    ts = [t.clone()]
    xm.collective_broadcast(ts)
    assert torch.equal(ts[0].cpu(), t.cpu())
    assert xm.rendezvous("solo", b"x") == [b"x"]
    assert xm.mesh_reduce("m", 3, sum) == 3
    assert {xm.REDUCE_SUM, xm.REDUCE_MUL, xm.REDUCE_MIN, xm.REDUCE_MAX,
            xm.REDUCE_AND, xm.REDUCE_OR} == {"sum", "mul", "min", "max", "and", "or"}


def test_save_and_cpu_conversion(tmp_path):
    d = xm.xla_device()
    m = nn.Linear(3, 2).to(d)
    path = tmp_path / "ck.pt"
    xm.save({"m": m.state_dict(), "step": 5}, path)
    ck = torch.load(path)
    assert ck["step"] == 5 and all(v.device.type == "cpu" for v in ck["m"].values())
    nested = xm._maybe_convert_to_cpu({"a": [torch.ones(2, device=d)], "b": 1})
    assert nested["a"][0].device.type == "cpu" and nested["b"] == 1
    same = xm._maybe_convert_to_cpu(torch.ones(2, device=d), convert=False)
    assert same.device.type == "xla"


def test_rng_state_and_manual_seed():
    d = xm.xla_device()
    xm.set_rng_state(1234, device=d)
    s = xm.get_rng_state(d)
    a = torch.empty(5, device=d).uniform_().cpu()
    xm.set_rng_state(s, device=d)
    b = torch.empty(5, device=d).uniform_().cpu()
    assert torch.equal(a, b)
    torch_xla.manual_seed(99)
    c = torch.empty(5, device=d).uniform_().cpu()
    torch_xla.manual_seed(99)
    assert torch.equal(torch.empty(5, device=d).uniform_().cpu(), c)


def test_memory_info_old_and_new_keys():
    d = xm.xla_device()
    keep = torch.ones(1024, 1024, device=d) + 1
    xm.mark_step()
    info = xm.get_memory_info(d)
    assert info["bytes_used"] >= 4 * 1024 * 1024
    assert info["peak_bytes_used"] >= info["bytes_used"]
    assert info["bytes_limit"] > info["bytes_used"]
    assert info["kb_total"] == info["bytes_limit"] // 1024
    assert info["kb_free"] == (info["bytes_limit"] - info["bytes_used"]) // 1024
    del keep


def test_rate_tracker():
    import time
    r = xm.RateTracker()
    r.add(100)
    time.sleep(0.05)
    r.add(100)
    assert r.rate() > 0 and r.global_rate() > 0


def test_master_print(capsys):
    xm.master_print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"


def test_parallel_loaders():
    d = xm.xla_device()
    data = [(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(5)]
    para = pl.ParallelLoader(data, [d], loader_prefetch_size=2, device_prefetch_size=1)
    got = [(x.device.type, float(x.sum().cpu())) for x, _ in para.per_device_loader(d)]
    assert got == [("xla", 6.0 * i) for i in range(5)]
    mp = pl.MpDeviceLoader(data, d, batches_per_execution=1)
    assert len(mp) == 5
    assert [int(y[0].cpu()) for _, y in mp] == [0, 1, 2, 3, 4]


def test_sample_generator_and_test_utils(capsys):
    g = xu.SampleGenerator(data=(torch.zeros(2), torch.ones(2)), sample_count=3)
    assert len(g) == 3 and len(list(g)) == 3 and len(list(g)) == 3
    assert xu.getenv_as("LAZYTPU_UNSET_FOR_TEST", int, 7) == 7
    test_utils.print_training_update(xm.xla_device(), 5, 0.25, 10.0, 9.0, epoch=1)
    test_utils.print_test_update(xm.xla_device(), 97.5, epoch=1)
    out = capsys.readouterr().out
    assert "Training Device=xla:0/0 Epoch=1 Step=5 Loss=0.25000 Rate=10.00" in out
    assert "Test Device=xla:0/0 Epoch=1 Accuracy=97.50" in out
    assert len(test_utils.now()) == 8
    assert test_utils.get_summary_writer(None) is None
    test_utils.write_to_summary(None, 0, {"a": 1})
    test_utils.close_summary_writer(None)


def test_profiler_spans(tmp_path):
    with xp.Trace("forward", step=1):
        y = torch.ones(2, device=xm.xla_device()) * 3
    before = met.counter_value("MarkStep") or 0
    with xp.StepTrace("train_step", step_num=2):
        y = y + 1
    assert (met.counter_value("MarkStep") or 0) == before + 1
    srv = xp.start_server(9012)
    assert srv.port == 9012

    @xp.trace_me("helper")
    def helper(v):
        return v * 2

    assert helper(3) == 6


def test_amp_autocast_gradscaler_syncfree():
    import torch_xla.amp.autocast_mode as am
    import torch_xla.amp.syncfree.adamw as sfa
    assert am.autocast is xamp.autocast and sfa.AdamW is xamp.syncfree.AdamW
    d = xm.xla_device()
    torch.manual_seed(0)
    m = nn.Linear(8, 4).to(d)
    with xamp.autocast(d):
        out = m(torch.randn(2, 8, device=d))
    assert out.dtype == torch.bfloat16
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with xamp.autocast(d, dtype=torch.float16):
            assert m(torch.randn(2, 8, device=d)).dtype == torch.float32   # disabled
    # 2.9's torch_xla.amp has no GradScaler: torch.amp.GradScaler("xla")
    # drives an optimizer as on any device (its overflow check reads the
    # flag on the host); a syncfree optimizer takes the flag as found_inf
    assert not hasattr(xamp, "GradScaler")
    opt = xamp.syncfree.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("xla")
    w0 = m.weight.detach().cpu().clone()
    loss = m(torch.randn(2, 8, device=d)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    xm.mark_step()
    assert not torch.equal(m.weight.detach().cpu(), w0)                     # it stepped
    # an overflow skips the step and backs the scale off
    w1 = m.weight.detach().cpu().clone()
    for p in m.parameters():
        p.grad = torch.full_like(p, float("inf"))
    scale_before = float(scaler.get_scale())
    scaler.step(opt)
    scaler.update()
    xm.mark_step()
    assert torch.equal(m.weight.detach().cpu(), w1)
    assert float(scaler.get_scale()) == scale_before * 0.5
    # sync free: the overflow flag stays on the device (no value read)
    reads = met.counter_value("aten::_local_scalar_dense") or 0
    scaler.unscale_(opt)
    opt.step(found_inf=sum(scaler._found_inf_per_device(opt).values()))
    scaler.update()
    xm.mark_step()
    assert (met.counter_value("aten::_local_scalar_dense") or 0) == reads
    assert torch.equal(m.weight.detach().cpu(), w1)                          # still inf
    for name in ("SGD", "Adam", "AdamW"):
        o = getattr(xamp.syncfree, name)(m.parameters(), lr=0.01)
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        before = m.weight.detach().cpu().clone()
        o.step(found_inf=torch.tensor(1.0, device=d))
        xm.mark_step()
        assert torch.equal(m.weight.detach().cpu(), before), name
        o.step(found_inf=torch.tensor(0.0, device=d))
        xm.mark_step()
        assert not torch.equal(m.weight.detach().cpu(), before), name
    # a skipped step does not count (the step count is on the device):
    # two skipped steps and one taken are Adam's first step
    w0 = torch.randn(3, 4)
    g = torch.randn(3, 4)
    for name, cls in (("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW)):
        p = torch.nn.Parameter(w0.clone().to(d))
        r = torch.nn.Parameter(w0.clone())
        o = getattr(xamp.syncfree, name)([p], lr=0.1)
        for skip in (1.0, 1.0, 0.0):
            p.grad = g.to(d)
            o.step(found_inf=torch.tensor(skip, device=d))
            xm.mark_step()
        r.grad = g.clone()
        cls([r], lr=0.1).step()
        assert torch.allclose(p.detach().cpu(), r.detach(), atol=1e-6), name


def test_env_var_names_and_runtime_cache(capsys):
    assert xenv.PJRT_DEVICE == "PJRT_DEVICE" and xenv.TPU_VISIBLE_CHIPS == "TPU_VISIBLE_CHIPS"
    (torch.ones(2, device=torch_xla.device()) + 1).cpu()   # a computation ...
    with pytest.raises(AssertionError, match="already been initialized"):
        xr.initialize_cache("/tmp/lazytpu-xla-cache")      # ... then too late (2.9)
    assert xr.get_num_cached_compilation_graph() >= 0


def test_training_matches_eager_cpu():
    # a TPU multiplies f32 in one bf16 pass by default (~8 bits): a run
    # compared with f32 eager asks for HIGHEST (~22 bits), as on a TPU
    before = torch_xla.backends.get_mat_mul_precision()
    torch_xla.backends.set_mat_mul_precision("highest")
    try:
        _train_and_compare_with_eager_cpu()
    finally:
        torch_xla.backends.set_mat_mul_precision(before)


def _train_and_compare_with_eager_cpu():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    m = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    m.load_state_dict(ref.state_dict())
    d = xm.xla_device()
    m = m.to(d)
    o_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for i in range(5):
        x, y = torch.randn(8, 10), torch.randint(0, 3, (8,))
        o_ref.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        o_ref.step()
        o.zero_grad()
        F.cross_entropy(m(x.to(d)), y.to(d)).backward()
        xm.optimizer_step(o)
        xm.mark_step()
    for a, b in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
