"""torch_xla 2.9's SPMD surface beyond mark_sharding, on lazytpu.spmd:
MarkShardingFunction (also through AOTAutograd), annotate_custom_sharding,
shard_as, OpSharding and shards put together on the host, XLAShardedTensor
as a DTensor, the DTensor api (xla_distribute_tensor / _module), batches
laid out like MpDeviceLoader, the rich picture, SPMD mode from the
environment. Values are checked against eager PyTorch."""
import os

import numpy as np
import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.spmd as xs

N = xs.global_runtime_device_count()
RANGE = ",".join(str(i) for i in range(N))


@pytest.fixture(autouse=True)
def spmd_on(monkeypatch):
    monkeypatch.setenv("XLA_USE_SPMD", "1")       # restored afterwards
    xs.use_spmd()
    yield
    xs.set_global_mesh(None)


def mesh1d(name="d"):
    return xs.Mesh(np.arange(N), (N,), (name,))


def mesh2d():
    return xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))


# ------------------------------------------------------ SPMD mode, meshes

def test_spmd_mode_follows_the_environment_flag(monkeypatch):
    assert xs.is_spmd() and os.environ["XLA_USE_SPMD"] == "1"
    monkeypatch.delenv("XLA_USE_SPMD")
    assert not xs.is_spmd()                     # torch_xla 2.9 reads the same flag
    xs.use_spmd()
    assert xs.is_spmd()


@pytest.mark.parametrize("args, msg", [
    ((list(range(N // 2)), (N // 2,)), r"Number of device IDs \(%d\) must match the global "
                                       r"number of devices \(%d\)" % (N // 2, N)),
    ((list(range(N)), (1, N), ("a", "b", "c")), "Number of axis names .* must match mesh "
                                                "dimensions"),
    ((list(range(N)), (1, N), ("a", "a")), "Axis names must be unique"),
    ((list(range(N)), (2, N)), "Number of device IDs .* must match mesh size"),
    (([0] * N, (1, N)), "Device IDs must be unique"),
    ((list(range(1, N + 1)), (1, N)), "Device IDs must be less than mesh size"),
])
def test_mesh_refusals_have_2_9_messages(args, msg):
    with pytest.raises(AssertionError, match=msg):
        xs.Mesh(*args)


def test_mesh_text_round_trips():
    m = xs.Mesh(np.arange(N)[::-1].copy(), (2, N // 2), ("a", "b"))
    assert str(m) == "{'device_ids': %s, 'mesh_shape': (2, %d), 'axis_names': ('a', 'b')}" % (
        list(range(N))[::-1], N // 2)
    assert xs.Mesh.from_str(str(m)) == m
    assert xs.Mesh.from_str("not a mesh") is None


# ------------------------------------------------------ MarkShardingFunction

def test_mark_sharding_function_marks_copy_and_gradient(dev):
    xc = torch.randn(N, 4)
    x = xc.to(dev).requires_grad_(True)
    z = x * 3
    y = xs.MarkShardingFunction.apply(z, mesh2d(), ("data", None))
    assert xs.sharding_spec_text(z) == ""            # z itself is left as it is
    want = "{devices=[%d,1,2]%s last_tile_dim_replicate}" % (N // 2, RANGE)
    assert xs.sharding_spec_text(y) == want
    z.retain_grad()
    (y.sin()).sum().backward()
    assert xs.sharding_spec_text(z.grad) == want     # the backward marked the gradient
    torch.testing.assert_close(z.grad.cpu(), (xc * 3).cos(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.cpu(), 3 * (xc * 3).cos(), rtol=1e-5, atol=1e-5)


def test_mark_sharding_function_through_aot_autograd(dev):
    from functorch.compile import aot_function, make_boxed_func
    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return make_boxed_func(gm)

    mesh = mesh1d()

    def fn(x):
        return xs.MarkShardingFunction.apply(torch.sin(x), mesh, (0,)) + 42

    xc = torch.randn(N * 2)
    x = xc.to(dev).requires_grad_(True)
    y = aot_function(fn, keep)(x)
    y.sum().backward()
    lazytpu.mark_step()
    assert xs.sharding_spec_text(x.grad) == "{devices=[%d]%s}" % (N, RANGE)
    torch.testing.assert_close(y.cpu(), xc.sin() + 42)
    torch.testing.assert_close(x.grad.cpu(), xc.cos(), rtol=1e-5, atol=1e-5)
    fwd, bwd = graphs
    assert "aot_mark_sharding" in fwd.code and "aot_mark_sharding" in bwd.code


def test_mark_sharding_with_gradients_checks_rank(dev):
    with pytest.raises(AssertionError, match="Partition spec length"):
        xs.mark_sharding_with_gradients(torch.zeros(N, 2, device=dev), mesh1d(), ("d",))


# ------------------------------------------ custom annotations, shard_as

def test_annotate_custom_sharding_reannotates_sharded_data(dev):
    c = torch.randn(2, 4, 8, N)
    t = c.to(dev)
    xs.mark_sharding(t, xs.Mesh(np.arange(N), (1, 1, 2, N // 2)), (0, 1, 2, 3))
    st = xs.annotate_custom_sharding(t, xs.Mesh(np.arange(N), (1, 1, 1, N)), (0, 1, 2, 3))
    assert isinstance(st, xs.XLAShardedTensor)
    assert xs.sharding_spec_text(t) == "{devices=[1,1,1,%d]%s}" % (N, RANGE)
    assert st.partition_spec == (0, 1, 2, 3) and st.mesh_shape == (1, 1, 1, N)
    torch.testing.assert_close((t * 2).cpu(), c * 2)
    with pytest.raises(AssertionError, match="Partition spec length"):
        xs.annotate_custom_sharding(t, mesh1d(), ("d",))


def test_shard_as_gives_both_sides_one_sharding(dev):
    a = torch.zeros(N, 2, device=dev)
    b = torch.zeros(N, 2, device=dev)
    xs.mark_sharding(a, mesh1d(), ("d", None))
    ra, rb = xs.shard_as({"k": a}, {"k": b})
    assert ra["k"] is a and rb["k"] is b
    assert xs.sharding_spec_text(b) == xs.sharding_spec_text(a) == "{devices=[%d,1]%s}" % (
        N, RANGE)
    c, d = torch.zeros(N, device=dev), torch.zeros(N, device=dev)
    with pytest.raises(RuntimeError, match="neither"):
        xs.shard_as(c, d)
    xs.mark_sharding(c, mesh1d(), ("d",))
    xs.mark_sharding(d, mesh1d(), (None,))
    with pytest.raises(RuntimeError, match="different shardings"):
        xs.shard_as(c, d)
    with pytest.raises(AssertionError, match="same structure"):
        xs.shard_as([c], (d,))


def test_mark_manual_sharding_of_a_computed_value(dev):
    # torch_xla 2.9: device data is refused, a computed value becomes {manual}
    x = torch.zeros(3, 2).to(dev)
    with pytest.raises(RuntimeError, match="Marking any data tensors as manual"):
        xs._mark_manual_sharding(x)
    xt = xs._mark_manual_sharding(x + 1)
    assert xt.sharding_type == xs.ShardingType.MANUAL and xt.sharding_spec == "{manual}"


# ------------------------------------------- OpSharding, shards from the host

@pytest.mark.parametrize("spec", [("data", None), (None, "model"), ("data", "model"),
                                  (("data", "model"), None), (None, None)])
def test_op_sharding_text_equals_the_annotation(dev, spec):
    m = mesh2d()
    t = torch.zeros(N, 4, device=dev)
    xs.mark_sharding(t, m, spec)
    assert str(m.get_op_sharding(spec)) == xs.sharding_spec_text(t)


def test_global_tensor_from_cpu_shards_tiled_partial_replicated(dev):
    m = mesh1d()
    shards = [torch.arange(3) + 3 * i for i in range(N)]
    g = xs.global_tensor_from_cpu_shards(shards, m.get_op_sharding((0,)))
    assert xs.sharding_spec_text(g) == "{devices=[%d]%s}" % (N, RANGE)
    torch.testing.assert_close(g.cpu(), torch.arange(3 * N))
    # the last shards are padding of a shorter global shape (ceil-sized shards)
    g = xs.global_tensor_from_cpu_shards(shards, m.get_op_sharding((0,)),
                                         torch.Size([3 * N - 2]))
    torch.testing.assert_close(g.cpu(), torch.arange(3 * N - 2))
    for bad in ([3 * N + 1], [2 * N], [1, 3 * N]):
        with pytest.raises(RuntimeError, match="does not fit"):
            xs.global_tensor_from_cpu_shards(shards, m.get_op_sharding((0,)), torch.Size(bad))
    with pytest.raises(RuntimeError, match="shards for"):
        xs.global_tensor_from_cpu_shards(shards[:-1], m.get_op_sharding((0,)))
    # partial: the two columns, each held by half the cores
    m2 = mesh2d()
    shards = [torch.tensor([[i % 2]]) for i in range(N)]
    g = xs.global_tensor_from_cpu_shards(shards, m2.get_op_sharding((None, "model")))
    torch.testing.assert_close(g.cpu(), torch.tensor([[0, 1]]))
    # replicated, from torch_xla's raw constructor (any rank)
    rep = xs.OpSharding([], [], [], xs.ShardingType.REPLICATED)
    g = xs.global_tensor_from_cpu_shards([torch.arange(4)] * N, rep)
    assert xs.sharding_spec_text(g) == "{replicated}"
    torch.testing.assert_close(g.cpu(), torch.arange(4))
    with pytest.raises(RuntimeError):
        xs.global_tensor_from_cpu_shards([torch.arange(4)] * N, rep, torch.Size([5]))
    with pytest.raises(RuntimeError, match="manual"):
        xs.global_tensor_from_cpu_shards([torch.arange(4)] * N,
                                         xs.OpSharding([], [], [], xs.ShardingType.MANUAL))


def test_raw_tiled_op_sharding(dev):
    tiles = np.arange(N)[::-1].reshape(N // 2, 2).tolist()
    op = xs.OpSharding(tiles, [], [], xs.ShardingType.TILED)
    assert str(op) == "{devices=[%d,2]%s}" % (N // 2, ",".join(
        str(i) for i in reversed(range(N))))
    shards = [torch.full((1, 1), float(d)) for d in range(N)]
    g = xs.global_tensor_from_cpu_shards(shards, op)
    torch.testing.assert_close(g.cpu(), torch.tensor(tiles, dtype=torch.float32))
    assert xs.sharding_spec_text(g) == str(op)


# --------------------------------------------- XLAShardedTensor as a DTensor

def test_sharded_tensor_is_a_dtensor_with_placements(dev):
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Replicate, Shard
    t = torch.randn(N, 4, device=dev)
    st = xs.mark_sharding(t, mesh2d(), (None, "model"))
    assert isinstance(st, DTensor)
    assert st.mesh_shape == (N // 2, 2) and st.partition_spec == (None, "model")
    assert st.placements == (Replicate(), Shard(1))
    # an op's result is wrapped without the mesh: no placements, as in 2.9
    with pytest.raises(ValueError, match="auto-wrapped"):
        (st + st)._spec
    assert st.device_mesh.device_type == "xla"
    assert tuple(st.device_mesh.mesh.shape) == (N // 2, 2)
    with pytest.raises(ValueError, match="Placements not available: XLAShardedTensor "
                       "requires mesh_shape and partition_spec"):
        xs.XLAShardedTensor(torch.zeros(2, device=dev)).placements
    with pytest.raises(RuntimeError, match="global_tensor"):
        st.to_local()


def test_sharded_tensor_redistribute(dev):
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard
    c = torch.randn(N, 4)
    st = xs.mark_sharding(c.to(dev), mesh2d(), ("data", None))
    r = st.redistribute(mesh2d(), [Replicate(), Shard(1)])
    assert r.partition_spec == (None, 1)
    assert xs.sharding_spec_text(r.global_tensor) == "{devices=[1,2,%d]%s last_tile_dim_" \
        "replicate}" % (N // 2, ",".join(str(i) for i in
                                         np.arange(N).reshape(N // 2, 2).T.reshape(-1)))
    torch.testing.assert_close(r.global_tensor.cpu(), c)
    with pytest.raises(NotImplementedError, match="Partial"):
        st.redistribute(mesh2d(), [Partial(), Replicate()])
    with pytest.raises(ValueError, match="placements"):
        st.redistribute(mesh2d(), [Replicate()])
    with pytest.raises(IndexError):
        st.redistribute(mesh2d(), [Shard(2), Replicate()])


def test_sharded_tensor_gradient(dev):
    xt = torch.randn(8, 8, device=dev)
    st = xs.XLAShardedTensor(xt, requires_grad=True)
    st.sum().backward()
    assert st.grad is not None and st.grad.shape == st.shape
    # a DTensor: compared through torch.allclose, as torch_xla's tests do
    assert torch.allclose(st.grad.cpu(), torch.ones(8, 8))


def test_load_local_shards_checks_like_torch_xla(dev):
    c = torch.arange(N, dtype=torch.float32) + 1
    st = xs.mark_sharding(c.to(dev), mesh1d(), ("d",))
    shards = st.local_shards
    assert all(s.indices[0].step == 1 for s in shards)
    for s in shards:
        s.data *= -1
    st.load_local_shards_(shards)
    assert torch.allclose(st.cpu(), -c)
    assert xs.sharding_spec_text(st) == "{devices=[%d]%s}" % (N, RANGE)
    with pytest.raises(RuntimeError, match="one per device"):
        st.load_local_shards_(shards[:-1])
    bad = [xs.XLAShard(torch.zeros(2), s.indices, s.shard_device, s.replica_id)
           for s in shards]
    with pytest.raises(RuntimeError, match="shape"):
        st.load_local_shards_(bad)
    rt = xs.mark_sharding(c.to(dev), mesh1d(), (None,))
    with pytest.raises(RuntimeError, match="replicated"):
        rt.load_local_shards_(rt.local_shards)


# ---------------------------------------------------- DTensor api

def test_xla_distribute_tensor_and_module(dev):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Replicate, Shard
    dm = DeviceMesh("xla", torch.arange(N).reshape(N // 2, 2))
    c = torch.randn(N, 6)
    st = xs.xla_distribute_tensor(c, dm, [Shard(0), Replicate()])
    assert xs.sharding_spec_text(st) == "{devices=[%d,1,2]%s last_tile_dim_replicate}" % (
        N // 2, RANGE)
    assert torch.allclose(st.cpu(), c)
    with pytest.raises(AssertionError, match="already annotated"):
        xs.xla_distribute_tensor(st, dm, [Shard(0), Replicate()])

    lin = nn.Linear(6, 4).to(dev)
    seen = []

    def part(name, mod, mesh):
        if isinstance(mod, nn.Linear):
            xs.xla_distribute_tensor(mod.weight, mesh, [Replicate(), Shard(0)])
            seen.append(name)

    out_mark = []
    xs.xla_distribute_module(lin, dm, part,
                             output_fn=lambda mod, out, mesh: out_mark.append(out.shape))
    assert seen == [""]
    assert xs.sharding_spec_text(lin.weight) == xs.sharding_spec_text(
        xs.mark_sharding(torch.zeros(4, 6, device=dev), mesh2d(), ("model", None)))
    x = torch.randn(3, 6)
    ref = nn.functional.linear(x, lin.weight.detach().cpu(), lin.bias.detach().cpu())
    torch.testing.assert_close(lin(x.to(dev)).cpu(), ref, rtol=1e-5, atol=1e-5)
    assert out_mark == [torch.Size([3, 4])]
    with pytest.raises(NotImplementedError, match="auto"):
        xs.xla_distribute_module(nn.Linear(2, 2), dm, xs.auto_policy)


# ----------------------------------------------- batches, like the loader

def test_shard_batch_rules(dev):
    from lazytpu.spmd.sharding import shard_batch
    spec = xs.ShardingSpec(mesh1d(), ("d", None))
    with pytest.raises(ValueError, match="dict"):
        shard_batch(torch.zeros(N, 2, device=dev), {"x": spec})
    with pytest.raises(KeyError, match="missing"):
        shard_batch({"x": torch.zeros(N, 2, device=dev), "y": torch.zeros(N, 2, device=dev)},
                    {"x": spec})
    b = {"x": torch.zeros(N, 2, device=dev), "y": torch.zeros(N, device=dev)}
    shard_batch(b, spec)
    assert xs.sharding_spec_text(b["x"]) == "{devices=[%d,1]%s}" % (N, RANGE)
    assert xs.sharding_spec_text(b["y"]) == "{replicated}"   # SPMD data: replicated
    c = [torch.zeros(N, 2, device=dev)]
    shard_batch(c, None)
    assert xs.sharding_spec_text(c[0]) == "{replicated}"
    mini = xs.ShardingSpec(mesh1d(), ("d", None), minibatch=True)
    with pytest.raises(RuntimeError, match="per-host batch size must be divisible"):
        shard_batch([torch.zeros(N - 1, 2, device=dev)], mini)


def test_loader_minibatch_refuses_uneven_batch(dev):
    spec = xs.ShardingSpec(mesh1d(), ("d", None), minibatch=True)
    loader = lazytpu.loader.MpDeviceLoader([(torch.zeros(N - 1, 3),)], dev,
                                           input_sharding=spec)
    with pytest.raises(RuntimeError, match="minibatch"):
        next(iter(loader))


# ------------------------------------------------------------ pictures

def test_visualize_sharding_draws_torch_xla_table(dev, capsys, monkeypatch):
    rich = pytest.importorskip("rich")
    import rich.align
    import rich.box
    import rich.console
    import rich.padding
    import rich.style
    import rich.table
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    t = torch.zeros(N, 4, device=dev)
    xs.mark_sharding(t, mesh2d(), ("data", "model"))
    table = xs.visualize_tensor_sharding(t, use_color=False)
    assert "Visualizing {devices=[%d,2]" % (N // 2) in capsys.readouterr().out
    con = rich.console.Console()
    with con.capture() as cap:
        con.print(table)
    want = rich.table.Table(show_header=False, show_lines=True, padding=0, highlight=True,
                            pad_edge=False, box=rich.box.SQUARE)
    for r in range(N // 2):
        want.add_row(*[rich.padding.Padding(rich.align.Align("TPU %d" % (2 * r + c), "center",
                                                             vertical="middle"),
                                            (1, 1, 1, 1), style=rich.style.Style())
                       for c in range(2)])
    con2 = rich.console.Console()
    with con2.capture() as cap2:
        con2.print(want)
    assert cap.get() == cap2.get()
    text = xs.sharding_grid_text("{replicated}", print_out=False)
    assert "replicated" in text
