"""The lazy path's host shortcuts (issue 12): lazytpu's own Functionalize
kernels for hot functional ops (backend/functionalize_fast.cpp) and for the
optimizers' in-place foreach ops (backend/functionalize.cpp) must give
eager's values, gradients, aliasing and errors, and must be the kernels
that actually run."""
import os

import pytest
import torch

import lazytpu


def kernel_file(op, key="Functionalize"):
    """The file that registered op's kernel on key ("" if none)."""
    for line in torch._C._dispatch_dump(op).splitlines():
        if line.startswith(key + ":"):
            return line
    return ""


@pytest.mark.skipif(os.environ.get("LAZYTPU_FUNCTIONALIZE_FAST") == "0",
                    reason="fast kernels switched off")
@pytest.mark.parametrize("op", ["aten::mul.Tensor", "aten::addmm", "aten::relu",
                                "aten::native_layer_norm", "aten::max.dim",
                                "aten::nll_loss_forward"])
def test_fast_functionalize_kernels_are_registered(op):
    assert "functionalize_fast.cpp" in kernel_file(op)


@pytest.mark.parametrize("op", ["aten::_foreach_add_.List", "aten::_foreach_mul_.Scalar",
                                "aten::_foreach_addcdiv_.ScalarList",
                                "aten::_foreach_lerp_.Scalar"])
def test_foreach_inplace_kernels_are_registered(op):
    assert "functionalize.cpp" in kernel_file(op)


def test_view_and_composite_ops_keep_pytorch_kernels():
    # views and CompositeImplicitAutograd ops are not ours to shortcut
    assert "functionalize_fast.cpp" not in kernel_file("aten::view")
    assert "functionalize_fast.cpp" not in kernel_file("aten::matmul")


def test_fast_ops_values_grads_and_tuples(dev):
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    y = torch.randint(0, 6, (4,))
    outs = []
    for d in ("cpu", dev):
        xd, wd, bd = (t.detach().to(d).requires_grad_() for t in (x, w, b))
        h = torch.addmm(bd, xd, wd).relu() * 2 - 1
        ln = torch.nn.functional.layer_norm(h, (6,))
        mx, idx = ln.max(1)
        loss = torch.nn.functional.cross_entropy(ln, y.to(d)) + mx.sum() * 0.1
        loss.backward()
        outs.append([loss.detach().cpu(), idx.cpu(), xd.grad.cpu(), wd.grad.cpu(), bd.grad.cpu()])
    for a, c in zip(*outs):
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-5)


def test_fast_op_result_is_functional_and_mutations_alias(dev):
    a = torch.arange(6.0).to(dev)
    b = a * 2                      # through the fast kernel
    v = b.view(2, 3)               # a view of its result
    v.add_(1)                      # written through the view
    torch.testing.assert_close(b.cpu(), torch.arange(6.0) * 2 + 1)
    assert torch._is_functional_tensor(b)


def test_fast_op_with_cpu_scalar_tensor(dev):
    a = torch.arange(4.0).to(dev)
    s = torch.tensor(3.0)          # 0-dim CPU tensor: allowed with a device tensor
    torch.testing.assert_close((a * s).cpu(), torch.arange(4.0) * 3)


@pytest.mark.parametrize("case", ["add_list", "add_scalar", "add_scalarlist", "add_tensor",
                                  "sub_list", "mul_scalar", "mul_list", "div_scalarlist",
                                  "addcmul", "addcdiv_scalarlist", "lerp_scalar", "lerp_list",
                                  "zero", "copy", "sqrt"])
def test_foreach_inplace_like_eager(dev, case):
    torch.manual_seed(1)
    base = [torch.rand(3, 2) + 0.5, torch.rand(4) + 0.5]
    other = [torch.rand(3, 2) + 0.5, torch.rand(4) + 0.5]
    third = [torch.rand(3, 2) + 0.5, torch.rand(4) + 0.5]
    res = []
    for d in ("cpu", dev):
        s = [t.clone().to(d) for t in base]
        o = [t.clone().to(d) for t in other]
        t3 = [t.clone().to(d) for t in third]
        {
            "add_list": lambda: torch._foreach_add_(s, o, alpha=-0.5),
            "add_scalar": lambda: torch._foreach_add_(s, 2.5),
            "add_scalarlist": lambda: torch._foreach_add_(s, [1.0, -2.0]),
            "add_tensor": lambda: torch._foreach_add_(s, torch.tensor(2.0).to(d), alpha=3),
            "sub_list": lambda: torch._foreach_sub_(s, o, alpha=2),
            "mul_scalar": lambda: torch._foreach_mul_(s, 0.9),
            "mul_list": lambda: torch._foreach_mul_(s, o),
            "div_scalarlist": lambda: torch._foreach_div_(s, [2.0, 4.0]),
            "addcmul": lambda: torch._foreach_addcmul_(s, o, t3, value=0.5),
            "addcdiv_scalarlist": lambda: torch._foreach_addcdiv_(s, o, t3, [0.5, -1.0]),
            "lerp_scalar": lambda: torch._foreach_lerp_(s, o, 0.25),
            "lerp_list": lambda: torch._foreach_lerp_(s, o, t3),
            "zero": lambda: torch._foreach_zero_(s),
            "copy": lambda: torch._foreach_copy_(s, o),
            "sqrt": lambda: torch._foreach_sqrt_(s),
        }[case]()
        res.append([t.cpu() for t in s])
    for a, c in zip(*res):
        torch.testing.assert_close(c, a)


def test_foreach_inplace_through_a_view_reaches_the_base(dev):
    p = torch.arange(6.0).to(dev)
    v = p.view(2, 3)
    torch._foreach_add_([v], [torch.ones(2, 3).to(dev)], alpha=2)
    torch.testing.assert_close(p.cpu(), torch.arange(6.0) + 2)


def test_inplace_broadcast_to_larger_shape_raises_like_eager(dev):
    # the meta-tensor check PyTorch's foreach kernel made: now the in-place
    # kernels check (a.add_ grew `a` silently before)
    for d in ("cpu", dev):
        a = torch.ones(1).to(d)
        with pytest.raises(RuntimeError, match=r"output with shape \[1\] doesn't match the "
                                               r"broadcast shape \[3\]"):
            a.add_(torch.ones(3).to(d))
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            torch._foreach_add_([torch.ones(1).to(d)], [torch.ones(3).to(d)])
        b = torch.ones(2, 3).to(d)
        b.mul_(torch.full((3,), 2.0).to(d))      # broadcasting to self's shape is fine
        torch.testing.assert_close(b.cpu(), torch.full((2, 3), 2.0))


def test_foreach_list_length_mismatch_raises(dev):
    a = [torch.ones(2).to(dev), torch.ones(2).to(dev)]
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(a, [torch.ones(2).to(dev)])


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True),
    lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
])
def test_foreach_optimizers_like_eager(dev, make):
    res = []
    for d in ("cpu", dev):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 3)).to(d)
        o = make(m.parameters())
        x = torch.randn(5, 8).to(d)
        y = torch.randint(0, 3, (5,)).to(d)
        for _ in range(3):
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
            if d != "cpu":
                lazytpu.mark_step()
        res.append([p.detach().cpu() for p in m.parameters()])
    for a, c in zip(*res):
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-6)
