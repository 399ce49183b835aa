"""A clone, detach or Parameter of a computed device tensor shares its value
(lt_tensor_share): nothing is traced, so a module moved to the device has
no pending parameters and its first compiled call compiles one graph, as
torch_xla's; eager semantics of clone (independent) and detach (a view that
sees in-place writes) are kept."""
import torch

import lazytpu
from lazytpu import metrics


def _pending(t):
    return lazytpu.debug.tensor_info(t)["pending"] == "1"


def test_moved_module_parameters_are_data():
    dev = lazytpu.device()
    lin = torch.nn.Linear(6, 4).to(dev)
    assert not _pending(lin.weight) and not _pending(lin.bias)
    p = torch.nn.Parameter(torch.randn(3, 3).to(dev))
    assert not _pending(p)


def test_clone_of_data_is_independent():
    dev = lazytpu.device()
    x = torch.randn(5, 3)
    a = x.to(dev)
    c = a.clone()
    assert not _pending(c)
    a.add_(1.0)
    torch.testing.assert_close(c.cpu(), x)
    torch.testing.assert_close(a.cpu(), x + 1.0)
    c.mul_(2.0)
    torch.testing.assert_close(a.cpu(), x + 1.0)
    torch.testing.assert_close(c.cpu(), x * 2.0)


def test_detach_of_data_sees_inplace_writes_as_eager():
    dev = lazytpu.device()
    x = torch.randn(4, 4)
    a = x.to(dev)
    d = a.detach()
    ref_a, ref_d = x.clone(), None
    ref_d = ref_a.detach()
    a.add_(3.0)
    ref_a.add_(3.0)
    torch.testing.assert_close(d.cpu(), ref_d)
    d.mul_(0.5)
    ref_d.mul_(0.5)
    torch.testing.assert_close(a.cpu(), ref_a)


def test_training_step_after_move_matches_cpu():
    dev = lazytpu.device()
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 3)
    mod = torch.nn.Linear(8, 3)
    mod.load_state_dict(ref.state_dict())
    mod.to(dev)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(mod.parameters(), lr=0.1)
    x = torch.randn(5, 8)
    for _ in range(3):
        for m, o, inp in ((ref, opt_r, x), (mod, opt_d, x.to(dev))):
            o.zero_grad()
            m(inp).square().sum().backward()
            o.step()
        lazytpu.mark_step()
    torch.testing.assert_close(mod.weight.cpu(), ref.weight.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mod.bias.cpu(), ref.bias.detach(), rtol=1e-5, atol=1e-5)


def test_first_compiled_call_compiles_one_graph():
    dev = lazytpu.device()
    lin = torch.nn.Linear(10, 20).to(dev)
    f = torch.compile(lin, backend="lazytpu")
    x = torch.randn(7, 10)
    xd = x.to(dev)
    lazytpu.wait_device_ops()
    metrics.clear_all()
    out = f(xd)
    lazytpu.wait_device_ops()
    compiles = metrics.metric_data("CompileTime")[0]
    want = torch.nn.functional.linear(x, lin.weight.cpu(), lin.bias.cpu())
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    assert compiles == 1
