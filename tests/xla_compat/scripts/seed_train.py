"""A training script written for torch_xla, as the seeds' users write them:
xmp.spawn + pl.ParallelLoader + xm.optimizer_step + XLA_USE_BF16 +
met.metrics_report(). It knows nothing about lazytpu; tests run it unchanged
under `lazytpu-run` / `python -m lazytpu`.

Success condition (exit 0): the loss fell by half and every replica holds
the same parameters. Prints "FINAL loss=<first>-><last> replicas_equal=1".
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

p = argparse.ArgumentParser()
p.add_argument("--num_cores", type=int, default=None)
p.add_argument("--batch_size", type=int, default=16)
p.add_argument("--num_steps", type=int, default=30)
p.add_argument("--lr", type=float, default=0.05)
FLAGS = p.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 7 * 7, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def dataset(n, seed):
    """Images whose class is the quadrant holding the bright blob."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 14, 14, generator=g) * 0.3
    for i in range(n):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 7 + 2:r * 7 + 5, c * 7 + 2:c * 7 + 5] += 2.0
    return torch.utils.data.TensorDataset(x, y)


def _mp_fn(index, flags):
    torch.manual_seed(0)
    device = xm.xla_device()
    ds = dataset(flags.batch_size * xr.world_size() * flags.num_steps, seed=1)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=flags.batch_size, sampler=sampler,
                                         drop_last=True)
    model = Net().to(device)
    xm.broadcast_master_param(model)
    opt = torch.optim.SGD(model.parameters(), lr=flags.lr, momentum=0.9)
    losses = []
    para = pl.ParallelLoader(loader, [device])
    for step, (x, y) in enumerate(para.per_device_loader(device)):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        xm.optimizer_step(opt)
        xm.add_step_closure(lambda l: losses.append(l.item()), args=(loss,))
    xm.mark_step()
    checksum = sum(float(p.detach().double().sum().cpu()) for p in model.parameters())
    sums = xm.mesh_reduce("checksum", checksum, lambda v: v)
    equal = int(max(sums) - min(sums) < 1e-6 * max(1.0, abs(sums[0])))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    xm.master_print("FINAL loss=%.4f->%.4f replicas_equal=%d world=%d bf16=%s"
                    % (first, last, equal, xr.world_size(), os.environ.get("XLA_USE_BF16", "0")))
    xm.master_print(met.metrics_report())
    if not (equal and last < 0.5 * first):
        print("FAILED on ordinal %d: loss %.4f -> %.4f, replicas equal %d"
              % (index, first, last, equal))
        sys.exit(21)


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=(FLAGS,), nprocs=FLAGS.num_cores)
