"""torch_xla.experimental.distributed_checkpoint in SPMD mode (compatibility
mode): the SPMD planners with torch.distributed.checkpoint (sharded models
saved and restored, resharded, the sharding kept), CheckpointManager (steps,
intervals, max_to_keep, save_async, restore, its refusals) and
prime_optimizer (an AdamW state restored)."""
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp
import torch.nn as nn

import torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
from torch_xla.experimental.distributed_checkpoint import (CheckpointManager, SPMDLoadPlanner,
                                                           SPMDSavePlanner, prime_optimizer)


pytestmark = pytest.mark.usefixtures("spmd_mode")   # conftest.py


def model(seed, spec=(0, 1), mesh_shape=None):
    n = xr.global_runtime_device_count()
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(16, 8 * n), nn.ReLU(), nn.Linear(8 * n, 4)).to("xla")
    if spec is not None:
        mesh = xs.Mesh(np.arange(n), mesh_shape or (1, n))
        xs.mark_sharding(m[0].weight, mesh, spec)
        xs.mark_sharding(m[2].weight, mesh, (None, None))
    return m


def spec_of(t):
    return torch_xla._XLAC._get_xla_sharding_spec(t)


def same(a, b):
    return all(torch.equal(p.cpu(), q.cpu()) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("dst_spec", [(0, 1), (1, 0), None], ids=["same", "transposed", "none"])
def test_planners_save_and_restore(tmp_path, dst_spec):
    n = xr.global_runtime_device_count()
    a = model(0)
    b = model(1, dst_spec, (n, 1) if dst_spec == (1, 0) else None)
    before = spec_of(b[0].weight)
    assert not same(a, b)
    dist_cp.save(state_dict=a.state_dict(), storage_writer=dist_cp.FileSystemWriter(str(tmp_path)),
                 planner=SPMDSavePlanner())
    sd = b.state_dict()
    dist_cp.load(state_dict=sd, storage_reader=dist_cp.FileSystemReader(str(tmp_path)),
                 planner=SPMDLoadPlanner())
    assert same(a, b)                        # loaded in place into b's tensors
    assert spec_of(b[0].weight) == before    # b's sharding kept
    x = torch.randn(3, 16)
    torch.testing.assert_close(b(x.to("xla")).cpu(), a(x.to("xla")).cpu())


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "pg"),
                            world_size=1, rank=0)
    yield
    dist.destroy_process_group()


def test_manager_needs_a_process_group(tmp_path):
    with pytest.raises(AssertionError, match="A process group is required"):
        CheckpointManager(str(tmp_path), 10)


def test_manager_steps_interval_and_max_to_keep(tmp_path, process_group):
    path = str(tmp_path / "chk")
    mgr = CheckpointManager(path, save_interval=10, max_to_keep=3, chkpt_on_preemption=False)
    a = model(0)
    assert mgr.all_steps() == []
    assert not any(mgr.save(s, a.state_dict()) for s in range(1, 10))
    for s in range(0, 60, 10):
        assert mgr.save(s, a.state_dict())
    assert mgr.all_steps() == [30, 40, 50]
    assert sorted(os.listdir(path)) == ["30", "40", "50"]
    assert mgr.save(55, a.state_dict(), force=True) and mgr.all_steps() == [40, 50, 55]
    # a new manager over the same path finds the tracked checkpoints
    assert CheckpointManager(path, 10, chkpt_on_preemption=False).all_steps() == [40, 50, 55]
    b = model(1)
    sd = b.state_dict()
    mgr.restore(50, sd)
    assert same(a, b)
    with pytest.raises(AssertionError, match="untracked step 20"):
        mgr.restore(20, sd)


def test_manager_save_async(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path / "chk"), save_interval=5, chkpt_on_preemption=False)
    a = model(0)
    assert mgr.save_async(5, a.state_dict())
    with torch.no_grad():       # changed after the call: the checkpoint has the old values
        old = [p.cpu() for p in a.parameters()]
        for p in a.parameters():
            p.add_(1.0)
    assert not mgr.save_async(6, a.state_dict())
    mgr.join()
    assert mgr.all_steps() == [5]
    b = model(1)
    mgr.restore(5, b.state_dict())
    assert all(torch.equal(p.cpu(), o) for p, o in zip(b.parameters(), old))


def test_prime_optimizer_then_restore_the_optimizer(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path / "chk"), save_interval=1, chkpt_on_preemption=False)
    a = model(0)
    opt = torch.optim.AdamW(a.parameters(), lr=0.1)
    for _ in range(2):
        a(torch.randn(5, 16).to("xla")).square().sum().backward()
        opt.step()
        opt.zero_grad()
        torch_xla.sync()
    mgr.save(1, {"model": a.state_dict(), "optim": opt.state_dict()})
    b = model(1)
    opt_b = torch.optim.AdamW(b.parameters(), lr=0.1)
    assert not opt_b.state
    prime_optimizer(opt_b)
    assert len(opt_b.state) == 4
    assert spec_of(b[0].weight) == spec_of(a[0].weight)
    sd = {"model": b.state_dict(), "optim": opt_b.state_dict()}
    mgr.restore(1, sd)
    opt_b.load_state_dict(sd["optim"])
    assert same(a, b)
    for pa, pb in zip(a.parameters(), b.parameters()):
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt_b.state[pb][k].cpu(), opt.state[pa][k].cpu(),
                                       rtol=0, atol=0)
        assert float(opt_b.state[pb]["step"]) == float(opt.state[pa]["step"]) == 2.0


def test_sharded_cpu_state_dict_saves_as_the_model(tmp_path):
    """_helpers._sharded_cpu_state_dict (each sharded tensor as its cores'
    CPU shards, what torch_xla's tests and save_async checkpoint) saves with
    the SPMD planner as the device state dict does."""
    from torch_xla.experimental.distributed_checkpoint._helpers import (
        _CpuShards, _is_sharded_tensor, _sharded_cpu_state_dict)
    n = xr.global_runtime_device_count()
    a, b = model(0), model(1)
    cpu = _sharded_cpu_state_dict(a.state_dict())
    assert isinstance(cpu["0.weight"], _CpuShards) and len(cpu["0.weight"].shards) == n
    assert cpu["0.bias"].device.type == "cpu" and not isinstance(cpu["2.weight"], _CpuShards)
    assert _is_sharded_tensor(xs.wrap_if_sharded(a[0].weight))
    assert not _is_sharded_tensor(xs.wrap_if_sharded(a[2].weight))    # replicated
    dist_cp.save(state_dict=cpu, storage_writer=dist_cp.FileSystemWriter(str(tmp_path)),
                 planner=SPMDSavePlanner())
    dist_cp.load(state_dict=b.state_dict(), storage_reader=dist_cp.FileSystemReader(str(tmp_path)),
                 planner=SPMDLoadPlanner())
    assert same(a, b)


def test_coordinator_check(process_group):
    torch_xla._XLAC._ensure_xla_coordinator_initialized(global_rank=0, world_size=1,
                                                        master_addr="localhost")
    with pytest.raises(RuntimeError, match="global_rank 3 of world_size 2"):
        torch_xla._XLAC._ensure_xla_coordinator_initialized(3, 2, "localhost")
