"""torch_xla SPMD programs unchanged under `python -m lazytpu` (fresh
processes): pytorch/xla's test_train_spmd_linear_model.py style (a 2-D
mesh, mark_sharding on weights and inputs) and the FSDPv2 decoder example's
style (FSDPv2 + transformer_auto_wrap_policy + MpDeviceLoader
input_sharding); both checked against the same training in eager PyTorch."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_compat(src, timeout=900):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    # compared with eager CPU in f32: a TPU-faithful default matmul level would differ
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    p = subprocess.run([sys.executable, "-m", "lazytpu", "-c", textwrap.dedent(src)],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert p.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
        p.returncode, p.stdout[-6000:], p.stderr[-6000:])
    return p.stdout


def test_linear_model_2d_mesh_script():
    out = run_compat("""
        import numpy as np, torch, torch.nn as nn
        import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
        import torch_xla.distributed.spmd as xs
        import torch_xla.debug.metrics as met
        xr.use_spmd()
        n = xr.global_runtime_device_count()
        assert n == 8, n
        mesh = xs.Mesh(np.array(range(n)), (n // 2, 2), ("data", "model"))
        torch.manual_seed(42)
        cpu = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        model.load_state_dict(cpu.state_dict())
        dev = xm.xla_device()
        model = model.to(dev)
        xs.mark_sharding(model[0].weight, mesh, ("model", None))
        xs.mark_sharding(model[2].weight, mesh, (None, "model"))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        copt = torch.optim.SGD(cpu.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(0)
        for step in range(10):
            x = torch.randn(32, 16, generator=g)
            y = torch.randint(0, 4, (32,), generator=g)
            xd = x.to(dev)
            xs.mark_sharding(xd, mesh, ("data", None))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xd), y.to(dev))
            loss.backward()
            opt.step()
            xm.mark_step()
            copt.zero_grad()
            nn.functional.cross_entropy(cpu(x), y).backward()
            copt.step()
        for a, b in zip(model.parameters(), cpu.parameters()):
            torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=0)
        spec = torch_xla._XLAC._get_xla_sharding_spec(model[0].weight)
        print("SPEC", spec)
        print("TYPE", torch_xla._XLAC._get_xla_sharding_type(model[0].weight))
        rep = met.metrics_report()
        print("SECTION", "== sharding ==" in rep)
    """)
    assert "SPEC {devices=[2,1,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}" in out
    assert "TYPE 5" in out and "SECTION True" in out


def test_fsdpv2_decoder_style_script():
    out = run_compat("""
        import functools, numpy as np, torch, torch.nn as nn
        import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
        import torch_xla.distributed.spmd as xs
        import torch_xla.utils.utils as xu
        import torch_xla.distributed.parallel_loader as pl
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
            SpmdFullyShardedDataParallel as FSDPv2)
        from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy

        class DecoderLayer(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.ln = nn.LayerNorm(d)
                self.fc1 = nn.Linear(d, 4 * d)
                self.fc2 = nn.Linear(4 * d, d)
            def forward(self, x):
                return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))

        class Decoder(nn.Module):
            def __init__(self, vocab=64, d=32, layers=2):
                super().__init__()
                self.emb = nn.Embedding(vocab, d)
                self.layers = nn.ModuleList(DecoderLayer(d) for _ in range(layers))
                self.out = nn.Linear(d, vocab)
            def forward(self, ids):
                x = self.emb(ids)
                for l in self.layers:
                    x = l(x)
                return self.out(x)

        xr.use_spmd()
        n = xr.global_runtime_device_count()
        mesh = xs.Mesh(np.array(range(n)), (n, 1), ("fsdp", "model"))
        xs.set_global_mesh(mesh)
        torch.manual_seed(0)
        cpu = Decoder()
        model = Decoder()
        model.load_state_dict(cpu.state_dict())
        model = FSDPv2(model.to(xm.xla_device()), auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={DecoderLayer}))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        copt = torch.optim.Adam(cpu.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randint(0, 64, (16, 8), generator=g),) * 2 for _ in range(4)]
        loader = pl.MpDeviceLoader(batches, xm.xla_device(),
                                   input_sharding=xs.ShardingSpec(mesh, ("fsdp", None)))
        losses, closses = [], []
        for (ids, labels), (cids, clabels) in zip(loader, batches):
            assert torch_xla._XLAC._get_xla_sharding_spec(ids) != ""
            opt.zero_grad()
            out = model(ids)
            loss = nn.functional.cross_entropy(out.view(-1, 64), labels.view(-1))
            loss.backward()
            opt.step()
            losses.append(loss)
            copt.zero_grad()
            closs = nn.functional.cross_entropy(cpu(cids).view(-1, 64), clabels.view(-1))
            closs.backward()
            copt.step()
            closses.append(closs.detach())
        xm.mark_step()
        torch.testing.assert_close(torch.stack([l.cpu() for l in losses]), torch.stack(closses),
                                   atol=1e-6, rtol=1e-5)
        # Adam moves an element whose gradient is about eps (1e-8) by
        # lr * g / (|g| + eps): the last bits of such a gradient (summed in
        # another order over the cores) move it by up to a few % of lr
        for a, b in zip(model.parameters(), cpu.parameters()):
            torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-5)
            assert (a.cpu() - b).abs().mean() < 1e-6
        print("WRAPPED", sum(isinstance(m, FSDPv2) for m in model.modules()))
        print("OK")
    """)
    assert "WRAPPED 3" in out and "OK" in out
