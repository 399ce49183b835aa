"""torch_xla 2.9's nn.Linear patches (compatibility mode), against
nn.Linear on the CPU: torch_xla.distributed.fsdp.utils
(apply_xla_patch_to_nn_linear, XLAPatchedLinear, checkpoint_module, the
reduce-scatter helpers) and torch_xla.distributed.spmd.xla_sharding
(EinsumLinear, apply_xla_patch_to_nn_linear, XLAPatchedLinear under
autocast, sharded parameters kept)."""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import checkpoint_module
from torch_xla.distributed.fsdp import utils as fsdp_utils
from torch_xla.distributed.spmd import xla_sharding

DEV = "xla"


def run(model, x):
    """Output, input gradient and parameter gradients of sum(model(x))."""
    x = x.clone().requires_grad_(True)
    out = model(x)
    out.sum().backward()
    grads = {n: p.grad.cpu() for n, p in model.named_parameters() if p.requires_grad}
    return out.detach().cpu(), x.grad.cpu(), grads


def assert_same_as_cpu(model_cpu, model_dev, shape):
    torch.manual_seed(1)
    x = torch.randn(*shape)
    ref = run(model_cpu, x)
    got = run(model_dev, x.to(DEV))
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-5)
    assert got[2].keys() == ref[2].keys()
    for n in ref[2]:
        torch.testing.assert_close(got[2][n], ref[2][n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,bias", [((4, 6), True), ((2, 3, 6), True), ((6,), True),
                                        ((2, 3, 6), False)])
def test_fsdp_patched_linear_matches_linear(shape, bias):
    torch.manual_seed(0)
    cpu = nn.Linear(6, 5, bias=bias)
    dev = fsdp_utils.apply_xla_patch_to_nn_linear(copy.deepcopy(cpu).to(DEV))
    assert dev.forward.__func__ is fsdp_utils._xla_patched_nn_linear_forward
    assert dev._nn_linear_forward_original.__func__ is nn.Linear.forward
    assert_same_as_cpu(cpu, dev, shape)


def test_fsdp_patch_reaches_a_checkpointed_linear_and_skips_replaced_forwards():
    calls = []

    def patched(m, input):
        calls.append(m)
        return fsdp_utils.XLAPatchedLinear.apply(input, m.weight, m.bias)

    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    dev = copy.deepcopy(cpu).to(DEV)
    checkpoint_module(dev[0])            # the wrapper calls the original forward
    custom = lambda x: x * 0             # noqa: E731  (replaced already: left alone)
    dev[2].forward = custom
    fsdp_utils.apply_xla_patch_to_nn_linear(dev, patched)
    assert dev[0]._xla_checkpointed_forward_original.__func__ is patched
    assert dev[2].forward is custom
    del dev[2].forward                   # nn.Linear's own again: patched now
    fsdp_utils.apply_xla_patch_to_nn_linear(dev, patched)
    calls.clear()
    assert_same_as_cpu(cpu, dev, (4, 6))
    # layer 0 through checkpoint_module: once forward, once recomputed in backward
    assert calls.count(dev[0]) == 2 and calls.count(dev[2]) == 1


def test_fsdp_checkpoint_module_passes_keyword_arguments():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale

    torch.manual_seed(0)
    cpu = Scaled()
    dev = checkpoint_module(copy.deepcopy(cpu).to(DEV))
    x = torch.randn(3, 4, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_(True)
    ref = cpu(x, scale=3.0)
    got = dev(xd, scale=3.0)
    ref.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dev.lin.weight.grad.cpu(), cpu.lin.weight.grad)


def test_fsdp_reduce_scatter_helpers_in_a_world_of_one():
    assert xr.world_size() == 1
    t = torch.arange(12.0).reshape(4, 3)
    td = t.to(DEV)
    assert torch.equal(fsdp_utils.dummy_all_gather(td, dim=1).cpu(), t.repeat(1, 1))
    assert torch.equal(fsdp_utils.dummy_all_reduce(xm.REDUCE_SUM, td, scale=0.5).cpu(), t * 0.5)
    lst = [t.clone().to(DEV), (t + 1).to(DEV)]
    fsdp_utils.dummy_all_reduce(xm.REDUCE_SUM, lst, scale=2.0)
    assert torch.equal(lst[1].cpu(), (t + 1) * 2)
    got = []
    fsdp_utils.DummyReduceScatter(1)(td, got.append)
    assert torch.equal(got[0].cpu(), t)
    # 0 MB: each input flushed on its own; large: kept until flush()
    for mb, pending in ((0, 0), (16, 2)):
        rs = fsdp_utils.BucketizedReduceScatter(mb, 1, None, False)
        rs.scale = 0.25
        got = []
        rs(td, got.append)
        rs((td + 1), got.append)
        assert len(rs.bucket) == pending and len(got) == 2 - pending
        rs.flush()
        torch.testing.assert_close(got[0].cpu(), t * 0.25)
        torch.testing.assert_close(got[1].cpu(), (t + 1) * 0.25)
        assert rs.bucket == [] and rs.bucket_watermark == 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8, bias=False)
        self.inner = nn.Sequential(nn.GELU(), nn.Linear(8, 8))

    def forward(self, x):
        return self.inner(self.down(torch.relu(self.up(x))))


def test_einsum_linear_replaces_children_keeping_parameters():
    torch.manual_seed(0)
    cpu = Block()
    dev = copy.deepcopy(cpu).to(DEV)
    dev.down.weight.requires_grad_(False)
    cpu.down.weight.requires_grad_(False)
    params = {n: p for n, p in dev.named_parameters()}
    opt = torch.optim.SGD(dev.parameters(), lr=0.1)
    assert xla_sharding.apply_xla_patch_to_nn_linear(dev) is dev
    for m in (dev.up, dev.down, dev.inner[1]):
        assert type(m) is xla_sharding.EinsumLinear
    assert {n: p for n, p in dev.named_parameters()} == params    # the same objects
    assert not dev.down.weight.requires_grad
    assert dev.down.bias is None
    assert_same_as_cpu(cpu, dev, (2, 3, 8))
    before = dev.up.weight.detach().cpu()
    opt.step()                               # the optimizer built before still applies
    assert not torch.equal(dev.up.weight.detach().cpu(), before)
    lone = nn.Linear(2, 2)
    assert type(xla_sharding.apply_xla_patch_to_nn_linear(lone)) is nn.Linear


def test_patched_linear_under_autocast_casts_its_inputs_like_torch_xla():
    torch.manual_seed(0)
    lin = nn.Linear(8, 4).to(DEV)
    x = torch.randn(3, 8).to(DEV)
    with torch.autocast("xla"):
        out = xs.xla_patched_nn_linear_forward(lin, x)
    # 2.9 casts input, weight and bias to the autocast dtype (bias included)
    assert out.dtype == torch.bfloat16
    ref = torch.nn.functional.linear(x.cpu().bfloat16(), lin.weight.detach().cpu().bfloat16(),
                                     lin.bias.detach().cpu().bfloat16())
    torch.testing.assert_close(out.float().cpu(), ref.float(), rtol=2e-2, atol=2e-2)


def test_spmd_package_exports_what_torch_xla_29_exports():
    assert xs.XLAPatchedLinear is xla_sharding.XLAPatchedLinear
    for name in ("apply_xla_patch_to_nn_linear", "EinsumLinear"):
        assert not hasattr(xs, name)         # only in xla_sharding, as in 2.9


@pytest.mark.usefixtures("spmd_mode")
def test_einsum_linear_keeps_the_sharding_of_its_weight():
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (2, n // 2), ("fsdp", "tensor"))
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(16, 32, bias=False))
    dev = copy.deepcopy(cpu).to(DEV)
    xs.mark_sharding(dev[0].weight, mesh, ("tensor", "fsdp"))
    spec = torch_xla._XLAC._get_xla_sharding_spec(dev[0].weight)
    xla_sharding.apply_xla_patch_to_nn_linear(dev)
    assert type(dev[0]) is xla_sharding.EinsumLinear
    assert torch_xla._XLAC._get_xla_sharding_spec(dev[0].weight) == spec != ""
    assert_same_as_cpu(cpu, dev, (4, 2, 16))
