"""Partial values every core's program reads whole, summed in those programs
(LAZYTPU_SPMD_SUM_EVERY=1, the default; lazy/spmd_fuse.c).

Batch norm over a batch-split activation needs, on every core, the mean and
variance over the whole batch (forward) and the sums of the gradient terms
(backward): each core holds an addend. With LAZYTPU_SPMD_SUM_EVERY=0 the host
all-reduces each of them between levels, waiting for every core; with 1,
each core's next program sums the cores' addends itself, in position order,
so the host queues the whole step without waiting. The additions are the
same in both (position order), so the two must agree bitwise, in float32,
after several steps, and both must match the step run whole
(LAZYTPU_SPMD_PARTITION=0) up to summation order."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met
import lazytpu.spmd as xs
from lazytpu.loader import MpDeviceLoader

N = xs.global_runtime_device_count()

pytestmark = pytest.mark.usefixtures("spmd_partitioned")   # conftest.py


class BNNet(nn.Module):
    """conv, batch norm, relu, pool, linear, batch norm 1d, linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 4 * 4, 16)
        self.bn1 = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc2(F.relu(self.bn1(self.fc1(x.flatten(1)))))


def _batches(n=4, b=2 * N):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(b, 1, 8, 8, generator=g), torch.randint(0, 5, (b,), generator=g))
            for _ in range(n)]


def _train(monkeypatch, every, partition=True, reuse=True):
    monkeypatch.setenv("LAZYTPU_SPMD_SUM_EVERY", "1" if every else "0")
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1" if partition else "0")
    monkeypatch.setenv("LAZYTPU_SPMD_REUSE", "1" if reuse else "0")
    dev = lazytpu.device()
    torch.manual_seed(0)
    model = BNNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mesh = xs.get_1d_mesh("data")
    c0 = met.counter_value("SpmdEveryPositionSums") or 0
    for x, y in MpDeviceLoader(_batches(), dev,
                               input_sharding=xs.ShardingSpec(mesh, ("data", None, None, None))):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        lazytpu.mark_step()
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return state, (met.counter_value("SpmdEveryPositionSums") or 0) - c0


@pytest.mark.parametrize("reuse", [True, False])
def test_summed_in_every_program_bitwise_as_host_all_reduce(monkeypatch, reuse):
    host, n_host = _train(monkeypatch, every=False, reuse=reuse)
    prog, n_prog = _train(monkeypatch, every=True, reuse=reuse)
    assert n_host == 0
    # per step: the forward means/variances and backward sums of both
    # batch norms (and any view of them)
    assert n_prog >= 4 * 4, n_prog
    for k in host:
        assert torch.equal(host[k], prog[k]), (k, (host[k] - prog[k]).abs().max())


def test_matches_the_step_run_whole(monkeypatch):
    whole, _ = _train(monkeypatch, every=True, partition=False)
    prog, n_prog = _train(monkeypatch, every=True)
    assert n_prog > 0
    for k in whole:
        if whole[k].is_floating_point():
            torch.testing.assert_close(prog[k], whole[k], rtol=1e-5, atol=1e-5, msg=k)
        else:
            assert torch.equal(prog[k], whole[k]), k
