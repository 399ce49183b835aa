"""Replica groups on every collective, collective_permute, bucketized
reductions, ZeRO-1 and FSDP v1 on 4 processes (fresh spawns, see
test_world.spawn_fresh), each against a single-process reference."""
import os

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from test_world import N
from test_world import spawn_fresh as _spawn_fresh


def spawn_fresh(fn_name, *args):
    return _spawn_fresh(fn_name, *args, module="test_world_groups")

GROUPS = [[0, 2], [1, 3]]


def _groups(index, out):
    d = torch_xla.device()
    r = xr.global_ordinal()
    peer = [g for g in GROUPS if r in g][0]
    x = torch.tensor([float(r + 1), 10.0 * r], device=d)
    res = {"sum": xm.all_reduce(xm.REDUCE_SUM, x, groups=GROUPS).cpu(),
           "max": xm.all_reduce(xm.REDUCE_MAX, x, scale=0.5, groups=GROUPS).cpu()}
    ins = [torch.ones(2, device=d) * r, torch.ones(3, device=d) * (r + 1)]
    xm.all_reduce(xm.REDUCE_SUM, ins, groups=GROUPS)
    res["list"] = [t.cpu() for t in ins]
    res["gather"] = xm.all_gather(torch.tensor([float(r)], device=d), groups=GROUPS).cpu()
    res["rs"] = xm.reduce_scatter(xm.REDUCE_SUM, torch.arange(4.0, device=d) + r, 1.0, 0, 2,
                                  groups=GROUPS).cpu()
    res["a2a"] = xm.all_to_all(torch.arange(2.0, device=d) + 10 * r, 0, 0, 2,
                               groups=GROUPS).cpu()
    b = [torch.tensor([float(r)], device=d)]
    xm.collective_broadcast(b, root_ordinal=peer[1], groups=GROUPS)
    res["bcast"] = b[0].cpu()
    ring = [[i, (i + 1) % N] for i in range(N)]
    res["permute"] = xm.collective_permute(torch.tensor([float(r)], device=d), ring).cpu()
    res["partial"] = xm.collective_permute(torch.tensor([float(r + 1)], device=d),
                                           [[0, 3]]).cpu()
    res["rs_bucket"] = [t.cpu() for t in xm.reduce_scatter_bucketized(
        xm.REDUCE_SUM, [torch.ones(4, device=d) * r, torch.ones(8, device=d)], 0.25, 0, N,
        bucket_cap_mb=1e-5)]
    res["ag_bucket"] = [t.cpu() for t in xm.all_gather_bucketized(
        [torch.tensor([float(r)], device=d), torch.tensor([r, r], device=d)], dim=0)]
    torch.save(res, os.path.join(out, "%d.pt" % r))


def test_groups_permute_bucketized(tmp_path):
    spawn_fresh("_groups", str(tmp_path))
    for r in range(N):
        g = torch.load(tmp_path / ("%d.pt" % r))
        peer = [p for p in GROUPS if r in p][0]
        assert g["sum"].tolist() == [float(sum(p + 1 for p in peer)), 10.0 * sum(peer)]
        assert g["max"].tolist() == [0.5 * (max(peer) + 1), 5.0 * max(peer)]
        assert g["list"][0].tolist() == [float(sum(peer))] * 2
        assert g["list"][1].tolist() == [float(sum(p + 1 for p in peer))] * 3
        assert g["gather"].tolist() == [float(p) for p in peer]
        me = peer.index(r)
        total = torch.arange(4.0) * 2 + sum(peer)
        assert g["rs"].tolist() == total.chunk(2)[me].tolist()
        assert g["a2a"].tolist() == [float(me + 10 * p) for p in peer]
        assert g["bcast"].tolist() == [float(peer[1])]
        assert g["permute"].tolist() == [float((r - 1) % N)]
        assert g["partial"].tolist() == ([1.0] if r == 3 else [0.0])
        assert g["rs_bucket"][0].tolist() == [0.25 * 6]                 # (0+1+2+3)/4
        assert g["rs_bucket"][1].tolist() == [1.0, 1.0]
        assert g["ag_bucket"][0].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert g["ag_bucket"][1].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4 * N, 6, generator=g), torch.randn(4 * N, 5, generator=g)


def _train_sharded(index, out, kind, steps):
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.fsdp.wrap import always_wrap_policy
    from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer
    d = torch_xla.device()
    r = xr.global_ordinal()
    model = _model()
    if kind == "fsdp":
        model = FSDP(model, auto_wrap_policy=always_wrap_policy, flatten_parameters=True)
        model.to(d)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        model = model.to(d)
        opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1,
                                      momentum=0.9, grad_clipping=False)
    for s in range(steps):
        x, y = _data(s)
        x, y = x[4 * r:4 * r + 4].to(d), y[4 * r:4 * r + 4].to(d)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()                      # FSDP / ZeRO-1 average the gradients themselves
        torch_xla.sync()
    if kind == "fsdp":
        sd = {"model": xm._maybe_convert_to_cpu(model.state_dict()),
              "shard_metadata": model.get_shard_metadata()}
        xm.save(sd, os.path.join(out, "rank%d-of-%d.pth" % (r, N)), master_only=False)
    else:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()},
                   os.path.join(out, "%d.pt" % r))


def _reference(steps):
    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        x, y = _data(s)
        opt.zero_grad()
        ((ref(x) - y) ** 2).mean().backward()
        opt.step()
    return ref.state_dict()


def test_zero1_on_4_matches_one_process(tmp_path):
    steps = 3
    spawn_fresh("_train_sharded", str(tmp_path), "zero1", steps)
    ref = _reference(steps)
    for r in range(N):
        got = torch.load(tmp_path / ("%d.pt" % r))
        for k, v in ref.items():
            torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-5)


def test_fsdp_on_4_matches_one_process_and_consolidates(tmp_path):
    from torch_xla.distributed.fsdp import consolidate_sharded_model_checkpoints
    steps = 3
    spawn_fresh("_train_sharded", str(tmp_path), "fsdp", steps)
    full, path = consolidate_sharded_model_checkpoints(str(tmp_path) + "/",
                                                       "rank*-of-*.pth")
    assert os.path.exists(path)
    ref = _reference(steps)
    assert set(full) == set(ref)
    for k, v in ref.items():
        torch.testing.assert_close(full[k], v, rtol=1e-5, atol=1e-5)
    # the same through the command line (python -m torch_xla.distributed.fsdp.
    # consolidate_sharded_ckpts)
    from torch_xla.distributed.fsdp import consolidate_sharded_ckpts
    out = tmp_path / "cli.pth"
    consolidate_sharded_ckpts.main(["--ckpt_prefix", str(tmp_path) + "/", "--ckpt_suffix",
                                    "rank*-of-*.pth", "--save_path", str(out)])
    cli = torch.load(out, weights_only=False)["model"]
    assert set(cli) == set(ref)
    for k in ref:
        assert torch.equal(cli[k], full[k])
