"""Attention heads split over a mesh's model axis (Megatron-style tensor
parallelism on a 2-D data x model mesh): q, k and v are column-parallel
linears, so each core holds whole heads; the per-head reshape, the permute,
the batch x heads products, the softmax over keys and the weighted sum stay
on the local heads; the output projection is row-parallel (partial sums,
all-reduced over the model axis). Parameters after 10 SGD steps equal one
core's and eager PyTorch's."""
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs
from test_spmd_partition import TBlock, TinyLM

N = xs.global_runtime_device_count()

pytestmark = pytest.mark.usefixtures("spmd_partitioned")   # conftest.py


class HeadsAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, S, D = x.shape
        h, hd = self.heads, D // self.heads

        def split(t):                                  # [B, S, D] -> [B, h, S, hd]
            return t.reshape(B, S, h, hd).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-2, -1)) * hd ** -0.5
        y = att.softmax(-1) @ v
        return self.proj(y.permute(0, 2, 1, 3).reshape(B, S, D))


class Block(TBlock):
    """test_spmd_partition's transformer block with separate q, k, v."""

    def __init__(self, d, heads):
        super().__init__(d, heads)
        self.attn = HeadsAttention(d, heads)


class LM(TinyLM):
    def __init__(self, vocab=32, d=32, heads=4, seq=8, layers=2):
        super().__init__(vocab, d, heads, seq, layers)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))


def _batches(n=3, b=8, seq=8, vocab=32):
    g = torch.Generator().manual_seed(5)
    return [(torch.randint(0, vocab, (b, seq), generator=g),
             torch.randint(0, vocab, (b, seq), generator=g)) for _ in range(n)]


def _heads_parallel(model, mesh):
    for b in model.blocks:
        for lin in (b.attn.q, b.attn.k, b.attn.v, b.up):
            xs.mark_sharding(lin.weight, mesh, ("model", None))      # column-parallel
            xs.mark_sharding(lin.bias, mesh, ("model",))
        xs.mark_sharding(b.attn.proj.weight, mesh, (None, "model"))   # row-parallel
        xs.mark_sharding(b.down.weight, mesh, (None, "model"))


def _train(dev=None, mesh=None, steps=10):
    torch.manual_seed(0)
    model = LM()
    if dev is not None:
        model = model.to(dev)
    if mesh is not None:
        _heads_parallel(model, mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = _batches()
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
            if mesh is not None:
                xs.mark_sharding(x, mesh, ("data", None))
        opt.zero_grad()
        out = model(x)
        nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        if dev is not None:
            lazytpu.mark_step()
    return {n: p.detach().cpu() for n, p in model.named_parameters()}


def _sharding_section():
    rep = met.metrics_report()
    return rep[rep.index("== sharding =="):].split("\n== ")[0]


def test_heads_split_over_model_axis_equals_one_core_and_eager():
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
    met.clear_all()
    spmd = _train(dev, mesh)
    assert (met.counter_value("SpmdPartitionedExecute") or 0) >= 10
    sec = _sharding_section()
    # the batch x heads merge before each bmm gathers the heads' model axis
    # only (the batch stays split over data): no op runs replicated
    assert (met.counter_value("SpmdReplicatedOps") or 0) == 0, re.findall(r"replicated[^\n]*", sec)
    assert re.search(r"executed all-gather\s+x\d+\s+\S+ per core  mesh axis 1\(2\)\n", sec), sec
    # the row-parallel projections' partial sums: all-reduced over the model axis
    assert re.search(r"all-reduce\s+x\d+\s+\S+ per core  mesh axis 1\(2\)", sec), sec
    one = _train(dev)
    eager = _train()
    for n in one:
        torch.testing.assert_close(spmd[n], one[n], atol=1e-5, rtol=0, msg=n)
        torch.testing.assert_close(spmd[n], eager[n], atol=1e-5, rtol=1e-5, msg=n)


def test_plan_replicates_no_op_the_executor_splits(monkeypatch):
    """The plan (what an unpartitioned run reports) plans the loss, its
    backward, the embedding's and layer norm's weight gradients on each
    core's batch slice, as the executor runs them: no op planned replicated
    (before: nll_loss_backward, embedding_backward and each
    layer_norm_backward_affine were listed as replicated)."""
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "0")
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
    met.clear_all()
    _train(dev, mesh, steps=2)
    sec = _sharding_section()
    plans = re.findall(r"(\d+) ops replicated", sec)
    assert plans and all(c == "0" for c in plans), sec
    assert "replicated (no rule" not in sec, sec
    assert (met.counter_value("SpmdReplicatedOps") or 0) == 0
