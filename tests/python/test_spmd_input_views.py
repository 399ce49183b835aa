"""Device data split along its first dim reaches each core as a view of its
block (LAZYTPU_SPMD_INPUT_VIEWS=1, the default; lazy/spmd_exec.c
split_views, lazy/device.c lt_buffer_view).

The loader's batch, sharded over the batch dim, is one buffer; each core's
block of it is a contiguous run, so the partitioned step reads it in place
instead of the host copying 8 blocks every step. A view is never written:
a program that updates such a value in place writes a copy, so the whole
buffer, and every tensor still reading it, keeps its values."""
import pytest
import torch

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs

N = xs.global_runtime_device_count()

pytestmark = pytest.mark.usefixtures("spmd_partitioned")   # conftest.py


def _views():
    return met.counter_value("SpmdInputViews") or 0


def _sharded(x, spec):
    d = x.to(lazytpu.device())
    lazytpu.mark_step(wait=True)        # device data, not a pending value
    xs.mark_sharding(d, xs.get_1d_mesh("data"), spec)
    return d


@pytest.mark.parametrize("views", [1, 0])
def test_batch_split_reads_the_same_values(monkeypatch, views):
    monkeypatch.setenv("LAZYTPU_SPMD_INPUT_VIEWS", str(views))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4 * N, 16, generator=g)      # 256-byte blocks
    w = torch.randn(16, 5, generator=g)
    xd = _sharded(x, ("data", None))
    wd = w.to(lazytpu.device())
    v0 = _views()
    y = torch.relu(xd @ wd) * 2 + xd.sum(1, keepdim=True)
    lazytpu.mark_step(wait=True)
    torch.testing.assert_close(y.cpu(), torch.relu(x @ w) * 2 + x.sum(1, keepdim=True))
    assert (_views() - v0 > 0) == bool(views)


def test_in_place_update_of_a_split_input_writes_a_copy():
    """x.mul_ and a slice assignment on the sharded device data: each core's
    program writes a copy of its block, so the partial write keeps the
    other elements, and a tensor that read x before sees the old values."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2 * N, 16, generator=g)      # 128-byte blocks
    xd = _sharded(x, ("data", None))
    before = xd + 0                     # traced from the old value
    v0 = _views()
    xd.mul_(3)
    xd[:, 1] = -1.0
    lazytpu.mark_step(wait=True)
    assert _views() > v0
    want = x * 3
    want[:, 1] = -1.0
    torch.testing.assert_close(xd.cpu(), want)
    torch.testing.assert_close(before.cpu(), x)


def test_split_not_on_a_64_byte_boundary_is_copied():
    """Blocks of 3 float32 rows of 5: 60 bytes each, so no views (the
    blocks would not start 64-byte aligned); the values are right."""
    x = torch.arange(3 * N * 5, dtype=torch.float32).reshape(3 * N, 5)
    xd = _sharded(x, ("data", None))
    v0 = _views()
    y = xd * 2 + 1
    lazytpu.mark_step(wait=True)
    torch.testing.assert_close(y.cpu(), x * 2 + 1)
    assert _views() == v0


def test_split_on_a_later_dim_is_copied():
    x = torch.randn(4, 16 * N)
    xd = _sharded(x, (None, "data"))
    v0 = _views()
    y = xd.exp()
    lazytpu.mark_step(wait=True)
    torch.testing.assert_close(y.cpu(), x.exp())
    assert _views() == v0
