"""Partitioned execution (LAZYTPU_SPMD_PARTITION=1, the default; the fixture
sets it): sharded steps run partitioned over the cores of the mesh
(per-core programs with local shapes, collectives between them) and train
exactly like one core and eager PyTorch (lazytpu's equivalents of
pytorch/xla's test/spmd/test_train_spmd_linear_model.py and
examples/fsdp/train_decoder_only_fsdp_v2.py)."""
import functools
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


class MLP(nn.Module):
    def __init__(self, d_in=64, hidden=32, d_out=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _batches(n=3, b=32, d=64, c=10):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(b, d, generator=g), torch.randint(0, c, (b,), generator=g))
            for _ in range(n)]


def _fit(model_fn, batches, dev=None, mesh=None, annotate=None, x_spec=None, steps=10):
    """SGD with momentum for `steps` steps; returns (model, optimizer)."""
    torch.manual_seed(0)
    model = model_fn()
    if dev is not None:
        model = model.to(dev)
    if annotate is not None:
        model = annotate(model, mesh) or model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
            if x_spec is not None:
                xs.mark_sharding(x, mesh, x_spec)
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if dev is not None:
            lazytpu.mark_step()
    return model, opt


def _train(model_fn, batches, dev=None, mesh=None, annotate=None, x_spec=None, steps=10):
    model, _ = _fit(model_fn, batches, dev, mesh, annotate, x_spec, steps)
    return {n: p.detach().cpu() for n, p in model.named_parameters()}, model


_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def _bytes(text):
    m = re.match(r"([0-9.]+)([KMG]?B)", text)
    return float(m.group(1)) * _UNITS[m.group(2)]


def _sharding_section():
    rep = met.metrics_report()
    return rep[rep.index("== sharding =="):].split("\n== ")[0]


def _check_close(spmd, one, eager):
    worst = 0.0
    for n in one:
        torch.testing.assert_close(spmd[n], one[n], atol=1e-5, rtol=0)
        torch.testing.assert_close(spmd[n], eager[n], atol=1e-5, rtol=1e-5)
        worst = max(worst, (spmd[n] - one[n]).abs().max().item())
    return worst


def _train_unpartitioned(monkeypatch, *a, **k):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "0")
    try:
        return _train(*a, **k)
    finally:
        monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1")


# ------------------------------------------------------------ data parallel

def test_data_parallel_mlp_runs_partitioned_and_equals_one_core(monkeypatch):
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    batches = _batches()
    met.clear_all()
    spmd, model = _train(MLP, batches, dev, mesh, None, ("data", None))
    runs = met.counter_value("SpmdPartitionedExecute") or 0
    assert runs >= 10, runs                                    # every step partitioned
    assert (met.counter_value("SpmdExecutedCollectives") or 0) >= 10
    sec = _sharding_section()
    assert re.search(r"ran PARTITIONED over 8 cores", sec), sec
    m = re.search(r"executed all-reduce\s+x(\d+)\s+(\S+) per core", sec)
    assert m and int(m.group(1)) >= 4, sec                     # the 4 gradients at least
    one, _ = _train(MLP, batches, dev)
    eager, _ = _train(MLP, batches)
    unpart, _ = _train_unpartitioned(monkeypatch, MLP, batches, dev, mesh, None, ("data", None))
    _check_close(spmd, one, eager)
    _check_close(unpart, one, eager)
    # the parameters stay replicated, the input's layout is kept
    assert xs.sharding_spec_text(model.fc1.weight) in ("", "{replicated}")


def test_data_parallel_update_runs_on_the_first_core_alone():
    """Data parallel: the optimizer update of the all-reduced gradients is
    whole, and only the step's results read it: the first core of the mesh
    computes it alone (SpmdFirstCoreOnlyOps), the other cores run the
    forward and backward (fewer programs than levels x cores)."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    batches = _batches()
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(k):
        x, y = batches[k % len(batches)]
        x, y = x.to(dev), y.to(dev)
        xs.mark_sharding(x, mesh, ("data", None))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        lazytpu.mark_step(wait=True)

    met.clear_all()
    for k in range(3):
        step(k)
    levels = re.findall(r"ran PARTITIONED over 8 cores \((\d+) levels", _sharding_section())
    assert levels, _sharding_section()
    met.clear_all()
    step(3)                                         # a steady step: compiled before
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 1
    # per parameter, the new momentum buffer and the new parameter at least
    assert (met.counter_value("SpmdFirstCoreOnlyOps") or 0) >= 8
    runs = met.metric_data("ExecuteTime")[0]
    assert runs < int(levels[-1]) * N, (runs, levels)


def test_data_parallel_update_uses_every_cpu_and_steps_do_not_wait():
    """The first core's update runs while the other cores wait for it: it
    gets the whole machine's thread budget (SpmdFirstCoreWidePrograms, one
    per step; its ops are elementwise, so the values do not depend on the
    threads). The host does not wait for the cores before the next step:
    that step's programs wait for the buffers they read (the parameters the
    update writes), so steps queued back to back train exactly like one
    core, with parameters big enough for the update to split over threads."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    batches = _batches(n=3, b=64, d=784)
    mk = functools.partial(MLP, d_in=784, hidden=256)
    met.clear_all()
    spmd, _ = _train(mk, batches, dev, mesh, None, ("data", None), steps=6)
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 6
    import os
    wide = met.counter_value("SpmdFirstCoreWidePrograms") or 0
    if (os.cpu_count() or 1) > 1:
        assert wide == 6, wide
    one, _ = _train(mk, batches, dev, steps=6)
    eager, _ = _train(mk, batches, steps=6)
    _check_close(spmd, one, eager)


def test_partitioned_forward_values_and_sharded_results():
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    torch.manual_seed(0)
    x = torch.randn(16, 12)
    w = torch.randn(12, 6)
    xd = x.to(dev)
    xs.mark_sharding(xd, mesh, ("data", None))
    met.clear_all()
    h = torch.relu(xd @ w.to(dev))
    s = h.sum(0)                     # a partial sum over the data axis
    mu = h.mean()                    # a mean over a sharded dim
    soft = torch.log_softmax(h, dim=1)
    lazytpu.mark_step()
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 1
    ref = torch.relu(x @ w)
    torch.testing.assert_close(h.cpu(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s.cpu(), ref.sum(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mu.cpu(), ref.mean(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(soft.cpu(), torch.log_softmax(ref, 1), atol=1e-5, rtol=1e-5)
    assert xs.sharding_spec_text(h).startswith("{devices=[8,1]")
    shards = xs.XLAShardedTensor(h).local_shards        # read from the assembled value
    assert len(shards) == 8
    for k, sh in enumerate(shards):
        torch.testing.assert_close(sh.data, ref[2 * k:2 * k + 2], atol=1e-5, rtol=1e-5)


def test_switch_off_runs_whole():
    import os
    os.environ["LAZYTPU_SPMD_PARTITION"] = "0"
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    x = torch.randn(16, 4).to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    met.clear_all()
    (x * 2).sum().item()
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 0


# ------------------------------------------------------- 2-D mesh, Megatron

def _megatron(model, mesh):
    # column-parallel fc1 (its output features over 'model'), row-parallel fc2
    xs.mark_sharding(model.fc1.weight, mesh, ("model", None))
    xs.mark_sharding(model.fc1.bias, mesh, ("model",))
    xs.mark_sharding(model.fc2.weight, mesh, (None, "model"))


def test_2d_mesh_megatron_mlp_equals_one_core(monkeypatch):
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
    batches = _batches()
    met.clear_all()
    spmd, model = _train(MLP, batches, dev, mesh, _megatron, ("data", None))
    assert (met.counter_value("SpmdPartitionedExecute") or 0) >= 10
    sec = _sharding_section()
    assert "ran PARTITIONED over 8 cores" in sec, sec
    # the steady step (the last graph with collectives): the row-parallel fc2 is a partial sum
    # over 'model' (axis 1), all-reduced over that axis only; the gradients
    # are all-reduced over 'data' (axis 0) only; nothing over both axes
    runs = [b for b in sec.split("\ngraph ") if "ran PARTITIONED" in b and "executed" in b]
    last = runs[-1]
    red = re.findall(r"executed (all-reduce|reduce-scatter)\s+x(\d+)\s+\S+ per core  mesh axis (\S+)",
                     last)
    axes = {(k, a) for k, _, a in red}
    assert ("all-reduce", "1(2)") in axes, last
    assert ("all-reduce", "0(4)") in axes, last
    assert not any("," in a for _, a in axes), last
    one, _ = _train(MLP, batches, dev)
    eager, _ = _train(MLP, batches)
    _check_close(spmd, one, eager)
    assert xs.sharding_spec_text(model.fc1.weight).startswith("{devices=[2,1,4]")


# -------------------------------------------------------------------- FSDPv2

class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.ln(x))))


class Stack(nn.Module):
    def __init__(self, d=32, layers=3, c=10):
        super().__init__()
        self.inp = nn.Linear(64, d)
        self.layers = nn.ModuleList(Layer(d) for _ in range(layers))
        self.head = nn.Linear(d, c)

    def forward(self, x):
        x = self.inp(x)
        for l in self.layers:
            x = l(x)
        return self.head(x)


def _fsdp(model, mesh):
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    return xs.SpmdFullyShardedDataParallel(
        model, mesh=mesh, auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={Layer}))


def test_fsdpv2_stack_equals_one_core(monkeypatch):
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    batches = _batches()
    met.clear_all()
    spmd, model = _train(Stack, batches, dev, mesh, _fsdp, ("fsdp", None))
    assert (met.counter_value("SpmdPartitionedExecute") or 0) >= 10
    one, _ = _train(Stack, batches, dev)
    eager, _ = _train(Stack, batches)
    # the wrapper renames parameters: compare them in registration order
    assert len(spmd) == len(one) == len(eager)
    by_order = lambda d: dict(enumerate(d.values()))
    _check_close(by_order(spmd), by_order(one), by_order(eager))
    assert any(xs.sharding_spec_text(p).startswith("{devices=[8")
               for p in model.parameters())          # the parameters stay sharded


def test_uneven_dim_is_replicated_not_wrong():
    """20 rows over 8 cores do not divide: the dim is not split (computed
    whole on every core), the values stay exact."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    x = torch.randn(20, 6)
    xd = x.to(dev)
    xs.mark_sharding(xd, mesh, ("data", None))
    met.clear_all()
    out = (xd * 2 + 1).sum(0)
    lazytpu.mark_step()
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 1
    torch.testing.assert_close(out.cpu(), (x * 2 + 1).sum(0), atol=1e-5, rtol=1e-5)


# ------------------------------------------------- per-core storage (FSDPv2)

class Block(nn.Module):
    """A residual MLP block: the 4-layer model of the memory check (a
    transformer's attention (bmm) has no rule of the partitioned executor
    yet and would run replicated)."""

    def __init__(self, d):
        super().__init__()
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class BlockStack(nn.Module):
    def __init__(self, d=128, layers=4, c=10):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, c)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_fsdpv2_keeps_shards_per_core_and_reports_per_core_memory():
    """Each core keeps its 1/8 of the parameters and the optimizer state
    between steps (measured by the core's buffer accounting, in the
    report); the step trains like one core; a host read assembles the
    global value."""
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    d, steps = 128, 10
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, d, generator=g), torch.randint(0, 10, (64,), generator=g))
               for _ in range(3)]

    def run(sharded, device):
        torch.manual_seed(0)
        model = BlockStack(d)
        if device is not None:
            model = model.to(device)
        if sharded:
            model = xs.SpmdFullyShardedDataParallel(
                model, mesh=mesh, auto_wrap_policy=functools.partial(
                    transformer_auto_wrap_policy, transformer_layer_cls={Block}))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for k in range(steps):
            x, y = batches[k % len(batches)]
            if device is not None:
                x, y = x.to(device), y.to(device)
                if sharded:
                    xs.mark_sharding(x, mesh, ("fsdp", None))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if device is not None:
                lazytpu.mark_step()
        return model, opt

    met.clear_all()
    model, opt = run(True, dev)
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == steps
    # parameter + optimizer bytes, from the model and the optimizer
    p_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    o_bytes = sum(t.numel() * t.element_size() for st in opt.state.values()
                  for t in st.values() if torch.is_tensor(t))
    assert o_bytes == p_bytes                      # momentum buffers
    in_bytes = sum(t.numel() * t.element_size() for t in batches[0])
    held = [v for _, v in met.metric_samples("SpmdCoreHeldBytes")]
    peak = [v for _, v in met.metric_samples("SpmdCorePeakBytes")]
    assert len(held) == len(peak) == steps
    share = (p_bytes + o_bytes) / N
    # between steps each core holds its share of the state (the graph's core
    # also the step's inputs, uploaded whole); the whole state would be 8x
    assert share <= held[-1] <= share + in_bytes + 4096, (held[-1], share)
    # during the step: the old and the new state's shards, the gradients'
    # shards, one layer's gathered weight and partial gradient at a time —
    # under half of the step's whole state (parameters, optimizer state and
    # gradients) on every core
    assert peak[-1] < (2 * p_bytes + o_bytes) / 2, (peak[-1], p_bytes)
    sec = _sharding_section()
    m = re.search(r"per core \(measured this step\): peak (\S+) on core \d+", sec)
    assert m, sec
    # host reads assemble the global values; they equal one core and eager
    one, _ = run(False, dev)
    eager, _ = run(False, None)
    spmd = dict(enumerate(p.detach().cpu() for p in model.parameters()))
    _check_close(spmd, dict(enumerate(p.detach().cpu() for p in one.parameters())),
                 dict(enumerate(p.detach() for p in eager.parameters())))
    # a shard read back: the rows of the global value its core holds
    w = next(p for p in model.parameters() if p.dim() == 2)
    whole = w.detach().cpu()
    for sh in xs.XLAShardedTensor(w).local_shards:
        idx = sh.indices if sh.indices is Ellipsis else tuple(sh.indices)
        torch.testing.assert_close(sh.unpadded_data, whole[idx], atol=0, rtol=0)


def test_per_core_shards_read_by_a_whole_step(monkeypatch):
    """Parameters held per core by partitioned steps, then a step run whole
    (the switch off) and partitioned again: the whole step assembles them
    and every value stays the one-core value."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    batches = _batches()

    def shard_rows(model, mesh):
        xs.mark_sharding(model.fc1.weight, mesh, ("data", None))
        xs.mark_sharding(model.fc1.bias, mesh, ("data",))

    def train(device, sharded):
        torch.manual_seed(0)
        model = MLP()
        if device is not None:
            model = model.to(device)
            if sharded:
                shard_rows(model, mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for k in range(6):
            if sharded:   # steps 2 and 3 whole, the others partitioned
                monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "0" if k in (2, 3) else "1")
            x, y = batches[k % len(batches)]
            if device is not None:
                x, y = x.to(device), y.to(device)
                if sharded:
                    xs.mark_sharding(x, mesh, ("data", None))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if device is not None:
                lazytpu.mark_step()
        runs = met.counter_value("SpmdPartitionedExecute") or 0
        return {n: p.detach().cpu() for n, p in model.named_parameters()}, runs

    met.clear_all()
    spmd, runs = train(dev, True)
    assert runs == 4
    assert "results kept as per-core shards" in _sharding_section()
    one, _ = train(dev, False)
    eager, _ = train(None, False)
    _check_close(spmd, one, eager)


# ------------------------------------------------------ a small transformer

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).reshape(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (D // self.heads) ** -0.5
        y = att.softmax(-1) @ v                       # bmm over batch x heads
        return self.proj(y.transpose(1, 2).reshape(B, S, D))


class TBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=32, d=64, heads=4, seq=16, layers=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(TBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def _lm_batches(n=3, b=16, seq=16, vocab=32):
    g = torch.Generator().manual_seed(2)
    return [(torch.randint(0, vocab, (b, seq), generator=g),
             torch.randint(0, vocab, (b, seq), generator=g)) for _ in range(n)]


def _train_lm(dev=None, mesh=None, annotate=None, x_spec=None, steps=10):
    """SGD with momentum on TinyLM (Adam would amplify the rounding noise of
    gradients that are exactly zero, e.g. the key bias's, to lr-sized
    steps); returns (parameters in registration order, model, optimizer)."""
    model, opt = _fit(TinyLM, _lm_batches(), dev, mesh, annotate, x_spec, steps)
    return dict(enumerate(p.detach().cpu() for p in model.parameters())), model, opt


_LM_REF = {}


def _lm_reference():
    """One core and eager, trained once per session for the transformer tests."""
    if not _LM_REF:
        _LM_REF["one"] = _train_lm(lazytpu.device())[0]
        _LM_REF["eager"] = _train_lm()[0]
    return _LM_REF["one"], _LM_REF["eager"]


def _fsdp_lm(model, mesh):
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    return xs.SpmdFullyShardedDataParallel(
        model, mesh=mesh, auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={TBlock}))


def _replicated_ops(sec):
    """Ops the last partitioned graphs ran replicated, from the report."""
    return re.findall(r"replicated[^\n]*", sec)


def test_transformer_data_parallel_runs_partitioned_and_equals_one_core():
    """Batch-sharded tokens: embedding, layer norm, attention's bmm over
    batch x heads, the loss and their backward all run on each core's
    slice of the batch: no op runs replicated."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    met.clear_all()
    spmd, _, _ = _train_lm(dev, mesh, None, ("data", None))
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == 10
    assert (met.counter_value("SpmdReplicatedOps") or 0) == 0, _replicated_ops(_sharding_section())
    one, eager = _lm_reference()
    _check_close(spmd, one, eager)


def test_fsdpv2_transformer_equals_one_core_and_fits_an_eighth():
    """FSDPv2 on a 4-layer transformer (SGD momentum): parameters after 10 steps
    equal one core's; the measured per-core memory is at most an eighth of
    the parameter + optimizer bytes plus the step's activations."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    met.clear_all()
    spmd, model, opt = _train_lm(dev, mesh, _fsdp_lm, ("fsdp", None))
    assert (met.counter_value("SpmdPartitionedExecute") or 0) >= 10
    assert (met.counter_value("SpmdReplicatedOps") or 0) == 0, _replicated_ops(_sharding_section())
    one, eager = _lm_reference()
    _check_close(spmd, one, eager)
    p_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    o_bytes = sum(t.numel() * t.element_size() for st in opt.state.values()
                  for t in st.values() if torch.is_tensor(t))
    assert o_bytes == p_bytes                          # the momentum buffers
    held = [v for _, v in met.metric_samples("SpmdCoreHeldBytes")]
    peak = [v for _, v in met.metric_samples("SpmdCorePeakBytes")]
    assert len(held) == len(peak) >= 10
    # the step's activations, whole on one core: the planner's unpartitioned
    # peak minus the unpartitioned leaves, from the report's plan lines
    sec = _sharding_section()
    plans = re.findall(r"plan per core: peak (\S+) \(params (\S+)\); unpartitioned: peak "
                       r"(\S+) \(params (\S+)\)", sec)
    assert plans, sec
    acts = max(_bytes(pk) - _bytes(pm) for _, _, pk, pm in plans)   # the training step's graph
    assert acts > 0
    bound = (p_bytes + o_bytes) / N + acts
    assert peak[-1] <= bound, (peak[-1], p_bytes, o_bytes, acts)
    # between steps a core holds its share of the state, not the whole
    assert held[-1] < (p_bytes + o_bytes) / 2, (held[-1], p_bytes + o_bytes)
    print(f"\nFSDPv2 transformer: P {p_bytes} O {o_bytes} acts {acts:.0f}: per-core peak "
          f"{peak[-1]:.0f} <= {bound:.0f}, held {held[-1]:.0f} (share {(p_bytes + o_bytes) / N:.0f})")


def _megatron_lm(model, mesh):
    for b in model.blocks:
        xs.mark_sharding(b.up.weight, mesh, ("model", None))      # column-parallel
        xs.mark_sharding(b.up.bias, mesh, ("model",))
        xs.mark_sharding(b.down.weight, mesh, (None, "model"))    # row-parallel
        xs.mark_sharding(b.attn.proj.weight, mesh, (None, "model"))


def test_transformer_2d_mesh_megatron_equals_one_core():
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))
    met.clear_all()
    spmd, _, _ = _train_lm(dev, mesh, _megatron_lm, ("data", None))
    assert (met.counter_value("SpmdPartitionedExecute") or 0) >= 10
    sec = _sharding_section()
    assert re.search(r"executed all-reduce\s+x\d+\s+\S+ per core  mesh axis 1\(2\)", sec), sec
    one, eager = _lm_reference()
    _check_close(spmd, one, eager)


# ------------------------------------------------------- batch norm CNN (DP)

class _BnCNN(nn.Module):
    """The shape of examples/fashion_mnist.py's CNN, smaller: conv, batch
    norm (batch statistics over N, H, W), relu, max-pool, twice, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def _bn_batches(dtype, n=3, b=4 * N):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(b, 1, 16, 16, generator=g).to(dtype), torch.randint(0, 10, (b,), generator=g))
            for _ in range(n)]


def _bn_fit(batches, steps, dtype, dev=None, mesh=None, per_shard=False):
    """SGD with momentum; the state dict (parameters AND running stats) after
    `steps` steps. per_shard (eager only): batch norm's statistics taken
    over each core's slice of the batch, what a rule that split the batch
    without reducing the statistics would compute."""
    torch.manual_seed(0)
    model = _BnCNN().to(dtype)
    if dev is not None:
        model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
            if mesh is not None:
                xs.mark_sharding(x, mesh, ("data", None, None, None))
        opt.zero_grad()
        out = torch.cat([model(c) for c in x.chunk(N)]) if per_shard else model(x)
        nn.functional.cross_entropy(out, y).backward()
        opt.step()
        if dev is not None:
            lazytpu.mark_step()
    return {n: v.detach().cpu() for n, v in model.state_dict().items() if v.is_floating_point()}


def _max_diff(a, b):
    return max((a[n].double() - b[n].double()).abs().max().item() for n in a)


@pytest.mark.parametrize("dtype,steps,tol", [(torch.float32, 1, 1e-5), (torch.float64, 10, 1e-10)])
def test_data_parallel_batch_norm_cnn_equals_one_core(dtype, steps, tol):
    """Batch norm under a batch split over 8 cores: its statistics and their
    gradients are over the global batch (all-reduced), so the parameters and
    running_mean / running_var equal one core's and eager's: float32 after
    one step, float64 after 10 (float32 over many steps drifts by rounding
    alone, amplified by training: bench/bench_spmd.py)."""
    dev = lazytpu.device()
    mesh = xs.Mesh(np.arange(N), (N,), ("data",))
    batches = _bn_batches(dtype)
    met.clear_all()
    spmd = _bn_fit(batches, steps, dtype, dev, mesh)
    assert (met.counter_value("SpmdPartitionedExecute") or 0) == steps
    one = _bn_fit(batches, steps, dtype, dev)
    eager = _bn_fit(batches, steps, dtype)
    assert set(spmd) >= {"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"}
    assert _max_diff(spmd, one) < tol, {n: (spmd[n] - one[n]).abs().max().item() for n in one}
    assert _max_diff(spmd, eager) < tol * 10, {n: (spmd[n] - eager[n]).abs().max().item() for n in one}
    # the tolerance tells per-core statistics from global ones
    assert _max_diff(_bn_fit(batches, steps, dtype, per_shard=True), eager) > 100 * tol
