"""Random ops in a partitioned step (LAZYTPU_SPMD_PARTITION=1, the default).

rand_uniform / rand_normal are counter-based (element k of the output is a
function of the seed and k: lazy/kernels/random.c), so a random value its
consumers want split along the batch (a dropout mask beside a batch-split
activation) is generated per core: each core makes only its block of the
whole value's stream, from a per-core counter offset (spmd_rules.c
rule_random). The values must be bitwise those of the same step run whole
(LAZYTPU_SPMD_PARTITION=0), the plan must no longer list the op as
replicated, and steps that reuse their level programs
(LAZYTPU_SPMD_REUSE=1) must find the same offsets as steps built anew."""
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs

N = xs.global_runtime_device_count()

pytestmark = pytest.mark.usefixtures("spmd_partitioned")   # conftest.py


def _sharding_section():
    """The report's sharding section ("" when no step compiled since the
    metrics were cleared: the section is written at compile time)."""
    rep = met.metrics_report()
    if "== sharding ==" not in rep:
        return ""
    return rep[rep.index("== sharding =="):].split("\n== ")[0]


def _planned_replicated(sec):
    """The plan lines' replicated op counts."""
    return [int(v) for v in re.findall(r"(\d+) ops replicated", sec)]


class DropNet(nn.Module):
    """Linear, relu, dropout, linear: the dropout mask [batch, hidden]."""

    def __init__(self, d_in=24, hidden=40, d_out=10, p=0.25):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def _batches(n=3, b=4 * N, d=24, c=10):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(b, d, generator=g), torch.randint(0, c, (b,), generator=g))
            for _ in range(n)]


def _train(monkeypatch, partition, reuse=True, steps=5, mesh_shape=(N,), x_spec=("data", None),
           dtype=torch.float64):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1" if partition else "0")
    monkeypatch.setenv("LAZYTPU_SPMD_REUSE", "1" if reuse else "0")
    try:
        dev = lazytpu.device()
        names = ("data", "model")[:len(mesh_shape)]
        mesh = xs.Mesh(np.arange(N), mesh_shape, names)
        batches = _batches()
        met.clear_all()
        torch.manual_seed(0)
        model = DropNet().to(dtype).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses = []
        for k in range(steps):
            x, y = batches[k % len(batches)]
            x, y = x.to(dtype).to(dev), y.to(dev)
            xs.mark_sharding(x, mesh, x_spec)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            lazytpu.mark_step()
            losses.append(loss.detach())
        params = [p.detach().cpu() for p in model.parameters()]
        return {"params": params, "losses": [v.cpu() for v in losses],
                "partitioned": met.counter_value("SpmdPartitionedExecute") or 0,
                "reused": met.counter_value("SpmdLevelProgramsReused") or 0,
                "section": _sharding_section()}
    finally:
        monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1")
        monkeypatch.setenv("LAZYTPU_SPMD_REUSE", "1")


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y), (x - y).abs().max()


def _close(a, b, tol=1e-12):
    """Equal up to the summation order of a batch split over cores (the
    per-core partial sums, then the all-reduce): float64, ~1e-16 per step;
    a mask generated wrong on any core differs by ~1e-2."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x - y).abs().max().item() < tol, (x - y).abs().max()


def test_dropout_training_equals_the_unpartitioned_step(monkeypatch):
    """Data parallel over 8 cores with dropout (float64): every step
    partitioned, the mask generated per core (the plan replicates nothing),
    the parameters and losses those of the same steps run whole up to the
    batch sums' order (the masks themselves: bitwise, below)."""
    part = _train(monkeypatch, True)
    assert part["partitioned"] == 5, part["partitioned"]
    sec = part["section"]
    assert "ran PARTITIONED over 8 cores" in sec, sec
    assert _planned_replicated(sec) and max(_planned_replicated(sec)) == 0, sec
    assert "rand_uniform" not in sec, sec
    whole = _train(monkeypatch, False)
    assert whole["partitioned"] == 0
    _close(part["params"], whole["params"])
    _close(part["losses"], whole["losses"])
    # the mask did something: without dropout the losses differ
    nod = _no_dropout_losses()
    assert max((a - b).abs().item() for a, b in zip(part["losses"], nod)) > 1e-3


def _no_dropout_losses():
    dev = lazytpu.device()
    torch.manual_seed(0)
    model = DropNet(p=0.0).double().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = []
    for k in range(5):
        x, y = _batches()[k % 3]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x.double().to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        lazytpu.mark_step()
        out.append(loss.detach().cpu())
    return out


def test_reused_level_programs_find_the_same_offsets(monkeypatch):
    """The steady steps reuse their level programs (the offsets are a source
    of their own, found again per position): the values equal those of
    steps that build every level anew."""
    reused = _train(monkeypatch, True, reuse=True, steps=6)
    assert reused["reused"] >= 3, reused["reused"]
    built = _train(monkeypatch, True, reuse=False, steps=6)
    assert built["reused"] == 0
    _same(reused["params"], built["params"])
    _same(reused["losses"], built["losses"])


def test_2d_mesh_batch_and_feature_split(monkeypatch):
    """A 4x2 mesh, the input split over both axes: the mask is generated per
    batch block (dim 0), the feature split sliced from it; equal to the
    whole step."""
    args = dict(mesh_shape=(N // 2, 2), x_spec=("data", "model"), steps=3)
    part = _train(monkeypatch, True, **args)
    assert part["partitioned"] >= 3
    whole = _train(monkeypatch, False, **args)
    _close(part["params"], whole["params"])
    _close(part["losses"], whole["losses"])


def _direct(monkeypatch, partition, fn, shape, spec, mesh_shape=(N,)):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1" if partition else "0")
    try:
        dev = lazytpu.device()
        names = ("data", "model")[:len(mesh_shape)]
        mesh = xs.Mesh(np.arange(N), mesh_shape, names)
        g = torch.Generator().manual_seed(9)
        x = torch.randn(*shape, generator=g).to(dev)
        xs.mark_sharding(x, mesh, spec)
        met.clear_all()
        torch.manual_seed(3)
        y = fn(x)
        lazytpu.mark_step()
        return y.cpu(), _sharding_section(), met.counter_value("SpmdPartitionedExecute") or 0
    finally:
        monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1")


@pytest.mark.parametrize("kind,shape", [
    ("rand", (8 * 3, 5)),           # blocks of 15 elements
    ("randn", (8 * 3, 5)),          # odd blocks: Box-Muller pairs straddle cores
    ("randn", (8, 7, 3)),
    ("rand64", (16, 9)),
    ("bernoulli", (8 * 5, 6)),
])
def test_random_values_split_on_the_batch_equal_the_whole_value(monkeypatch, kind, shape):
    """torch.rand / randn / bernoulli times a batch-split value: each core
    generates its block; the result equals the unpartitioned step's."""
    def fn(x):
        if kind == "rand":
            r = torch.rand(x.shape, device=x.device)
        elif kind == "rand64":
            r = torch.rand(x.shape, device=x.device, dtype=torch.float64).float()
        elif kind == "randn":
            r = torch.randn(x.shape, device=x.device)
        else:
            r = torch.bernoulli(torch.full(x.shape, 0.5, device=x.device))
        return x * r
    spec = ("data",) + (None,) * (len(shape) - 1)
    yp, sec, ran = _direct(monkeypatch, True, fn, shape, spec)
    assert ran == 1
    assert max(_planned_replicated(sec)) == 0, sec
    yw, _, ran0 = _direct(monkeypatch, False, fn, shape, spec)
    assert ran0 == 0
    assert torch.equal(yp, yw), (yp - yw).abs().max()


def test_random_value_read_whole_stays_replicated_and_equal(monkeypatch):
    """A random value split on a dim other than the batch (its consumers
    split dim 1) is generated whole, as before, and stays equal."""
    fn = lambda x: x * torch.rand(x.shape, device=x.device)   # noqa: E731
    yp, sec, ran = _direct(monkeypatch, True, fn, (6, 16), (None, "data"))
    assert ran == 1
    yw, _, _ = _direct(monkeypatch, False, fn, (6, 16), (None, "data"))
    assert torch.equal(yp, yw)


def test_random_value_as_a_result_kept_per_core(monkeypatch):
    """The mask itself a result of the step (kept as per-core shards): its
    host read assembles the whole value's stream."""
    def fn2(x):
        m = torch.rand(x.shape, device=x.device)
        return (x * m, m)
    outs = {}
    for part in (True, False):
        monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1" if part else "0")
        dev = lazytpu.device()
        mesh = xs.Mesh(np.arange(N), (N,), ("data",))
        x = torch.randn(32, 12, generator=torch.Generator().manual_seed(2)).to(dev)
        xs.mark_sharding(x, mesh, ("data", None))
        torch.manual_seed(11)
        y, m = fn2(x)
        lazytpu.mark_step()
        outs[part] = (y.cpu(), m.cpu())
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1")
    assert torch.equal(outs[True][0], outs[False][0])
    assert torch.equal(outs[True][1], outs[False][1])
    assert ((outs[True][1] >= 0) & (outs[True][1] < 1)).all()
