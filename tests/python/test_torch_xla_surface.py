"""torch_xla 2.9's surface in fresh processes: CPU_NUM_DEVICES, and the
pytorch/xla suite runner (scripts/xla_suite.py) on test files of its own
making. The names themselves are tested inside the mode by
tests/xla_compat/test_surface.py and test_world_groups.py (run by
test_torch_xla.py)."""
import importlib.util
import os
import subprocess
import sys
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _env(**extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "CPU_NUM")) or (
                k.startswith("LAZYTPU_") and k != "LAZYTPU_BIN_DIR"):
            env.pop(k)
    env.update(extra)
    return env


def _run(code, script=None, **env):
    """python -m lazytpu -c code (or the code written to `script` and run
    as a file: spawn's workers import the script's functions)."""
    if script is not None:
        script.write_text(textwrap.dedent(code))
        cmd = [sys.executable, "-m", "lazytpu", str(script)]
    else:
        cmd = [sys.executable, "-m", "lazytpu", "-c", textwrap.dedent(code)]
    p = subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=900,
                       cwd=REPO)
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:],
                                                  p.stderr[-4000:])
    return p.stdout


def test_cpu_num_devices_sets_devices_and_spawn(tmp_path):
    out = _run("""
        import os, sys, tempfile, torch_xla, torch_xla.runtime as xr
        import torch_xla.distributed.xla_multiprocessing as xmp

        def fn(i, d):
            open(os.path.join(d, str(i)), "w").write("%d/%d" % (xr.global_ordinal(),
                                                                 xr.world_size()))

        if __name__ == "__main__":
            d = tempfile.mkdtemp()
            print("COUNT", torch_xla.device_count(), xr.device_type())
            xmp.spawn(fn, args=(d,))
            print("RAN", sorted(open(os.path.join(d, f)).read() for f in os.listdir(d)))
    """, script=tmp_path / "spawn3.py", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="3")
    assert "COUNT 3 CPU" in out
    assert "RAN ['0/3', '1/3', '2/3']" in out
    out = _run("import torch_xla; print('COUNT', torch_xla.device_count())",
               PJRT_DEVICE="CPU")
    assert "COUNT 1" in out                               # torch_xla's CPU default


def _suite():
    spec = importlib.util.spec_from_file_location(
        "xla_suite", os.path.join(REPO, "scripts", "xla_suite.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_suite_runner_counts_outcomes(tmp_path):
    suite = _suite()
    (tmp_path / "test_a.py").write_text(textwrap.dedent("""
        import unittest, torch, torch_xla

        class A(unittest.TestCase):
            def test_pass(self):
                self.assertEqual((torch.ones(2, device="xla") * 2).sum().item(), 4.0)
            def test_fail(self):
                self.assertEqual(1, 2)
            def test_error(self):
                raise KeyError("boom")
            @unittest.skip("no")
            def test_skip(self):
                pass
            def test_sub(self):
                for i in range(2):
                    with self.subTest(i=i):
                        self.assertEqual(i, 0)

        if __name__ == "__main__":
            unittest.main()
    """))
    (tmp_path / "test_script.py").write_text("import sys, torch_xla; sys.exit(3)\n")
    (tmp_path / "test_dies.py").write_text(textwrap.dedent("""
        import unittest
        import torch_xla.no_such_module

        class B(unittest.TestCase):
            def test_x(self):
                pass
            def test_y(self):
                pass
    """))
    res = suite.run_file(str(tmp_path), "test_a.py", {}, 600)["tests"]
    assert res["A.test_pass"][0] == "pass"
    assert res["A.test_fail"][0] == "fail" and "1 != 2" in res["A.test_fail"][1]
    assert res["A.test_error"][0] == "error" and "KeyError" in res["A.test_error"][1]
    assert res["A.test_skip"][0] == "skip"
    assert res["A.test_sub"][0] == "fail" and "subtest" in res["A.test_sub"][1]
    res = suite.run_file(str(tmp_path), "test_script.py", {}, 600)["tests"]
    assert res == {"<script>": ("error", res["<script>"][1])}
    assert res["<script>"][1].startswith("exit 3")
    res = suite.run_file(str(tmp_path), "test_dies.py", {}, 600)["tests"]
    assert set(res) == {"B.test_x", "B.test_y"}
    assert all(o == "error" and "no_such_module" in m for o, m in res.values())


def test_suite_expected_failures_have_reasons():
    suite = _suite()
    expected = suite.load_expected()
    runs = {run for run, _ in suite.FILES}
    for (run, test), (category, reason) in expected.items():
        assert run in runs, "expected failure for a run the suite does not have: " + run
        assert category in ("internals", "gap", "hardware"), (run, test, category)
        assert len(reason) > 20, (run, test)


# the inputs, built alike in the child processes and the test
_NLL_CASES = """
    import json, torch, torch.nn.functional as F
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    x4 = torch.randn(2, 3, 2, 2)
    cases = {
        "float": torch.tensor([0., 3., 1., 2., 2., 0.]),
        "odd": torch.tensor([0., 3.5, 1., -1., 7., float("nan")]),
        "int32": torch.tensor([0, 3, 1, 2, 2, 0], dtype=torch.int32),
        "byte": torch.tensor([0, 3, 1, 2, 2, 0], dtype=torch.uint8),
    }
    t4 = torch.tensor([[[0., 1.], [2., 1.5]], [[1., 0.], [9., 2.]]])
"""

_NLL_TARGETS = _NLL_CASES + """
    def run(d, fallbacks):
        out = {}
        for name, t in cases.items():
            for red in ("mean", "sum", "none"):
                xd = x.to(d).requires_grad_()
                try:
                    l = F.cross_entropy(xd, t.to(d), reduction=red, ignore_index=2)
                    l.sum().backward()
                    out[name + red] = [l.detach().cpu().flatten().tolist(), xd.grad.cpu().tolist()]
                except RuntimeError as e:
                    out[name + red] = str(e).split(chr(10))[0]
        xd = x4.to(d).requires_grad_()
        try:
            l = F.cross_entropy(xd, t4.to(d))
            l.backward()
            out["2d"] = [[l.item()], xd.grad.cpu().flatten().tolist()]
        except RuntimeError as e:
            out["2d"] = str(e).split(chr(10))[0]
        out["fallbacks"] = fallbacks()
        print("OUT" + json.dumps(out))
"""


def _nll_reference(t, C, ignore):
    """torch_xla's reading of a class-index target (a one-hot comparison
    with the classes 0..C-1): values that are no class count as ignored."""
    import torch
    t = t.double()
    ok = (t == t.floor()) & (t >= 0) & (t < C)
    return torch.where(ok, t, torch.full_like(t, ignore)).long()


def test_nll_loss_targets_of_other_dtypes():
    """torch_xla 2.9 takes an NLL / cross-entropy target of any integer or
    floating dtype (pytorch/xla's own tests pass float class indices); in
    compatibility mode lazytpu does too, with torch_xla's meaning. The
    plain device keeps eager's rule (Long, or Byte for nll_loss) and runs a
    Byte target on the device, not on the CPU fallback."""
    import json
    import torch
    import torch.nn.functional as F
    compat = _run(_NLL_TARGETS + """
    import torch_xla, torch_xla.debug.metrics as met
    run(torch_xla.device(), lambda: [n for n in met.counter_names() if n.startswith("aten::")
                                     and n != "aten::_local_scalar_dense"])
    """)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(_NLL_TARGETS + """
    import lazytpu, lazytpu.metrics as lm
    run(lazytpu.device(), lambda: [n for n in lm.counter_names() if n.startswith("aten::")
                                   and n != "aten::_local_scalar_dense"])
    """)], env=_env(), capture_output=True, text=True, timeout=900, cwd=REPO)
    assert p.returncode == 0, p.stderr[-4000:]
    plain = p.stdout
    got_c = json.loads(compat.split("OUT", 1)[1])
    got_p = json.loads(plain.split("OUT", 1)[1])
    assert got_c.pop("fallbacks") == []       # no CPU fallback: all on the device
    # the plain device hands the targets eager refuses to the CPU fallback,
    # which raises eager's error
    assert set(got_p.pop("fallbacks")) <= {"aten::nll_loss_forward", "aten::nll_loss2d_forward"}
    ns = {}
    exec(textwrap.dedent(_NLL_CASES), ns)
    x, x4, cases, t4 = ns["x"], ns["x4"], ns["cases"], ns["t4"]

    def ref(xx, t, **kw):
        xx = xx.clone().requires_grad_()
        l = F.cross_entropy(xx, t, **kw)
        l.sum().backward()
        return [l.detach().flatten().tolist(), xx.grad.tolist()]

    def close(a, b):
        fa, fb = torch.tensor(a[0]), torch.tensor(b[0])
        ga, gb = torch.tensor(a[1]).flatten(), torch.tensor(b[1]).flatten()
        return (torch.allclose(fa, fb, atol=1e-5, equal_nan=True) and
                torch.allclose(ga, gb, atol=1e-5))

    for name, t in cases.items():
        for red in ("mean", "sum", "none"):
            want = ref(x, _nll_reference(t, 4, 2), reduction=red, ignore_index=2)
            assert close(got_c[name + red], want), (name, red, got_c[name + red], want)
            if name == "byte":
                assert close(got_p[name + red], want), (name, red, got_p[name + red])
            else:     # eager refuses them: so does the plain device
                assert "expected target dtype to be Long or Byte" in got_p[name + red]
    want = ref(x4, _nll_reference(t4, 3, -100).reshape(2, 2, 2))
    assert close(got_c["2d"], want), (got_c["2d"], want)
    assert "expected" in got_p["2d"]


# a 3-step SGD loop on the device beside the same loop on the CPU; the
# device's output stays alive over each step boundary. Needs model, ref,
# data, target; prints LOSS <devices> <device loss> <cpu loss> per step.
_SPMD_LOOP = """
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            output = model(data.to("xla"))          # alive across the sync
            loss = nn.functional.cross_entropy(output, target.to("xla"))
            loss.backward()
            opt.step()
            torch_xla.sync()
            ropt.zero_grad()
            rl = nn.functional.cross_entropy(ref(data), target)
            rl.backward()
            ropt.step()
            print("LOSS", xr.global_runtime_device_count(), loss.item(), rl.item())
"""


def _check_spmd_losses(out, devices):
    rows = [l.split() for l in out.splitlines() if l.startswith("LOSS")]
    assert len(rows) == 3 and all(r[1] == str(devices) for r in rows), out
    for r in rows:
        assert abs(float(r[2]) - float(r[3])) <= 1e-4 * max(1.0, abs(float(r[3]))), out


def test_spmd_mesh_of_one_device_trains():
    """SPMD over torch_xla's CPU default of one device (PJRT_DEVICE=CPU): a
    weight sharded on a one-device mesh, the model's output kept alive over
    the step boundary (pytorch/xla's spmd/test_dtensor_integration.py). The
    step runs as the one core's program; losses as on the CPU."""
    out = _run("""
        import torch, torch.nn as nn
        import torch_xla, torch_xla.runtime as xr
        from torch.distributed.tensor import init_device_mesh, Shard, distribute_tensor
        xr.use_spmd()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
        ref = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
        ref.load_state_dict(model.state_dict())
        model.to("xla")
        mesh = init_device_mesh("xla", mesh_shape=(xr.global_runtime_device_count(),))
        distribute_tensor(model[0].weight, mesh, [Shard(0)])
        data = torch.randn(32, 16)
        target = torch.randint(0, 4, (32,))
    """ + _SPMD_LOOP + """
        print("SPEC", torch_xla._XLAC._get_xla_sharding_spec(model[0].weight) != "")
    """, PJRT_DEVICE="CPU")
    _check_spmd_losses(out, 1)
    assert "SPEC True" in out


def test_spmd_kept_output_of_a_contracted_split():
    """The first layer's weight split along its input features over 8 cores
    (pytorch/xla's test_xla_sharding.py test_optimizer_step_with_sharding):
    its product is partial and every core's ReLU reads it whole; the
    model's output stays alive over the step boundary, so that partial
    product is one of the step's results too. Losses as on the CPU."""
    out = _run("""
        import numpy as np, torch, torch.nn as nn
        import torch_xla, torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
        xr.use_spmd()
        n = xr.global_runtime_device_count()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
        ref = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
        ref.load_state_dict(model.state_dict())
        model.to("xla")
        xs.mark_sharding(model[0].weight, xs.Mesh(np.arange(n), (1, n)), (0, 1))
        data = torch.randn(16, 32)
        target = torch.randint(0, 4, (16,))
    """ + _SPMD_LOOP, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="8")
    _check_spmd_losses(out, 8)
