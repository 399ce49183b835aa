"""A partitioned step's matrix product whose contracted dim is split over
the mesh, summed only by the first core's program (a data-parallel weight
gradient: the batch is contracted), runs there as one product over the
whole contracted dim from the cores' blocks (LAZYTPU_SPMD_PRODUCT=1, the
default; counter SpmdWholeProducts), instead of every core writing a
full-size partial product that the first core then sums. The plan and the
report keep the all-reduce; the values are the same up to rounding: every
step equals eager CPU and the summed way (LAZYTPU_SPMD_PRODUCT=0)."""
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


def _train(model, dev, batches, steps, mesh=None, x_spec=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
            xs.mark_sharding(x, mesh, x_spec)
        opt.zero_grad()
        out = model(x)
        nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        if dev is not None:
            lazytpu.mark_step()
    return [p.detach().cpu() for p in model.parameters()]


def _case(case):
    if case == "data_parallel":
        mesh = xs.Mesh(np.arange(N), (N,), ("data",))
        return MLP, _batches(), mesh, None, ("data", None)
    if case == "megatron_2d":
        mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
        return MLP, _batches(), mesh, _megatron, ("data", None)
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    return TinyLM, _lm_batches(), mesh, _fsdp_lm, ("fsdp", None)


def _spmd(monkeypatch, product, case, steps=6):
    model_fn, batches, mesh, annotate, x_spec = _case(case)
    monkeypatch.setenv("LAZYTPU_SPMD_PRODUCT", "1" if product else "0")
    met.clear_all()
    torch.manual_seed(0)
    model = model_fn().to(lazytpu.device())
    if annotate is not None:
        model = annotate(model, mesh) or model
    params = _train(model, lazytpu.device(), batches, steps, mesh, x_spec)
    return params, {k: met.counter_value(k) or 0 for k in
                    ("SpmdWholeProducts", "SpmdPartitionedExecute", "SpmdLevelProgramsReused")}


@pytest.mark.parametrize("case", ["data_parallel", "megatron_2d", "fsdpv2_transformer"])
def test_whole_products_train_as_eager_and_as_the_summed_partials(monkeypatch, case):
    whole, c1 = _spmd(monkeypatch, True, case)
    assert c1["SpmdPartitionedExecute"] >= 6, c1
    summed, c0 = _spmd(monkeypatch, False, case)
    assert c0["SpmdWholeProducts"] == 0, c0
    model_fn, batches = _case(case)[:2]
    torch.manual_seed(0)
    eager = _train(model_fn(), None, batches, 6)
    for w, s, e in zip(whole, summed, eager):
        torch.testing.assert_close(w, e, atol=1e-5, rtol=0)
        torch.testing.assert_close(w, s, atol=1e-5, rtol=0)
    if case == "data_parallel":
        # both weight gradients of the batch-sharded MLP, every step, and the
        # steady steps reuse the recorded programs that hold the products
        assert c1["SpmdWholeProducts"] >= 2 * 6, c1
        assert c1["SpmdLevelProgramsReused"] >= 3, c1


def test_the_executed_collectives_are_the_planned_all_reduces(monkeypatch):
    """What a TPU runs is the all-reduce: the executed collectives counted
    are the same either way (the product counts as the all-reduce it
    replaces)."""
    counts = {}
    for product in (True, False):
        _spmd(monkeypatch, product, "data_parallel", steps=3)
        counts[product] = met.counter_value("SpmdExecutedCollectives") or 0
    assert counts[True] > 0 and counts[True] == counts[False], counts
