"""SGD on a world of any shape (run by test_multihost.py under lazytpu-run):
each rank trains on its shard of the same global batch; rank 0 saves the
parameters to argv[1], every rank its place in the world to argv[1].rank<r>."""
import torch, torch.nn as nn, torch.nn.functional as F, lazytpu, sys
dev = lazytpu.device()
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
g = torch.Generator().manual_seed(5)
n, r = lazytpu.world_size(), lazytpu.get_ordinal()
for step in range(5):
    x = torch.randn(8 * 8, 10, generator=g); y = torch.randint(0, 4, (64,), generator=g)
    xs, ys = x[r * 64 // n:(r + 1) * 64 // n], y[r * 64 // n:(r + 1) * 64 // n]
    opt.zero_grad(); F.cross_entropy(m(xs.to(dev)), ys.to(dev)).backward()
    lazytpu.optimizer_step(opt); lazytpu.mark_step()
if r == 0:
    torch.save({k: v.cpu() for k, v in m.state_dict().items()}, sys.argv[1])
with open("%s.rank%d" % (sys.argv[1], r), "w") as f:   # one file per rank: outputs interleave
    f.write("host %d of %d rank %d of %d local %d %d\n" % (
        lazytpu.host_index(), lazytpu.num_hosts(), r, n, lazytpu.get_local_ordinal(),
        lazytpu.local_world_size()))
