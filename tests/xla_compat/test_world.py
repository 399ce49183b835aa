"""torch_xla's collectives, spawn and DDP over the 'xla' backend, on 4
processes (xmp.spawn through lazytpu's launcher).

torch_xla 2.9 spawns one process per device (nprocs=None; 4 CPU devices with
PJRT_DEVICE=CPU CPU_NUM_DEVICES=4) and refuses to spawn once this process
used the device: every spawn here runs from a fresh interpreter
(spawn_fresh)."""
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.backends
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers 'xla')
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

N = 4
HERE = os.path.dirname(os.path.abspath(__file__))


def spawn_fresh(fn_name, *args, devices=N, module="test_world"):
    """xmp.spawn(<module>.<fn_name>, args) from a fresh interpreter with
    `devices` CPU devices; raises with the output on failure."""
    code = ("import sys; sys.path.insert(0, %r); import %s as t; "
            "import torch_xla.distributed.xla_multiprocessing as xmp; "
            "xmp.spawn(t.%s, args=%r)" % (HERE, module, fn_name, tuple(args)))
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    env.pop("LAZYTPU_NUM_CORES", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:],
                                                    p.stderr[-4000:])
    return p


def _collectives(index, out):
    d = xm.xla_device()
    n = xr.world_size()
    r = xr.global_ordinal()
    assert (n, r, index) == (N, index, index)
    assert not hasattr(xm, "get_ordinal") and not hasattr(xm, "xrt_world_size")
    assert d == torch.device("xla:0") and xr.addressable_device_count() == 1
    assert xm.is_master_ordinal() == (r == 0)
    x = torch.tensor([float(r + 1), 2.0 * r], device=d)
    res = {}
    res["sum"] = xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist()
    res["max"] = xm.all_reduce(xm.REDUCE_MAX, x, scale=0.5).cpu().tolist()
    ins = [torch.ones(2, device=d) * r, torch.ones(3, device=d)]
    xm.all_reduce(xm.REDUCE_SUM, ins)                          # in place, list
    res["list"] = [t.cpu().tolist() for t in ins]
    res["gather"] = xm.all_gather(torch.tensor([[r]], device=d), dim=1).cpu().tolist()
    out_t = torch.zeros(N, device=d)
    xm.all_gather(torch.tensor([float(r)], device=d), dim=0, output=out_t)
    res["gather_out"] = out_t.cpu().tolist()
    rs = xm.reduce_scatter(xm.REDUCE_SUM, torch.arange(2.0 * N, device=d), 1.0, 0, N)
    res["rs"] = rs.cpu().tolist()
    a2a = xm.all_to_all(torch.arange(N, device=d) + 10 * r, 0, 0, N)
    res["a2a"] = a2a.cpu().tolist()
    b = [torch.tensor([float(r)], device=d)]
    xm.collective_broadcast(b, root_ordinal=N - 1)
    res["bcast"] = b[0].cpu().tolist()
    torch.manual_seed(r)                                       # different on purpose
    m = nn.Linear(3, 2).to(d)
    xm.broadcast_master_param(m)
    res["param"] = m.weight.detach().cpu().sum().item()
    res["rdv"] = xm.rendezvous("tag", b"p%d" % r)
    res["mesh"] = xm.mesh_reduce("acc", r * 10.0, lambda v: sorted(v))
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    m.weight.grad = torch.full((2, 3), float(r), device=d)
    m.bias.grad = torch.zeros(2, device=d)
    xm.reduce_gradients(opt)
    res["grad"] = m.weight.grad.cpu()[0, 0].item()
    torch.save(res, os.path.join(out, "%d.pt" % r))


def test_collectives_on_4_processes(tmp_path):
    spawn_fresh("_collectives", str(tmp_path))
    got = [torch.load(tmp_path / ("%d.pt" % r)) for r in range(N)]
    for r, g in enumerate(got):
        assert g["sum"] == [10.0, 12.0]
        assert g["max"] == [2.0, 3.0]
        assert g["list"] == [[6.0, 6.0], [4.0, 4.0, 4.0]]
        assert g["gather"] == [[0, 1, 2, 3]]
        assert g["gather_out"] == [0.0, 1.0, 2.0, 3.0]
        assert g["rs"] == [8.0 * r, 8.0 * r + 4]                 # sum of 4 copies
        assert g["a2a"] == [r + 10 * k for k in range(N)]
        assert g["bcast"] == [3.0]
        assert g["rdv"] == [b"p0", b"p1", b"p2", b"p3"]
        assert g["mesh"] == [0.0, 10.0, 20.0, 30.0]
        assert g["grad"] == 1.5                                  # mean of 0..3
    assert len({g["param"] for g in got}) == 1


def _ddp(index, out, steps):
    # compared with f32 eager: HIGHEST (~22 bits) instead of a TPU's default
    # one bf16 pass
    torch_xla.backends.set_mat_mul_precision("highest")
    dist.init_process_group("xla", init_method="xla://")
    assert dist.get_world_size() == N and dist.get_rank() == index
    assert dist.get_backend() == "xla"
    d = xm.xla_device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).to(d)
    ddp = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4 * N, 6, generator=g)
        y = torch.randint(0, 3, (4 * N,), generator=g)
        xs, ys = x[4 * index:4 * index + 4], y[4 * index:4 * index + 4]
        opt.zero_grad()
        F.cross_entropy(ddp(xs.to(d)), ys.to(d)).backward()
        opt.step()
        xm.mark_step()
    t = torch.ones(1, device=d) * index
    dist.all_reduce(t)
    # the single-tensor collectives (torch 2.13 calls all_gather_single /
    # reduce_scatter_single on the process group), alone and coalesced
    gathered = torch.zeros(2 * N, device=d)
    dist.all_gather_into_tensor(gathered, torch.full((2,), float(index), device=d))
    scattered = torch.zeros(2, device=d)
    dist.reduce_scatter_tensor(scattered, torch.arange(2.0 * N, device=d) * (index + 1))
    g2, s2 = torch.zeros(N, device=d), torch.zeros(1, device=d)
    with dist._coalescing_manager(async_ops=False):
        dist.all_gather_into_tensor(g2, torch.full((1,), float(index), device=d))
    with dist._coalescing_manager(async_ops=False):
        dist.reduce_scatter_tensor(s2, torch.ones(N, device=d) * index)
    dist.barrier()
    torch.save({"sd": {k: v.cpu() for k, v in model.state_dict().items()},
                "allreduce": t.cpu().item(), "gathered": gathered.cpu().tolist(),
                "scattered": scattered.cpu().tolist(), "g2": g2.cpu().tolist(),
                "s2": s2.cpu().tolist()}, os.path.join(out, "%d.pt" % index))
    dist.destroy_process_group()


def test_ddp_over_xla_backend_matches_one_core(tmp_path):
    steps = 3
    spawn_fresh("_ddp", str(tmp_path), steps)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4 * N, 6, generator=g)
        y = torch.randint(0, 3, (4 * N,), generator=g)
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
    for r in range(N):
        got = torch.load(tmp_path / ("%d.pt" % r))
        assert got["allreduce"] == 6.0
        assert got["gathered"] == [float(k) for k in range(N) for _ in range(2)]
        # sum over ranks q of arange(2N) * (q + 1), rank r's two elements
        tot = sum(q + 1 for q in range(N))
        assert got["scattered"] == [float((2 * r + j) * tot) for j in range(2)]
        assert got["g2"] == [float(k) for k in range(N)]
        assert got["s2"] == [float(sum(range(N)))]
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(got["sd"][k], v, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: "rank %d %s: %s" % (r, k, m))


def _launch_fn(index, out):
    with open(os.path.join(out, "%d" % index), "w") as f:
        f.write("%d/%d" % (xr.global_ordinal(), xr.world_size()))


def test_spawn_as_torch_xla_2_9(tmp_path):
    """nprocs=None: one worker per device; join=False is ignored (2.9
    always waits); nprocs other than 1 or None and a spawn after the device
    was used are refused; debug_single_process runs here."""
    os.makedirs(tmp_path / "b")
    spawn_fresh("_launch_fn", str(tmp_path / "b"), devices=2)
    assert sorted(os.listdir(tmp_path / "b")) == ["0", "1"]
    assert (tmp_path / "b" / "1").read_text() == "1/2"
    with pytest.raises(ValueError, match="Unsupported nprocs"):
        xmp.spawn(_launch_fn, args=(str(tmp_path),), nprocs=2)
    torch.ones(1, device=torch_xla.device()).cpu()          # the device is in use
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        xmp.spawn(_launch_fn, args=(str(tmp_path),))
    os.makedirs(tmp_path / "c")
    torch_xla.launch(_launch_fn, args=(str(tmp_path / "c"),), debug_single_process=True)
    assert (tmp_path / "c" / "0").read_text() == "0/1"
    xmp.spawn(_launch_fn, args=(str(tmp_path / "c"),), nprocs=1)
