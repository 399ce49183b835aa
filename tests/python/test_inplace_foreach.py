"""In-place and in-place foreach ops on the device against eager on the CPU
(backend/functionalize_inplace.cpp: unboxed Functionalize kernels; the same
results, errors and alias behaviour as the boxed ones they replace)."""
import pytest
import torch

import lazytpu

D = lazytpu.device()


def _pair(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(s, generator=g) for s in shapes]
    return cpu, [t.to(D) for t in cpu]


def _same(dev, cpu):
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-5, atol=1e-6)


SHAPES = [(3, 4), (5,), (2, 3, 2)]


@pytest.mark.parametrize("name,args", [
    ("_foreach_add_", ("scalar", 0.5)),
    ("_foreach_add_", ("list", {"alpha": -0.25})),
    ("_foreach_add_", ("scalars", [1.0, -2.0, 0.5])),
    ("_foreach_add_", ("tensor", {"alpha": 2.0})),
    ("_foreach_sub_", ("scalar", 1.5)),
    ("_foreach_sub_", ("list", {"alpha": 0.5})),
    ("_foreach_sub_", ("scalars", [1.0, 2.0, 3.0])),
    ("_foreach_mul_", ("scalar", 0.9)),
    ("_foreach_mul_", ("list", {})),
    ("_foreach_mul_", ("scalars", [0.5, 2.0, -1.0])),
    ("_foreach_mul_", ("tensor", {})),
    ("_foreach_div_", ("scalar", 4.0)),
    ("_foreach_div_", ("list", {})),
    ("_foreach_div_", ("scalars", [2.0, 4.0, 8.0])),
    ("_foreach_div_", ("tensor", {})),
    ("_foreach_lerp_", ("list_scalar", 0.3)),
    ("_foreach_lerp_", ("list_list", None)),
    ("_foreach_addcmul_", ("two_lists", 0.5)),
    ("_foreach_addcmul_", ("two_lists_scalars", [0.5, 1.0, 2.0])),
    ("_foreach_addcdiv_", ("two_lists", -0.5)),
    ("_foreach_addcdiv_", ("two_lists_scalars", [0.25, 1.0, 3.0])),
])
def test_foreach_matches_cpu(name, args):
    kind, extra = args
    selfc, selfd = _pair(SHAPES, 0)
    oc, od = _pair(SHAPES, 1)
    pc, pd = _pair(SHAPES, 2)
    op = getattr(torch, name)

    def run(s, o, p, dev):
        if kind == "scalar":
            op(s, extra)
        elif kind == "scalars":
            op(s, extra)
        elif kind == "list":
            if name in ("_foreach_div_",):
                o = [x.abs() + 1 for x in o]
            op(s, o, **extra)
        elif kind == "tensor":
            t = torch.tensor(1.75, device=D if dev else "cpu")
            op(s, t, **extra)
        elif kind == "list_scalar":
            op(s, o, extra)
        elif kind == "list_list":
            op(s, o, [x.sigmoid() for x in p])
        elif kind == "two_lists":
            q = [x.abs() + 1 for x in p] if "addcdiv" in name else p
            op(s, o, q, extra)
        elif kind == "two_lists_scalars":
            q = [x.abs() + 1 for x in p] if "addcdiv" in name else p
            op(s, o, q, extra)

    run(selfc, oc, pc, False)
    run(selfd, od, pd, True)
    lazytpu.mark_step()
    _same(selfd, selfc)


def test_foreach_list_length_mismatch_is_refused():
    _, a = _pair(SHAPES)
    _, b = _pair(SHAPES[:2])
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(a, b)
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_mul_(a, [1.0, 2.0])


def test_inplace_shape_change_is_refused():
    a = torch.zeros(3, device=D)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        a.add_(torch.ones(2, 3, device=D))


@pytest.mark.parametrize("scalar", [0.5, 2, True])
def test_inplace_python_numbers(scalar):
    c = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    d = c.to(D)
    for t in (c, d):
        t.mul_(scalar)
        t.add_(scalar)
        if scalar is True:      # eager refuses it: so must the device
            with pytest.raises(RuntimeError, match="bool tensor is not supported"):
                t.sub_(scalar, alpha=2)
        else:
            t.sub_(scalar, alpha=2)
            t.div_(scalar)
    torch.testing.assert_close(d.cpu(), c)


def test_updates_reach_every_alias():
    """An optimizer-style update of a Parameter (an alias of the tensor it
    wraps) is seen through its detached aliases and views, and a foreach
    update through a detached alias is seen by the Parameter."""
    w = torch.nn.Parameter(torch.zeros(4, 3, device=D))
    det = w.detach()
    row = w.detach()[1]
    with torch.no_grad():
        torch._foreach_add_([w], [torch.ones(4, 3, device=D)], alpha=2.0)
        w.mul_(0.5)
    assert torch.equal(det.cpu(), torch.ones(4, 3))
    assert torch.equal(row.cpu(), torch.ones(3))
    torch._foreach_mul_([det], 3.0)
    assert torch.equal(w.detach().cpu(), torch.full((4, 3), 3.0))
    row.add_(1.0)
    assert torch.equal(w.detach().cpu()[1], torch.full((3,), 4.0))
    assert torch.equal(w.detach().cpu()[0], torch.full((3,), 3.0))


def test_sgd_momentum_and_adamw_foreach_match_cpu():
    for make in (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
                 lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True)):
        torch.manual_seed(0)
        mc = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
        md = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                                 torch.nn.Linear(4, 2))
        md.load_state_dict(mc.state_dict())
        md.to(D)
        oc, od = make(mc.parameters()), make(md.parameters())
        x = torch.randn(8, 5)
        for _ in range(3):
            for m, o, xx in ((mc, oc, x), (md, od, x.to(D))):
                o.zero_grad()
                m(xx).square().mean().backward()
                o.step()
            lazytpu.mark_step()
        for a, b in zip(md.parameters(), mc.parameters()):
            torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast", ["1", "0"])
def test_inplace_result_type_refused_like_eager(fast):
    """An integer tensor times 0.5 or a bool tensor plus 2 in place: eager
    refuses (the result type cannot be cast back); the device must not
    silently cast (unboxed and boxed kernels alike)."""
    import subprocess
    import sys
    code = (
        "import torch, lazytpu\n"
        "D = lazytpu.device()\n"
        "cases = [lambda d: torch.arange(3, device=d).mul_(0.5),\n"
        "         lambda d: torch.ones(3, dtype=torch.bool, device=d).add_(2),\n"
        "         lambda d: torch.arange(4, device=d).div_(2),\n"
        "         lambda d: torch.arange(4, device=d).sqrt_(),\n"
        "         lambda d: torch._foreach_mul_([torch.arange(3, device=d)], 0.5)]\n"
        "for f in cases:\n"
        "    msgs = []\n"
        "    for d in ('cpu', D):\n"
        "        try:\n"
        "            f(d); msgs.append(None)\n"
        "        except RuntimeError as e:\n"
        "            msgs.append(str(e).split('\\n')[0])\n"
        "    assert msgs[0] and msgs[0] == msgs[1], msgs\n"
        "x = torch.arange(3, device=D); x.mul_(2); x.add_(True)\n"
        "assert x.cpu().tolist() == [1, 3, 5]\n"
        "y = torch.zeros(2, device=D); y.copy_(torch.tensor([1.5, 2.5], dtype=torch.float64))\n"
        "z = torch.zeros(2, dtype=torch.long, device=D); z.copy_(torch.tensor([1.5, 2.5]))\n"
        "assert z.cpu().tolist() == [1, 2]\n"
        "print('ok')\n")
    env = dict(__import__("os").environ, LAZYTPU_FUNCTIONALIZE_FAST=fast)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
