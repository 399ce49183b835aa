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
