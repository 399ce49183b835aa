"""torch_xla 2.9's manual sharding on lazytpu.spmd (enable_manual_sharding /
disable_manual_sharding, _spmd_full_to_shard_shape / _spmd_shard_to_full_shape,
_mark_manual_sharding): the ops of a manual region run on every core on that
core's own block; values are checked against the same per-block math in eager
PyTorch, partitioned (the default) and unpartitioned (LAZYTPU_SPMD_PARTITION=0).
Also mark_sharding's refusal to re-shard sharded device data and the
'{replicated}' sharding of a step's unannotated output (torch_xla 2.9)."""
import numpy as np
import pytest
import torch

import lazytpu
import lazytpu.spmd as xs

N = xs.global_runtime_device_count()
DEV = None


@pytest.fixture(autouse=True)
def spmd_on(monkeypatch):
    global DEV
    monkeypatch.setenv("XLA_USE_SPMD", "1")
    xs.use_spmd()
    DEV = lazytpu.device()
    yield
    xs.set_global_mesh(None)


@pytest.fixture(params=["1", "0"], ids=["partitioned", "whole"])
def partition(request, monkeypatch):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", request.param)
    return request.param


def mesh1d():
    return xs.Mesh(np.arange(N), (N,), ("d",))


def mesh2d():
    return xs.Mesh(np.arange(N), (N // 2, 2), ("data", "model"))


def blocks(shape, mesh_shape, spec):
    """Per mesh position (row-major), the index of its block of a tensor of
    `shape` split by spec (entries: mesh axis index or None)."""
    out = []
    for q in range(int(np.prod(mesh_shape))):
        coord = np.unravel_index(q, mesh_shape)
        idx = []
        for d, a in enumerate(spec):
            if a is None:
                idx.append(slice(None))
            else:
                k = mesh_shape[a]
                n = shape[d] // k
                idx.append(slice(coord[a] * n, (coord[a] + 1) * n))
        out.append(tuple(idx))
    return out


def per_block(x, mesh_shape, spec, f):
    """Eager: f applied to each core's block, put back in place."""
    out = torch.empty_like(x)
    for idx in blocks(x.shape, mesh_shape, spec):
        out[idx] = f(x[idx])
    return out


def test_manual_region_runs_per_core_like_torch_xla(partition):
    xs.set_global_mesh(xs.Mesh(np.arange(N), (1, N)))
    x = torch.randn(8, 8 * 2)
    xd = x.to(DEV)
    xx = xs.enable_manual_sharding(xd, (0, 1))
    assert tuple(xx.shape) == (8, 2)
    assert xx.sharding_spec == "{manual}"
    assert xx.sharding_type == xs.ShardingType.MANUAL
    yy = xx * 2 + 1
    out = xs.disable_manual_sharding(yy, (0, 1), x.shape)
    assert tuple(out.shape) == (8, 16)
    torch.testing.assert_close(out.global_tensor.cpu(), x * 2 + 1)
    assert out.sharding_spec == xs.sharding_spec_text(xd)


@pytest.mark.parametrize("spec", [("data", "model"), ("data", None), (None, "model")])
def test_region_math_uses_each_cores_block(partition, spec):
    """Reductions and a product inside the region see the core's block only."""
    mesh = mesh2d()
    x = torch.randn(8, 6)
    w = torch.randn(6 // (2 if spec[1] else 1), 5)
    xd = x.to(DEV)
    wd = w.to(DEV)                          # whole: every core reads all of it
    xx = xs.enable_manual_sharding(xd, spec, mesh=mesh)

    def f(b):
        return torch.softmax(b, dim=1) * b.sum() - b.mean(dim=0, keepdim=True)

    yy = f(xx.global_tensor)
    out = xs.disable_manual_sharding(yy, spec, x.shape, mesh=mesh).global_tensor
    sp = tuple(None if a is None else ("data", "model").index(a) for a in spec)
    expect = per_block(x, (N // 2, 2), sp, f)
    torch.testing.assert_close(out.cpu(), expect, rtol=1e-5, atol=1e-5)
    # a product with a whole weight: each core's block times the weight
    pp = xx.global_tensor @ wd
    full = (8, 5 * (2 if spec[1] else 1))
    outp = xs.disable_manual_sharding(pp, (spec[0], spec[1]), full, mesh=mesh).global_tensor
    exp = torch.empty(full)
    for q, idx in enumerate(blocks(x.shape, (N // 2, 2), sp)):
        coord = np.unravel_index(q, (N // 2, 2))
        r = slice(coord[0] * 2, coord[0] * 2 + 2) if spec[0] else slice(None)
        c = slice(coord[1] * 5, coord[1] * 5 + 5) if spec[1] else slice(None)
        exp[r, c] = x[idx] @ w
    torch.testing.assert_close(outp.cpu(), exp, rtol=1e-5, atol=1e-5)


def test_replicated_result_is_the_first_cores_value(partition):
    mesh = mesh1d()
    x = torch.randn(N, 4)
    xx = xs.enable_manual_sharding(x.to(DEV), ("d", None), mesh=mesh)
    yy = xx * 3 + xx.sum()
    out = xs.disable_manual_sharding(yy, (None, None), (1, 4), mesh=mesh)
    assert out.sharding_spec == "{replicated}"
    torch.testing.assert_close(out.global_tensor.cpu(), x[0:1] * 3 + x[0].sum())


def test_region_between_sharded_ops_and_xla_names(partition):
    """Sharded ops before and after the region (a data-parallel product, a
    loss), the region through torch_xla's _XLAC entry points."""
    from lazytpu.spmd import sharding as _XLAC     # torch_xla._XLAC's entry points
    _XLAC._spmd_full_to_shard_shape = _XLAC.spmd_full_to_shard_shape
    _XLAC._spmd_shard_to_full_shape = _XLAC.spmd_shard_to_full_shape
    _XLAC._get_xla_sharding_spec = _XLAC.sharding_spec_text
    mesh = mesh2d()
    x = torch.randn(8, 6)
    w = torch.randn(6, 4)
    xd, wd = x.to(DEV), w.to(DEV)
    xs.mark_sharding(xd, mesh, ("data", None))
    h = xd @ wd                               # rows split over 'data'
    xs.mark_sharding(h, mesh, ("data", "model"))
    hh = _XLAC._spmd_full_to_shard_shape(h)
    assert tuple(hh.shape) == (8 // (N // 2), 2)
    assert _XLAC._get_xla_sharding_spec(hh) == "{manual}"
    g = torch.relu(hh) - hh.amax()
    gt = xs._mark_manual_sharding(g)
    full = _XLAC._spmd_shard_to_full_shape(gt.global_tensor, mesh.get_op_sharding(("data", "model")),
                                           (8, 4), torch.float32)
    loss = (full * full).sum()
    hx = x @ w
    exp_full = per_block(hx, (N // 2, 2), (0, 1), lambda b: torch.relu(b) - b.amax())
    torch.testing.assert_close(full.cpu(), exp_full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss.cpu(), (exp_full * exp_full).sum(), rtol=1e-5, atol=1e-5)


def test_manual_value_kept_per_core_at_a_step(monkeypatch):
    """A manual value alive at the step boundary stays per core (partitioned):
    the next step reads it in place; it cannot be read whole."""
    mesh = mesh1d()
    x = torch.randn(N * 2, 3)
    xx = xs.enable_manual_sharding(x.to(DEV), ("d", None), mesh=mesh).global_tensor
    yy = xx + 1
    lazytpu.mark_step()
    assert xs.sharding_spec_text(yy) == "{manual}"
    with pytest.raises(RuntimeError, match="manual"):
        yy.cpu()
    out = xs.disable_manual_sharding(yy * 2, ("d", None), x.shape, mesh=mesh)
    torch.testing.assert_close(out.global_tensor.cpu(), (x + 1) * 2)


def test_whole_run_refuses_a_manual_result(monkeypatch):
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "0")
    mesh = mesh1d()
    xx = xs.enable_manual_sharding(torch.randn(N, 3).to(DEV), ("d", None), mesh=mesh).global_tensor
    yy = xx + 1
    with pytest.raises(RuntimeError, match="per-core \\(manual\\) value of shape \\[1, 3\\]"):
        lazytpu.mark_step()
    del yy, xx
    lazytpu.mark_step()


def test_manual_refusals_name_the_tensor():
    mesh = mesh1d()
    from lazytpu.spmd import sharding as sh
    x = torch.zeros(8, 8).to(DEV)
    with pytest.raises(RuntimeError, match="not sharded"):
        sh.spmd_full_to_shard_shape(x)
    with pytest.raises(RuntimeError, match="Marking any data tensors as manual"):
        xs._mark_manual_sharding(x)
    y = x + 1
    with pytest.raises(RuntimeError, match="not manual sharded"):
        sh.spmd_shard_to_full_shape(y, xs.OpSharding([], [], [], xs.ShardingType.REPLICATED),
                                        y.shape, y.dtype)
    u = torch.zeros(N + 1, 2).to(DEV)
    with pytest.raises(RuntimeError, match="uneven manual shards"):
        xs.enable_manual_sharding(u, ("d", None), mesh=mesh)
    # a value split over the mesh read inside a region: refused when the step runs
    z = torch.randn(N, 2).to(DEV)
    xs.mark_sharding(z, mesh, ("d", None))
    zz = xs.enable_manual_sharding(torch.randn(N, 2).to(DEV), (None, None), mesh=mesh).global_tensor
    bad = zz + (z * 2)
    with pytest.raises(RuntimeError, match="only whole \\(replicated\\) values may enter"):
        bad.cpu()
    del bad, zz
    lazytpu.mark_step()


# ------------------------------------------- mark_sharding of sharded data

def test_mark_sharding_refuses_resharding_device_data():
    m1 = xs.Mesh(np.arange(N), (1, 1, N // 2, 2))
    m2 = xs.Mesh(np.arange(N), (1, 1, 1, N))
    xt = torch.randn(2, 4, 8, 8).to(DEV)
    xs.mark_sharding(xt, m1, (0, 1, 2, 3))
    spec = xs.sharding_spec_text(xt)
    xs.mark_sharding(xt, m1, (0, 1, 2, 3))          # the same again: fine
    with pytest.raises(RuntimeError, match="Existing annotation must be cleared first"):
        xs.mark_sharding(xt, m2, (0, 1, 2, 3))
    assert xs.sharding_spec_text(xt) == spec
    xs.annotate_custom_sharding(xt, m2, (0, 1, 2, 3))   # allowed
    assert xs.sharding_spec_text(xt) != spec
    # a computed value may be annotated again; cleared data may be re-sharded
    y = torch.randn(8, 8).to(DEV)
    xs.mark_sharding(y, mesh1d(), ("d", None))
    xs.clear_sharding(y)
    xs.mark_sharding(y, mesh1d(), (None, "d"))
    z = y + 1
    xs.mark_sharding(z, mesh1d(), ("d", None))
    xs.mark_sharding(z, mesh1d(), (None, "d"))
    torch.testing.assert_close(z.cpu(), y.cpu() + 1)
    # replicated data may be re-sharded
    r = torch.randn(8, 8).to(DEV)
    xs.mark_sharding(r, mesh1d(), (None, None))
    xs.mark_sharding(r, mesh1d(), ("d", None))


# ----------------------------------------- a step's unannotated outputs

def test_step_output_without_annotation_is_replicated():
    t1 = torch.randn(4, 4)
    t2 = torch.randn(4, 4)
    a, b = t1.to(DEV), t2.to(DEV)
    t3 = a @ b
    assert xs.sharding_spec_text(t3) == ""
    lazytpu.mark_step()
    assert "replicated" in xs.sharding_spec_text(t3)
    assert xs.sharding_type_of(t3) == int(xs.ShardingType.REPLICATED)
    assert xs.sharding_spec_text(a) == ""            # uploaded data: no sharding
    torch.testing.assert_close(t3.cpu(), t1 @ t2)
