"""A tensor's SPMD sharding survives in-place updates (torch_xla 2.9: an
in-place result assigned to a sharded tensor is re-sharded to its spec)
until the user clears or changes it: copy_ from a CPU or device tensor,
load_state_dict, zero_/fill_, nn.init.*, and a training loop after
load_state_dict whose losses equal eager CPU's and whose steps run
partitioned with the weights' sharding. Each case runs under
`python -m lazytpu` (torch_xla compat mode) in a fresh process."""
from test_spmd_compat import run_compat

SHARDED = "{devices=[8,1]0,1,2,3,4,5,6,7}"

PRELUDE = """
    import numpy as np, torch, torch.nn as nn
    import torch_xla, torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
    xr.use_spmd()
    mesh = xs.Mesh(np.arange(8), (8,), ("fsdp",))
    dev = torch_xla.device()
    spec = lambda t: repr(torch_xla._XLAC._get_xla_sharding_spec(t))
    def local_shapes(t):
        return sorted({tuple(s.data.shape) for s in xs.XLAShardedTensor(t).local_shards})
    def train_like_cpu(model, cpu, lr, batch):
        # 4 SGD-momentum steps here and on the CPU: equal losses, then weights
        import torch_xla.core.xla_model as xm
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        copt = torch.optim.SGD(cpu.parameters(), lr=lr, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        for step in range(4):
            x, y = batch(g)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            xm.mark_step()
            copt.zero_grad()
            closs = nn.functional.cross_entropy(cpu(x), y)
            closs.backward()
            copt.step()
            torch.testing.assert_close(loss.cpu(), closs.detach(), atol=1e-5, rtol=1e-5)
        for a, b in zip(model.parameters(), cpu.parameters()):
            torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=1e-5)
"""


def test_inplace_updates_keep_the_sharding():
    out = run_compat(PRELUDE + """
    ops = [("copy_cpu", lambda w: w.copy_(torch.ones(16, 16))),
           ("copy_dev", lambda w: w.copy_(torch.ones(16, 16).to(dev))),
           ("zero_", lambda w: w.zero_()), ("fill_", lambda w: w.fill_(0.25)),
           ("mul_", lambda w: w.mul_(0.5)),
           ("normal_", lambda w: nn.init.normal_(w, std=0.02)),
           ("kaiming_normal_", nn.init.kaiming_normal_),
           ("xavier_uniform_", nn.init.xavier_uniform_),
           ("trunc_normal_", nn.init.trunc_normal_),
           ("constant_", lambda w: nn.init.constant_(w, 3.0))]
    for name, op in ops:
        host = torch.randn(16, 16)
        w = nn.Parameter(host.to(dev))
        xs.mark_sharding(w, mesh, ("fsdp", None))
        with torch.no_grad():
            op(w)
        before = spec(w)
        torch_xla.sync()
        print("CASE", name, before, spec(w), local_shapes(w))
    # the sharding lasts until cleared or changed
    w = torch.randn(16, 16).to(dev)
    xs.mark_sharding(w, mesh, ("fsdp", None))
    xs.clear_sharding(w)
    w.zero_()
    torch_xla.sync()
    print("CLEARED", spec(w))
    xs.mark_sharding(w, mesh, (None, "fsdp"))
    w.copy_(torch.ones(16, 16))
    w.fill_(2.0)
    torch_xla.sync()
    print("CHANGED", spec(w), local_shapes(w), float(w.sum()))
    # an unsharded tensor stays unsharded
    u = torch.randn(16, 16).to(dev)
    u.copy_(torch.ones(16, 16)); u.zero_(); u.add_(1)
    torch_xla.sync()
    print("UNSHARDED", spec(u), float(u.sum()))
    """)
    cases = {l.split()[1]: l for l in out.splitlines() if l.startswith("CASE")}
    assert len(cases) == 10, out
    for name, line in cases.items():
        assert line == "CASE %s '%s' '%s' [(2, 16)]" % (name, SHARDED, SHARDED), out
    assert "CLEARED ''" in out or "CLEARED '{replicated}'" in out, out
    assert "CHANGED '{devices=[1,8]0,1,2,3,4,5,6,7}' [(16, 2)] 512.0" in out, out
    # (after a step in SPMD mode an unannotated value is replicated, as before)
    assert "UNSHARDED '' 256.0" in out or "UNSHARDED '{replicated}' 256.0" in out, out


def test_load_state_dict_keeps_sharding_and_trains_like_cpu():
    out = run_compat(PRELUDE + """
    import torch_xla.debug.metrics as met
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(dev)
    xs.mark_sharding(model[0].weight, mesh, ("fsdp", None))
    xs.mark_sharding(model[2].weight, mesh, (None, "fsdp"))
    with torch.no_grad():                       # a device source too
        model[2].weight.copy_(torch.zeros(8, 32).to(dev))
    model.load_state_dict(cpu.state_dict())     # copy_ from CPU
    print("SPEC0", spec(model[0].weight), spec(model[2].weight))
    train_like_cpu(model, cpu, 0.1, lambda g: (torch.randn(32, 16, generator=g),
                                               torch.randint(0, 8, (32,), generator=g)))
    print("SPEC1", spec(model[0].weight), spec(model[2].weight))
    print("LOCAL", local_shapes(model[0].weight), local_shapes(model[2].weight))
    rep = met.metrics_report()
    print("PARTITIONED", "ran PARTITIONED" in rep and "NOT partitioned" not in rep)
    """)
    want = "'%s' '{devices=[1,8]0,1,2,3,4,5,6,7}'" % SHARDED
    assert "SPEC0 " + want in out, out
    assert "SPEC1 " + want in out, out
    assert "LOCAL [(4, 16)] [(8, 4)]" in out, out
    assert "PARTITIONED True" in out, out


def test_writes_through_views_keep_the_sharding():
    # functionalization writes a view back as base = slice/select_scatter(base,
    # ...): the scatter keeps the base's layout, and a Parameter (an alias of
    # the value it wraps) has its annotation on that base too
    out = run_compat(PRELUDE + """
    def make(kind, host):
        if kind == "plain":
            return host.to(dev)
        if kind == "param":
            return nn.Parameter(host.to(dev))
        lin = nn.Linear(16, 16).to(dev)
        with torch.no_grad():
            lin.weight.copy_(host)
        return lin.weight
    ops = [("slice", lambda w: w[2:5].zero_()), ("row", lambda w: w[0].mul_(3.0)),
           ("data_row", lambda w: w.data[1].zero_()), ("t_row", lambda w: w.t()[0].fill_(2.0)),
           ("flat", lambda w: w.view(-1)[5:40].fill_(-1.0)),
           ("setitem", lambda w: w.__setitem__((slice(None), 3), 5.0))]
    for kind in ("plain", "param", "module"):
        for name, op in ops:
            host = torch.randn(16, 16)
            w = make(kind, host)
            xs.mark_sharding(w, mesh, ("fsdp", None))
            with torch.no_grad():
                op(w)
                op(host)
            before = spec(w)
            torch_xla.sync()
            print("CASE", kind, name, before, spec(w), local_shapes(w),
                  torch.equal(w.cpu(), host))
    # transformers' _init_weights for an nn.Embedding with a padding index
    emb = nn.Embedding(16, 8, padding_idx=0).to(dev)
    xs.mark_sharding(emb.weight, mesh, ("fsdp", None))
    with torch.no_grad():
        emb.weight.normal_(0.0, 0.02)
        emb.weight.data[emb.padding_idx].zero_()
    torch_xla.sync()
    print("EMB", spec(emb.weight), float(emb.weight[0].abs().sum()))
    """)
    cases = [l for l in out.splitlines() if l.startswith("CASE")]
    assert len(cases) == 18, out
    for line in cases:
        kind, name = line.split()[1:3]
        assert line == "CASE %s %s '%s' '%s' [(2, 16)] True" % (kind, name, SHARDED, SHARDED), out
    assert "EMB '%s' 0.0" % SHARDED in out, out


def test_other_inplace_and_out_ops_keep_the_sharding():
    # ops PyTorch's generated Functionalize kernels run (no kernel of ours on
    # that key): index_fill_, index_add_, scatter_ (a scatter keeps its base's
    # layout), torch.eye(out=) of nn.init.eye_ (_propagate_xla_data, as in
    # torch_xla), an out= op writing into its input
    out = run_compat(PRELUDE + """
    idx = torch.tensor([1, 3])
    ops = [("index_fill_", lambda w, d: w.index_fill_(0, idx.to(d), 2.0)),
           ("index_add_", lambda w, d: w.index_add_(0, idx.to(d), torch.ones(2, 16).to(d))),
           ("scatter_", lambda w, d: w.scatter_(0, torch.zeros(1, 16, dtype=torch.long).to(d), 1.0)),
           ("eye_", lambda w, d: nn.init.eye_(w)),
           ("mul_out", lambda w, d: torch.mul(w, 2, out=w))]
    for name, op in ops:
        host = torch.randn(16, 16)
        w = nn.Parameter(host.to(dev))
        xs.mark_sharding(w, mesh, ("fsdp", None))
        with torch.no_grad():
            op(w, dev)
            op(host, "cpu")
        before = spec(w)
        torch_xla.sync()
        print("CASE", name, before, spec(w), local_shapes(w), torch.equal(w.cpu(), host))
    """)
    cases = [l for l in out.splitlines() if l.startswith("CASE")]
    assert len(cases) == 5, out
    for line in cases:
        name = line.split()[1]
        assert line == "CASE %s '%s' '%s' [(2, 16)] True" % (name, SHARDED, SHARDED), out


def test_view_writes_then_training_run_sharded_like_cpu():
    # an embedding + linear model initialised through views after its
    # shardings were marked (the padding row, a row of the weight), then
    # trained: the steps run partitioned with the marked layouts, losses and
    # weights as eager CPU's
    out = run_compat(PRELUDE + """
    import torch_xla.debug.metrics as met

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32, 16, padding_idx=0)
            self.out = nn.Linear(16, 8)

        def forward(self, ids):
            return self.out(self.emb(ids).mean(1))

    torch.manual_seed(0)
    cpu = Net()
    model = Net().to(dev)
    model.load_state_dict(cpu.state_dict())
    xs.mark_sharding(model.emb.weight, mesh, ("fsdp", None))
    xs.mark_sharding(model.out.weight, mesh, ("fsdp", None))
    for m in (cpu, model):
        with torch.no_grad():
            m.emb.weight.data[m.emb.padding_idx].zero_()
            m.out.weight[3].mul_(0.5)
    print("SPEC0", spec(model.emb.weight), spec(model.out.weight))
    train_like_cpu(model, cpu, 0.5, lambda g: (torch.randint(0, 32, (16, 6), generator=g),
                                               torch.randint(0, 8, (16,), generator=g)))
    print("SPEC1", spec(model.emb.weight), spec(model.out.weight))
    print("LOCAL", local_shapes(model.emb.weight), local_shapes(model.out.weight))
    rep = met.metrics_report()
    print("PARTITIONED", "ran PARTITIONED" in rep and "NOT partitioned" not in rep)
    """)
    assert "SPEC0 '%s' '%s'" % (SHARDED, SHARDED) in out, out
    assert "SPEC1 '%s' '%s'" % (SHARDED, SHARDED) in out, out
    assert "LOCAL [(4, 16)] [(1, 16)]" in out, out
    assert "PARTITIONED True" in out, out
