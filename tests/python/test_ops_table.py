"""The op table drives the shim (issue 21): every elementwise op of
lazy/ops.def whose name is an aten op is registered for it with no code of
its own in backend/, and `xlogy`, the op added to show it, is one ops.def
line: values and gradients vs eager PyTorch on the CPU, no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

import optable
from conftest import check_op

g = torch.Generator().manual_seed(0)


def R(*s):
    return torch.randn(s, generator=g)


def _kinds(name, overload):
    """('TT', returns one tensor) of aten::<name>.<overload>, or None."""
    packet = getattr(torch.ops.aten, name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    if op is None:
        return None
    s = op._schema
    kinds = "".join("T" if a.type.kind() == "TensorType" else
                    "S" if a.type.kind() == "NumberType" else "?" for a in s.arguments)
    one = len(s.returns) == 1 and s.returns[0].type.kind() == "TensorType"
    return kinds if one else None


def test_elementwise_table_ops_are_registered_from_the_table():
    """Each UNARY op `name(Tensor)` and BINARY op `name.Tensor(Tensor, Tensor)`
    (or its spelling) of ops.def has a PrivateUse1 kernel: the shim's
    registration loop over the table (backend/ops_math.cpp) made it."""
    checked = []
    for name, arity, kind in optable.ops_def():
        if kind == "UNARY":
            cands = [("", "T")]
        elif kind == "BINARY":
            cands = [("Tensor", "TT"), ("", "TT"), ("Tensor_Tensor", "TT")]
        else:
            continue
        for ov, want in cands:
            if _kinds(name, ov) == want:
                full = "aten::" + name + ("." + ov if ov else "")
                assert torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1"), full
                checked.append(name)
                break
    assert "xlogy" in checked and "atan2" in checked and "exp" in checked, checked


def _xlogy_counter():
    return met.counter_value("lazytpu::xlogy") or 0


def test_xlogy_special_values_native():
    # eager: NaN y -> NaN; x == 0 -> 0 (also for y <= 0); else x * log(y)
    x = torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0, -1.5, float("nan"), 0.0, 3.0, float("inf")])
    y = torch.tensor([0.0, -1.0, float("nan"), -1.0, 3.0, 0.5, 1.0, float("inf"), 0.0, 2.0])
    before = _xlogy_counter()
    check_op(torch.xlogy, x, y, grad=False)
    assert _xlogy_counter() > before, "xlogy did not trace the table op"


@pytest.mark.parametrize("xs,ys", [((3, 4), (3, 4)), ((2, 1, 5), (4, 1)), ((), (6,)), ((0, 3), (3,))])
def test_xlogy_values_and_gradients(xs, ys):
    x = R(*xs)
    if x.numel():
        x.view(-1)[::3] = 0.0           # x == 0: value 0, its own gradient rule
    y = R(*ys).abs() + 0.1
    check_op(torch.xlogy, x, y)
    check_op(torch.special.xlogy, x, y)


def test_xlogy_scalar_forms_and_dtypes():
    y = R(5).abs() + 0.2
    x = R(5)
    check_op(lambda t: torch.xlogy(t, 3.0), x)
    check_op(lambda t: torch.xlogy(2.0, t), y)
    check_op(torch.xlogy, x.double(), y.double())
    check_op(torch.xlogy, x, y, dtype=torch.bfloat16, atol=2e-2, rtol=2e-2)
    xi = torch.tensor([0, 1, 2, -3])
    yi = torch.tensor([5, 0, 3, 2])
    check_op(torch.xlogy, xi, yi, grad=False)                    # int -> float32, as eager
    check_op(torch.xlogy, torch.tensor([True, False]), yi[:2], grad=False)


def test_xlogy_in_place_and_kl_div(dev):
    x, y = R(4, 3), R(4, 3).abs() + 0.1
    a = x.clone()
    a.xlogy_(y)
    d = x.to(dev)
    d.xlogy_(y.to(dev))
    torch.testing.assert_close(d.cpu(), a)
    # kl_div without log_target is xlogy(t, t) - t * input: native now
    logp = F.log_softmax(R(6, 5), dim=1)
    target = F.softmax(R(6, 5), dim=1)
    target[0, 0] = 0.0
    before = _xlogy_counter()
    check_op(lambda i, t: F.kl_div(i, t, reduction="batchmean"), logp, target)
    assert _xlogy_counter() > before
