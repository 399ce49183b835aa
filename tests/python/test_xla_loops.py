"""torch_xla 2.9's loops on lazytpu (torch_xla.experimental.scan, scan_layers,
fori_loop, while_loop), in a fresh ``python -m lazytpu`` process, against
the same loop written out in eager PyTorch on the CPU: values and
gradients. lazytpu unrolls the loops (scan's trip count is static; a while
loop reads its condition on the host once per iteration): the results must
be the loop's, step for step. (torch's own while_loop higher-order op is
refused on PyTorch 2.13: see scripts/xla_suite_expected.txt.)"""
from xla_script import run_xla_script


def _run(tmp_path, code, name):
    return run_xla_script(tmp_path, code, name)


def test_scan_and_scan_layers_values_and_gradients_vs_eager(tmp_path):
    out = _run(tmp_path, """
        import torch, torch_xla
        from torch_xla.experimental.scan import scan
        from torch_xla.experimental.scan_layers import scan_layers

        d = torch_xla.device()
        torch.manual_seed(0)
        w0, h0, xs0 = torch.randn(4, 4), torch.randn(2, 4), torch.randn(5, 2, 4)

        def step(w):
            def fn(carry, x):
                nxt = torch.tanh(carry @ w + x)
                return nxt, nxt.sum(dim=1) * 0.5
            return fn

        # eager loop on the CPU
        w, h, xs = (t.clone().requires_grad_() for t in (w0, h0, xs0))
        c, ys = h, []
        for i in range(xs.shape[0]):
            c, y = step(w)(c, xs[i])
            ys.append(y)
        ys = torch.stack(ys)
        (c.pow(2).sum() + ys.sum()).backward()

        # scan on the device
        wd, hd, xsd = (t.to(d).requires_grad_() for t in (w0, h0, xs0))
        cd, ysd = scan(step(wd), hd, xsd)
        (cd.pow(2).sum() + ysd.sum()).backward()
        torch_xla.sync()
        torch.testing.assert_close(cd.cpu(), c.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ysd.cpu(), ys.detach(), rtol=1e-5, atol=1e-5)
        for a, b in ((wd, w), (hd, h), (xsd, xs)):
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)

        # xs leaves of different lengths: 2.9's ValueError
        try:
            scan(step(wd), hd, (xsd, xsd[:3]))
        except ValueError as e:
            assert "leading dimension" in str(e), e
        else:
            raise AssertionError("xs leaves of different lengths must raise ValueError")

        # scan_layers: a stack of identical layers, values and gradients
        torch.manual_seed(1)
        ref = [torch.nn.Linear(4, 4) for _ in range(3)]
        dev_layers = [torch.nn.Linear(4, 4).to(d) for _ in range(3)]
        for a, b in zip(dev_layers, ref):
            a.load_state_dict(b.state_dict())
        x = torch.randn(2, 4)
        y = x
        for l in ref:
            y = torch.relu(l(y))
        class Act(torch.nn.Module):
            def __init__(self, lin):
                super().__init__()
                self.lin = lin
            def forward(self, v):
                return torch.relu(self.lin(v))
        yd = scan_layers([Act(l) for l in dev_layers], x.to(d))
        y.sum().backward()
        yd.sum().backward()
        torch_xla.sync()
        torch.testing.assert_close(yd.cpu(), y.detach(), rtol=1e-5, atol=1e-5)
        for a, b in zip(dev_layers, ref):
            torch.testing.assert_close(a.weight.grad.cpu(), b.weight.grad, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(a.bias.grad.cpu(), b.bias.grad, rtol=1e-4, atol=1e-5)
        print("SCAN OK")
    """, "scan.py")
    assert "SCAN OK" in out


def test_fori_loop_and_while_loop_vs_python_loop(tmp_path):
    out = _run(tmp_path, """
        import torch, torch_xla
        from torch_xla.experimental.fori_loop import fori_loop, while_loop

        d = torch_xla.device()
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 3)
        lind = torch.nn.Linear(3, 3).to(d)
        lind.load_state_dict(lin.state_dict())
        x0 = torch.randn(2, 3)

        # while_loop: (counter, value) carried, counter on the device
        def cond(i, v):
            return i > 0
        def body_cpu(i, v):
            return i - 1, torch.tanh(lin(v))
        def body_dev(i, v):
            return i - 1, torch.tanh(lind(v))
        i, v = torch.tensor(4), x0
        while i > 0:
            i, v = body_cpu(i, v)
        with torch.no_grad():
            ri, rv = while_loop(cond, body_dev, (torch.tensor(4, device=d), x0.to(d)))
        assert ri.device.type == "xla" and int(ri.cpu()) == 0
        torch.testing.assert_close(rv.cpu(), v.detach(), rtol=1e-5, atol=1e-5)

        # a data-dependent trip count: halve until the norm is below 1
        big = torch.full((3,), 10.0)
        want = big.clone()
        n = 0
        while want.norm() >= 1:
            want, n = want / 2, n + 1
        gi, gv = while_loop(lambda k, t: t.norm() >= 1, lambda k, t: (k + 1, t / 2),
                            (torch.tensor(0, device=d), big.to(d)))
        assert int(gi.cpu()) == n and n == 5, (int(gi.cpu()), n)
        torch.testing.assert_close(gv.cpu(), want)

        # fori_loop(lower, upper, body, *inputs): 2.9 returns (remaining count, result)
        lower, upper = torch.tensor(3, device=d), torch.tensor(10, device=d)
        init = torch.ones(2, 2, device=d)
        left, res = fori_loop(lower, upper, lambda t: torch.add(t, 1), init)
        assert int(left.cpu()) == 0
        torch.testing.assert_close(res.cpu(), torch.full((2, 2), 8.0))
        print("LOOPS OK")
    """, "loops.py")
    assert "LOOPS OK" in out
