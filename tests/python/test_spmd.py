"""lazytpu.spmd: meshes, partition specs checked like torch_xla, shardings
recorded in the IR and propagated, local shards (padded like XLA), FSDPv2,
the report; SPMD training equals one-core training and eager PyTorch."""
import os
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs

N = xs.global_runtime_device_count()


@pytest.fixture(autouse=True)
def spmd_on():
    prev = os.environ.get("XLA_USE_SPMD")
    xs.use_spmd()
    yield
    if prev is None:
        os.environ.pop("XLA_USE_SPMD", None)
    else:
        os.environ["XLA_USE_SPMD"] = prev
    xs.set_global_mesh(None)


def mesh2d():
    return xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))


def ref_tile_text(mesh, spec):
    """XLA's sharding text computed independently: torch_xla's recipe (the
    logical mesh transposed to the split axes then the rest)."""
    idx = []
    for d in spec:
        if d is None:
            continue
        for a in (d if isinstance(d, tuple) else (d,)):
            idx.append(mesh.get_axis_name_idx(a) if isinstance(a, str) else a)
    if not idx:
        return "{replicated}"
    rest = [a for a in range(len(mesh.mesh_shape)) if a not in idx]
    tiles = mesh.get_logical_mesh().transpose(idx + rest)
    dims = []
    for d in spec:
        n = 1
        for a in (() if d is None else (d if isinstance(d, tuple) else (d,))):
            n *= mesh.mesh_shape[mesh.get_axis_name_idx(a) if isinstance(a, str) else a]
        dims.append(n)
    rep = int(np.prod([mesh.mesh_shape[a] for a in rest])) if rest else 1
    text = "{devices=[%s]%s" % (",".join(str(x) for x in dims + ([rep] if rep > 1 else [])),
                                ",".join(str(x) for x in tiles.reshape(-1).tolist()))
    return text + (" last_tile_dim_replicate}" if rep > 1 else "}")


# ------------------------------------------------------------------ meshes

def test_device_count_is_the_core_count():
    assert N == lazytpu.device_count() == 8


def test_mesh_math():
    m = xs.Mesh(list(range(8)), (4, 2), ("x", "y"))
    assert m.get_logical_mesh().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert list(m.shape().items()) == [("x", 4), ("y", 2)]
    assert m.size() == 8 and m.get_axis_name_idx("y") == 1 and m.get_axis_name_idx("z") is None
    h = xs.HybridMesh(ici_mesh_shape=(2, 4), axis_names=("a", "b"))
    assert h.mesh_shape == (2, 4) and h.device_ids.tolist() == list(range(8))
    g = xs.get_1d_mesh("data")
    assert g.mesh_shape == (8,) and g.axis_names == ("data",)
    xs.set_global_mesh(g)
    assert xs.get_global_mesh() is g


@pytest.mark.parametrize("args, exc", [
    ((list(range(7)), (4, 2)), AssertionError),           # too few ids
    (([0, 1, 2, 3, 4, 5, 6, 6], (4, 2)), AssertionError),  # repeated
    ((list(range(8)), (4, 2), ("x",)), AssertionError),    # names do not fit
    ((list(range(8)), (4, 2), ("x", "x")), AssertionError),
    (([0, 1, 2, 3, 4, 5, 6, 9], (4, 2)), AssertionError),  # id past the mesh
])
def test_bad_meshes_raise(args, exc):
    with pytest.raises(exc):
        xs.Mesh(*args)


def test_hybrid_mesh_refuses_dcn_and_wrong_counts():
    with pytest.raises(ValueError, match="dcn_mesh_shape"):
        xs.HybridMesh(ici_mesh_shape=(4, 1), dcn_mesh_shape=(2, 1))
    with pytest.raises(ValueError, match="must equal the product"):
        xs.HybridMesh(ici_mesh_shape=(2, 2))


# --------------------------------------------------------- partition specs

@pytest.mark.parametrize("spec, exc, what", [
    (("data",), AssertionError, "rank"),                  # rank 1 for a 2-d tensor
    (("data", None, None), AssertionError, "rank"),
    (("nope", None), ValueError, "Axis name nope"),
    (("data", "data"), AssertionError, "at most once"),
    ((0, 2), AssertionError, "out of bound"),
    (((("data",),), None), AssertionError, "nested"),
    ((1.5, None), ValueError, "not supported"),
])
def test_bad_specs_raise_naming_shape_spec_and_mesh(dev, spec, exc, what):
    t = torch.zeros(8, 4, device=dev)
    with pytest.raises(exc) as e:
        xs.mark_sharding(t, mesh2d(), spec)
    msg = str(e.value)
    if what == "rank":
        assert "rank" in msg
    else:
        assert what in msg
    assert "[8, 4]" in msg and "mesh" in msg.lower()


def test_mesh_not_spanning_every_core_raises(dev):
    # torch_xla 2.9 refuses such a mesh when it is built
    with pytest.raises(AssertionError, match=r"Number of device IDs \(4\) must match the "
                       r"global number of devices \(8\)"):
        xs.Mesh([0, 1, 2, 3], (4,), ("x",))


def test_host_tensor_and_spmd_off_raise(dev):
    with pytest.raises(RuntimeError, match="device"):
        xs.mark_sharding(torch.zeros(8, 4), mesh2d(), ("data", None))
    del os.environ["XLA_USE_SPMD"]          # SPMD mode off (torch_xla reads the same flag)
    with pytest.raises(RuntimeError, match="use_spmd"):
        xs.mark_sharding(torch.zeros(8, 4, device=dev), mesh2d(), ("data", None))


@pytest.mark.parametrize("spec", [
    ("data", None), (None, "model"), ("model", "data"), (("data", "model"), None),
    ((("model", "data")), None), (None, None), ("data", "model"),
])
def test_sharding_text_is_xlas(dev, spec):
    m = mesh2d()
    t = torch.zeros(8, 4, device=dev)
    st = xs.mark_sharding(t, m, spec)
    assert isinstance(st, xs.XLAShardedTensor)
    assert xs.sharding_spec_text(t) == ref_tile_text(m, spec)
    assert st.sharding_spec == ref_tile_text(m, spec)


def test_sharding_types_and_clear(dev):
    m = mesh2d()
    t = torch.zeros(8, 4, device=dev)
    assert xs.sharding_spec_text(t) == "" and xs.sharding_type_of(t) is None
    xs.mark_sharding(t, m, ("data", "model"))
    assert xs.sharding_type_of(t) == xs.ShardingType.TILED
    xs.mark_sharding(t, m, ("data", None))
    assert xs.sharding_type_of(t) == xs.ShardingType.PARTIAL
    xs.mark_sharding(t, m, (None, None))
    assert xs.sharding_type_of(t) == xs.ShardingType.REPLICATED
    xs.clear_sharding(t)
    assert xs.sharding_spec_text(t) == ""


# ------------------------------------------------------------ local shards

def test_local_shards_pad_uneven_dims_like_xla(dev):
    m = xs.Mesh(np.arange(8), (4, 2), ("x", "y"))
    host = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3)
    t = host.to(dev)
    st = xs.mark_sharding(t, m, ("x", "y"))
    shards = st.local_shards
    assert len(shards) == 8
    logical = m.get_logical_mesh()
    for s in shards:
        core = int(s.shard_device.split(":")[1])
        i, j = [int(v) for v in np.argwhere(logical == core)[0]]
        r0, c0 = min(3 * i, 10), min(2 * j, 3)
        r1, c1 = min(r0 + 3, 10), min(c0 + 2, 3)
        assert s.indices == [slice(r0, r1, 1), slice(c0, c1, 1)]   # torch_xla: step 1
        assert tuple(s.data.shape) == (3, 2)                  # ceil(10/4), ceil(3/2)
        expect = torch.zeros(3, 2)
        expect[:r1 - r0, :c1 - c0] = host[r0:r1, c0:c1]
        assert torch.equal(s.data, expect)
        assert torch.equal(s.unpadded_data, host[r0:r1, c0:c1])
        assert s.replica_id == 0


def test_local_shards_partial_and_replicated(dev):
    m = xs.Mesh(np.arange(8), (4, 2), ("x", "y"))
    host = torch.randn(8, 4)
    t = host.to(dev)
    st = xs.mark_sharding(t, m, (None, "y"))
    by_core = {int(s.shard_device.split(":")[1]): s for s in st.local_shards}
    for core, s in by_core.items():
        i, j = [int(v) for v in np.argwhere(m.get_logical_mesh() == core)[0]]
        assert s.indices == [slice(0, 8, 1), slice(2 * j, 2 * j + 2, 1)]
        assert s.replica_id == i
        assert torch.equal(s.data, host[:, 2 * j:2 * j + 2])
    r = xs.mark_sharding(host.to(dev), m, (None, None))
    assert all(s.indices is Ellipsis and torch.equal(s.data, host) for s in r.local_shards)


def test_load_local_shards_roundtrip(dev):
    m = xs.get_1d_mesh("x")
    t = torch.zeros(16, 2, device=dev)
    st = xs.mark_sharding(t, m, ("x", None))
    shards = st.local_shards
    for k, s in enumerate(shards):
        s.data.fill_(float(k))
    st.load_local_shards_(shards)
    expect = torch.arange(8, dtype=torch.float32).repeat_interleave(2)[:, None].expand(16, 2)
    assert torch.equal(t.cpu(), expect)
    assert xs.sharding_spec_text(t) == "{devices=[8,1]0,1,2,3,4,5,6,7}"


# ------------------------------------------------- IR: propagation and keys

def test_shardings_propagate_and_survive_a_step(dev):
    m = mesh2d()
    x = torch.randn(8, 6).to(dev)
    w = torch.randn(4, 6).to(dev)
    xs.mark_sharding(x, m, ("data", None))
    xs.mark_sharding(w, m, ("model", None))
    y = torch.relu(x * 2 + 1)
    assert xs.sharding_spec_text(y) == xs.sharding_spec_text(x)
    z = y @ w.t()                                   # [data, model]
    assert xs.sharding_spec_text(z) == ref_tile_text(m, ("data", "model"))
    s = z.sum(dim=1)                                # model reduced: partial sum -> [data]
    assert xs.sharding_spec_text(s) == ref_tile_text(m, ("data",))
    lazytpu.mark_step()
    assert xs.sharding_spec_text(z) == ref_tile_text(m, ("data", "model"))
    ref = torch.relu(x.cpu() * 2 + 1) @ w.cpu().t()
    torch.testing.assert_close(z.cpu(), ref)
    torch.testing.assert_close(s.cpu(), ref.sum(1))


def test_annotation_is_part_of_the_graph_key(dev):
    m = mesh2d()
    a = torch.randn(8, 4).to(dev)
    lazytpu.mark_step()

    def step(spec):
        y = a * 3
        if spec is not None:
            xs.mark_sharding(y, m, spec)
        y = y + 1
        lazytpu.mark_step()
        return y

    step(None)
    u0 = met.counter_value("UncachedCompile") or 0
    step(("data", None))
    u1 = met.counter_value("UncachedCompile") or 0
    step(("data", None))
    u2 = met.counter_value("UncachedCompile") or 0
    step((None, "model"))
    u3 = met.counter_value("UncachedCompile") or 0
    assert (u1 - u0, u2 - u1, u3 - u2) == (1, 0, 1)


def test_graph_dump_shows_shardings(dev):
    x = torch.randn(8, 4).to(dev)
    xs.mark_sharding(x, mesh2d(), ("data", None))
    y = torch.exp(x)
    text = lazytpu.debug.graph_text(y)
    assert "exp(" in text and "sharding={devices=[4,1,2]" in text, text


def test_report_says_the_step_was_not_partitioned(dev, monkeypatch):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "0")   # partitioned: test_spmd_partition.py
    x = torch.randn(16, 8).to(dev)
    xs.mark_sharding(x, xs.get_1d_mesh("d"), ("d", None))
    (x * 5 - 2).sum().cpu()
    rep = met.metrics_report()
    sec = rep[rep.index("== sharding =="):]
    assert re.search(r"mesh 8, \d+ of \d+ values sharded .*NOT partitioned: the step ran "
                     r"whole on core 0", sec), sec[:2000]
    assert "plan per core: peak" in sec
    assert (met.counter_value("SpmdUnpartitionedGraphs") or 0) >= 1


def test_sharded_tensor_ops_and_repr(dev):
    x = torch.ones(8, 2).to(dev)
    st = xs.mark_sharding(x, xs.get_1d_mesh("d"), ("d", None))
    y = st + 1
    assert isinstance(y, xs.XLAShardedTensor)
    assert torch.equal(y.global_tensor.cpu(), torch.full((8, 2), 2.0))
    assert st.sharding_type == xs.ShardingType.TILED
    assert "XLAShardedTensor" in repr(st)
    assert xs.wrap_if_sharded(x).global_tensor is x
    assert not isinstance(xs.wrap_if_sharded(torch.ones(2, device=dev)), xs.XLAShardedTensor)


def test_mark_sharding_with_gradients(dev):
    m = xs.get_1d_mesh("d")
    x = torch.randn(8, 3).to(dev).requires_grad_()
    y = xs.mark_sharding_with_gradients(x, m, ("d", None))
    assert xs.sharding_spec_text(y) == "{devices=[8,1]0,1,2,3,4,5,6,7}"
    (y * y).sum().backward()
    assert xs.sharding_spec_text(x.grad) == "{devices=[8,1]0,1,2,3,4,5,6,7}"
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu())


def test_manual_sharding_gives_the_per_core_view(dev):
    # the region's values: tests/python/test_spmd_manual.py
    xs.set_global_mesh(xs.get_1d_mesh("d"))
    xx = xs.enable_manual_sharding(torch.zeros(8, 2, device=dev), ("d", None))
    assert tuple(xx.shape) == (1, 2) and xx.sharding_spec == "{manual}"
    with pytest.raises(RuntimeError, match="uneven manual shards"):
        xs.enable_manual_sharding(torch.zeros(9, 2, device=dev), ("d", None))


def test_visualize(dev, capsys):
    x = torch.zeros(8, 4, device=dev)
    xs.mark_sharding(x, mesh2d(), ("data", "model"))
    text = xs.tensor_grid_text(x)
    assert "TPU 0" in text and "TPU 7" in text and text.count("\n") >= 8
    assert "TPU 0" in capsys.readouterr().out


def test_loader_input_sharding(dev):
    m = xs.get_1d_mesh("data")
    data = [(torch.randn(16, 3), torch.arange(16)) for _ in range(3)]
    loader = lazytpu.loader.MpDeviceLoader(data, dev,
                                           input_sharding=xs.ShardingSpec(m, ("data", None)))
    n = 0
    for xb, yb in loader:
        assert xs.sharding_spec_text(xb) == "{devices=[8,1]0,1,2,3,4,5,6,7}"
        # rank 1: the spec does not apply; SPMD data is replicated (torch_xla 2.9)
        assert xs.sharding_spec_text(yb) == "{replicated}"
        n += 1
    assert n == 3


# ------------------------------------------------------ training equality

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=32, d=16, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _annotate(model, mode, mesh):
    """data-parallel: nothing on the params; fsdp: every param's largest dim
    on 'data'; 2d: Megatron-style columns/rows on 'model' for 2-d weights."""
    if mode == "fsdp":
        from lazytpu.spmd.fsdp import _partition_spec
        for p in model.parameters():
            xs.mark_sharding(p, mesh, tuple("data" if s == "fsdp" else s
                                            for s in _partition_spec(p, shard_maximal=True)))
    elif mode == "2d":
        for name, p in model.named_parameters():
            if p.dim() == 2:
                xs.mark_sharding(p, mesh, ("model", None) if "fc1" in name or "0." in name
                                 or "in_proj" in name else (None, "model"))


def _train(model_fn, batches, dev, mode=None, steps=10):
    torch.manual_seed(0)
    model = model_fn()
    if dev is not None:
        model = model.to(dev)
    mesh = mesh2d()
    if mode:
        _annotate(model, mode, mesh)
    # SGD with momentum: Adam would turn the key bias's zero gradient (softmax
    # ignores it) into +-lr steps of rounding noise, unlike eager's noise
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
            if mode:
                xs.mark_sharding(x, mesh, ("data",) + (None,) * (x.dim() - 1))
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if dev is not None:
            lazytpu.mark_step()
    return {n: p.detach().cpu() for n, p in model.named_parameters()}, model


@pytest.mark.parametrize("mode", ["dp", "fsdp", "2d"])
@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_spmd_training_equals_one_core(dev, mode, arch):
    g = torch.Generator().manual_seed(1)
    if arch == "mlp":
        fn = MLP
        batches = [(torch.randn(16, 12, generator=g), torch.randint(0, 4, (16,), generator=g))
                   for _ in range(3)]
    else:
        fn = TinyTransformer
        batches = [(torch.randint(0, 32, (8, 6), generator=g),
                    torch.randint(0, 32, (8, 6), generator=g)) for _ in range(3)]
    one, _ = _train(fn, batches, dev, None)
    spmd, model = _train(fn, batches, dev, mode)
    eager, _ = _train(fn, batches, None, None)
    for n in one:
        torch.testing.assert_close(spmd[n], one[n], atol=1e-5, rtol=0)
        torch.testing.assert_close(spmd[n], eager[n], atol=1e-4, rtol=1e-4)
    if mode == "fsdp":
        w = dict(model.named_parameters())["fc1.weight" if arch == "mlp" else "head.weight"]
        assert xs.sharding_spec_text(w).startswith("{devices=[4,1,2]")   # still sharded


def test_fsdpv2_wraps_layers_and_shards_params_and_output(dev):
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    import functools
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    torch.manual_seed(0)
    base = TinyTransformer(layers=2)
    ref = TinyTransformer(layers=2)
    ref.load_state_dict(base.state_dict())
    model = xs.SpmdFullyShardedDataParallel(
        base, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                 transformer_layer_cls={Block}))
    assert all(isinstance(b, xs.SpmdFullyShardedDataParallel) for b in model.module.blocks)
    for n, p in model.named_parameters():
        txt = xs.sharding_spec_text(p)
        assert txt.startswith("{devices=["), (n, txt)
        big = list(p.shape).index(max(p.shape))
        tiles = [int(v) for v in txt[len("{devices=["):txt.index("]")].split(",")]
        assert tiles[big] == 8, (n, txt)
    idx = torch.randint(0, 32, (16, 6))
    out = model(idx.to(dev))
    assert xs.sharding_spec_text(out).startswith("{devices=[8,1,1]")
    torch.testing.assert_close(out.cpu(), ref(idx), atol=1e-5, rtol=1e-5)
    # torch_xla's policy protocol (unwrapped_params=) works too
    def xla_policy(module, recurse, unwrapped_params):
        return recurse or isinstance(module, Block)

    other = xs.SpmdFullyShardedDataParallel(TinyTransformer(layers=2), auto_wrap_policy=xla_policy)
    assert all(isinstance(b, xs.SpmdFullyShardedDataParallel) for b in other.module.blocks)
    with pytest.raises(RuntimeError, match="already wrapped"):
        xs.SpmdFullyShardedDataParallel(model)
    with pytest.raises(ValueError, match="fsdp"):
        xs.SpmdFullyShardedDataParallel(MLP(), mesh=mesh2d())


# --------------------------------------------------------------- the plan

_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def _bytes(text):
    m = re.match(r"([0-9.]+)([KMG]?B)", text)
    return float(m.group(1)) * _UNITS[m.group(2)]


def _plans():
    """(planned peak, planned params, unpartitioned peak, params, lines
    after) for each graph in the sharding section."""
    rep = met.metrics_report()
    sec = rep[rep.index("== sharding =="):].split("\n== ")[0]
    out = []
    lines = sec.splitlines()
    for k, l in enumerate(lines):
        m = re.search(r"plan per core: peak (\S+) \(params (\S+)\); unpartitioned: peak "
                      r"(\S+) \(params (\S+)\)", l)
        if m:
            rest = []
            for l2 in lines[k + 1:]:
                if not l2.startswith("  ") or "plan per core" in l2:
                    break
                rest.append(l2)
            out.append(tuple(_bytes(v) for v in m.groups()) + (rest,))
    return out


def test_plan_data_parallel_all_reduces_gradients(dev):
    met.clear_all()
    m = xs.get_1d_mesh("data")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 64).to(dev)
    y = torch.randint(0, 8, (64,)).to(dev)
    xs.mark_sharding(x, m, ("data", None))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    lazytpu.mark_step()
    plans = _plans()
    assert plans, met.metrics_report()[-3000:]
    peak, params, peak1, params1, rows = plans[-1]
    text = "\n".join(rows)
    assert "all-reduce" in text and "mesh axis 0(8)" in text, text
    assert params1 - params == 64 * 64 * 4 * 7 / 8  # only the input is split: params replicated
    assert peak < peak1                           # activations split 8 ways


def test_fsdp_plan_per_core_memory_is_an_eighth(dev):
    """FSDPv2 on a 4-layer transformer: the planned per-core memory is at
    most 1/8 of parameters + optimizer state (+ the activations)."""
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    import functools
    met.clear_all()
    mesh = xs.Mesh(np.arange(N), (N, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    torch.manual_seed(0)
    model = xs.SpmdFullyShardedDataParallel(
        TinyTransformer(vocab=64, d=64, layers=4).to(dev),
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                           transformer_layer_cls={Block}))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pbytes = sum(p.numel() * 4 for p in model.parameters())
    for _ in range(3):
        idx = torch.randint(0, 64, (16, 8)).to(dev)
        xs.mark_sharding(idx, mesh, ("fsdp", None))
        out = model(idx)
        loss = nn.functional.cross_entropy(out.reshape(-1, 64), idx.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        lazytpu.mark_step()
    plans = _plans()
    peak, params, peak1, params1, rows = plans[-1]     # the steady step's graph
    state = 3 * pbytes                                  # params + Adam's two moments
    assert params1 >= state                             # whole on one core ...
    assert params <= state / 8 * 1.1                    # ... an eighth (+ padding) sharded
    acts = peak1 - params1                              # one core's activations, unsplit
    assert peak <= state / 8 * 1.1 + acts, (peak, state, acts)
    text = "\n".join(rows)
    assert "all-gather" in text and "reduce-scatter" in text, text


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_plan_counts_each_parameter_share_once(dev, monkeypatch, opt_name):
    """The plan's per-core share of the leaves of the steady step is the
    eighth of parameters + optimizer state + input, whether the previous
    step ran whole or partitioned. A partitioned step hands a parameter
    and its view (two results) the same per-core shards: counted once."""
    got = {}
    for part in ("0", "1"):
        monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", part)
        met.clear_all()
        mesh = xs.Mesh(np.arange(N), (N,), ("fsdp",))
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).to(dev)
        for p in m.parameters():
            xs.mark_sharding(p, mesh, ("fsdp",) + (None,) * (p.dim() - 1))
        opt = (torch.optim.Adam(m.parameters(), lr=1e-3) if opt_name == "adam"
               else torch.optim.SGD(m.parameters(), lr=0.1))
        for _ in range(3):
            x = torch.randn(32, 64).to(dev)
            xs.mark_sharding(x, mesh, ("fsdp", None))
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            lazytpu.mark_step()
        plans = _plans()
        assert len(plans) >= 2, plans
        got[part] = plans[-1][1]                    # the steady step's leaves per core
    pbytes = (64 * 128 + 128 + 128 * 64 + 64) * 4
    state = (3 if opt_name == "adam" else 1) * pbytes
    expect = (state + 32 * 64 * 4) / N               # params (+ moments) and x, an eighth each
    # the rest: the step's scalars (lr, betas, ...), 8 bytes each
    assert expect <= got["0"] <= expect + 512, (got, expect)
    assert got["1"] == got["0"], got


def test_patched_linear_matches_linear(dev):
    torch.manual_seed(0)
    lin = nn.Linear(6, 5)
    x = torch.randn(3, 4, 6, requires_grad=True)
    ref = lin(x)
    ref.sum().backward()
    ref_grads = [x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone()]
    ld = nn.Linear(6, 5).to(dev)
    ld.load_state_dict(lin.state_dict())
    xd = x.detach().to(dev).requires_grad_()
    out = xs.xla_patched_nn_linear_forward(ld, xd)
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for a, b in zip([xd.grad, ld.weight.grad, ld.bias.grad], ref_grads):
        torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=1e-5)


def test_mark_sharding_inside_torch_compile_keeps_values(dev):
    """Inside a compiled region the annotation is dropped (docs/spmd.md),
    the function compiles as one graph and its values are eager's."""
    mesh = xs.get_1d_mesh("d")

    def f(x, w):
        y = x @ w
        xs.mark_sharding(y, mesh, ("d", None))
        return torch.relu(y).sum(dim=1)

    torch._dynamo.reset()
    cf = torch.compile(f, backend="lazytpu", fullgraph=True)
    x, w = torch.randn(16, 8), torch.randn(8, 4)
    out = cf(x.to(dev), w.to(dev))
    torch.testing.assert_close(out.cpu(), torch.relu(x @ w).sum(dim=1), atol=1e-5, rtol=1e-5)
