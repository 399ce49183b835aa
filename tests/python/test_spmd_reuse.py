"""A partitioned step whose plan an earlier step had reuses that step's
per-core level programs (LAZYTPU_SPMD_REUSE=1, the default): the host
queues them with this step's buffers and scalars instead of building,
capturing and looking up every level again. The values must be exactly
those of a run that builds every step (LAZYTPU_SPMD_REUSE=0: the same
programs on the same buffers), and a step whose plan differs (a batch whose
targets hold ignore_index changes the loss's scaling) must get its own
programs, not the earlier plan's."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs
from test_spmd_partition import MLP, _batches, _fsdp_lm, _lm_batches, _megatron, TinyLM

N = xs.global_runtime_device_count()

pytestmark = pytest.mark.usefixtures("spmd_partitioned")   # conftest.py


def _run(monkeypatch, reuse, model_fn, batches, mesh, annotate, x_spec, steps=6, lr=0.05):
    monkeypatch.setenv("LAZYTPU_SPMD_REUSE", "1" if reuse else "0")
    dev = lazytpu.device()
    met.clear_all()
    torch.manual_seed(0)
    model = model_fn().to(dev)
    if annotate is not None:
        model = annotate(model, mesh) or model
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for k in range(steps):
        x, y = batches[k % len(batches)]
        x, y = x.to(dev), y.to(dev)
        xs.mark_sharding(x, mesh, x_spec)
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        lazytpu.mark_step()
        losses.append(loss.detach())
    params = [p.detach().cpu() for p in model.parameters()]
    return (params, [v.cpu() for v in losses], met.counter_value("SpmdLevelProgramsReused") or 0,
            met.counter_value("SpmdPartitionedExecute") or 0)


def _same(a, b):
    for x, y in zip(a, b):
        assert torch.equal(x, y), (x - y).abs().max()


@pytest.mark.parametrize("case", ["data_parallel", "megatron_2d", "fsdpv2_transformer"])
def test_reused_steps_equal_steps_built_anew(monkeypatch, case):
    if case == "data_parallel":
        mesh = xs.Mesh(np.arange(N), (N,), ("data",))
        args = (MLP, _batches(), mesh, None, ("data", None))
    elif case == "megatron_2d":
        mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
        args = (MLP, _batches(), mesh, _megatron, ("data", None))
    else:
        mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
        xs.set_global_mesh(mesh)
        args = (TinyLM, _lm_batches(), mesh, _fsdp_lm, ("fsdp", None))
    p1, l1, reused, ran = _run(monkeypatch, True, *args)
    assert ran >= 6, ran
    # the first steps build (no momentum yet, then the first step's results
    # as leaves, held per core); the steady steps reuse
    assert reused >= 3, reused
    p0, l0, reused0, ran0 = _run(monkeypatch, False, *args)
    assert ran0 == ran and reused0 == 0
    _same(p1, p0)
    _same(l1, l0)


def test_a_changed_plan_is_not_served_an_earlier_plans_programs(monkeypatch):
    """Mean cross entropy over a batch split 8 ways: with no ignored target
    each core's loss share is its mean / 8 (the plan scales it); a batch with
    ignored targets plans differently. Batches alternate between the two;
    every step must still equal eager."""
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    g = torch.Generator().manual_seed(3)
    plain = [(torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g))
             for _ in range(2)]
    holed = []
    for x, y in plain:
        y = y.clone()
        y[::5] = -100                     # cross_entropy's default ignore_index
        holed.append((x + 0.5, y))
    batches = [holed[0], plain[0], holed[1], plain[1]]   # step 4, the first steady one, is plain
    params, losses, reused, ran = _run(monkeypatch, True, MLP, batches, mesh, None,
                                       ("data", None), steps=8)
    assert ran == 8 and reused >= 4, (ran, reused)
    torch.manual_seed(0)
    ref = MLP()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    ref_losses = []
    for k in range(8):
        x, y = batches[k % 4]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(x), y)
        loss.backward()
        opt.step()
        ref_losses.append(loss.detach())
    for a, b in zip(losses, ref_losses):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(params, ref.parameters()):
        torch.testing.assert_close(a, b.detach(), atol=1e-5, rtol=1e-5)
