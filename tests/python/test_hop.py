"""torch's control-flow higher-order ops on device tensors, called outside
torch.compile (they compile themselves with dynamo's eager backend) and
inside torch.compile(backend="lazytpu"): values and gradients as on the CPU
(lazytpu.hop runs the ops' eager implementations on the device)."""
import pytest
import torch
import torch.nn as nn
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import lazytpu

DEV = lazytpu.device()


def cpu(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    return type(v)(cpu(t) for t in v)


def test_while_loop_values_and_trip_count():
    for start in (0, 2, 7):
        got = while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2 + 1),
                         (torch.tensor(start, device=DEV), torch.arange(3., device=DEV)))
        want = while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2 + 1),
                          (torch.tensor(start), torch.arange(3.)))
        assert got[0].device.type == DEV.type
        assert cpu(got)[0].item() == want[0].item()
        torch.testing.assert_close(cpu(got)[1], want[1])


def test_while_loop_gradient_is_the_unrolled_loops():
    def run(d):
        w = torch.tensor([0.5, -1.0, 2.0], device=d, requires_grad=True)
        _, y = while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, (y * w).sin()),
                          (torch.tensor(0, device=d), torch.ones(3, device=d)))
        y.sum().backward()
        return y, w.grad
    y, g = run(DEV)
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y_ref = torch.ones(3)
    for _ in range(3):
        y_ref = (y_ref * w).sin()
    y_ref.sum().backward()
    torch.testing.assert_close(cpu(y), y_ref.detach())
    torch.testing.assert_close(cpu(g), w.grad)


@pytest.mark.parametrize("pred", [True, False])
def test_cond_branches_and_gradient(pred):
    def run(d):
        w = torch.tensor([1.5, -0.5, 2.0], device=d, requires_grad=True)
        x = torch.arange(3., device=d)
        r = torch.cond(torch.tensor(pred, device=d), lambda a: (a * w).sin(),
                       lambda a: (a + w).cos(), (x,))
        r.sum().backward()
        return r, w.grad
    r, g = run(DEV)
    r_ref, g_ref = run("cpu")
    torch.testing.assert_close(cpu(r), r_ref.detach())
    torch.testing.assert_close(cpu(g), g_ref)


def test_scan_and_map():
    def comb(c, xs):
        return c + xs, (c * xs).sum()
    got = scan(comb, torch.zeros(2, device=DEV), torch.arange(8., device=DEV).view(4, 2))
    want = scan(comb, torch.zeros(2), torch.arange(8.).view(4, 2))
    for a, b in zip(cpu(got), want):
        torch.testing.assert_close(a, b)
    got = hop_map(lambda a, b: a * b + 1, torch.arange(6., device=DEV).view(3, 2),
                  torch.tensor(2., device=DEV))
    torch.testing.assert_close(cpu(got), torch.arange(6.).view(3, 2) * 2 + 1)


class LoopModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, i, x):
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, self.lin(x).relu() + 0.1),
                          (i, x))


def test_while_loop_in_a_compiled_model_follows_each_calls_trip_count():
    torch.manual_seed(0)
    ref = LoopModel()
    m = LoopModel()
    m.load_state_dict(ref.state_dict())
    m = m.to(DEV)
    cm = torch.compile(m, backend="lazytpu")
    x = torch.randn(2, 3)
    with torch.no_grad():
        for start in (0, 1, 2, 0, 3):
            got = cm(torch.tensor(start, device=DEV), x.to(DEV))
            want = ref(torch.tensor(start), x)
            assert cpu(got)[0].item() == want[0].item() == 3
            torch.testing.assert_close(cpu(got)[1], want[1])


def test_other_dynamo_backends_are_still_refused_on_the_device():
    torch._dynamo.reset()
    m = nn.Linear(3, 2).to(DEV)
    with pytest.raises(Exception, match="backend=\"lazytpu\""):
        torch.compile(m, backend="eager")(torch.randn(1, 3, device=DEV))
