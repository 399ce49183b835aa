"""torch_xla programs on lazytpu: the compatibility mode as a user turns it
on (`lazytpu-run`, `python -m lazytpu`), in fresh processes. The behaviour
of each torch_xla name is tested inside the mode by tests/xla_compat/
(run from here)."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(REPO, "tests", "xla_compat", "scripts")
STUBS = os.path.join(REPO, "tests", "python", "support")
BIN = os.path.dirname(sys.executable)
LAUNCHER = os.path.join(BIN, "lazytpu-run")


def run(cmd, env_extra=None, timeout=900, cwd=None, pythonpath=None):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # the scripts compare with eager CPU in f32; compat mode's TPU-faithful default
    # matmul level (one bf16 pass) would differ, so they ask for f32 (issue 26)
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    env.update(env_extra or {})
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO)


def ok(p):
    assert p.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
        p.returncode, p.stdout[-6000:], p.stderr[-6000:])
    return p


def test_names_behave_inside_compat_mode():
    """tests/xla_compat: every mapped name, collectives on 4 processes, DDP
    over the 'xla' backend."""
    p = run([sys.executable, "-m", "lazytpu", "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/xla_compat"], timeout=1500)
    ok(p)
    assert " passed" in p.stdout and "failed" not in p.stdout


@pytest.mark.parametrize("cores", [8, 1])
def test_seed_style_script_unchanged(cores):
    """xmp.spawn + pl.ParallelLoader + xm.optimizer_step + XLA_USE_BF16=1 +
    met.metrics_report(), on 8 cores and on one."""
    cmd = [LAUNCHER, "python", os.path.join(SCRIPTS, "seed_train.py")]
    if cores == 1:
        cmd += ["--num_cores", "1"]
    p = ok(run(cmd, {"XLA_USE_BF16": "1"}))
    final = [l for l in p.stdout.splitlines() if l.startswith("FINAL")]
    assert len(final) == 1, p.stdout[-3000:]
    assert "replicas_equal=1 world=%d bf16=1" % cores in final[0]
    assert "Metric: CompileTime" in p.stdout and "Counter: CachedCompile" in p.stdout
    assert "== host reads ==" in p.stdout          # the loss read in the closure


def test_launcher_with_workers_runs_the_script_per_core():
    p = ok(run([LAUNCHER, "-n", "2", "python", "-c", textwrap.dedent("""
        import sys, torch, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
        t = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xm.xla_device()))
        # one write per line: the workers share the pipe (atomic below PIPE_BUF),
        # print() would write its pieces separately under PYTHONUNBUFFERED
        sys.stdout.write("rank %d %d %s\\n" % (xr.global_ordinal(), xr.world_size(),
                                                t.cpu().item()))
    """)]))
    lines = sorted(l for l in p.stdout.splitlines() if l.startswith("rank"))
    assert lines == ["rank 0 2 2.0", "rank 1 2 2.0"]


def test_not_active_outside_the_launcher():
    p = ok(run([sys.executable, "-c", textwrap.dedent("""
        import importlib.metadata as md, importlib.util, torch, lazytpu
        print(importlib.util.find_spec("torch_xla") is None)
        try:
            md.version("torch_xla"); print("meta")
        except md.PackageNotFoundError:
            print("nometa")
        print(torch.ones(1, device="lazytpu").device.type)
    """)]))
    assert p.stdout.split() == ["True", "nometa", "lazytpu"]


def test_never_shadows_a_real_torch_xla(tmp_path):
    fake = tmp_path / "site"
    (fake / "torch_xla").mkdir(parents=True)
    (fake / "torch_xla" / "__init__.py").write_text("REAL = True\n")
    code = "import torch_xla; print(getattr(torch_xla, 'REAL', False), torch_xla.__file__)"
    p = ok(run([LAUNCHER, "python", "-c", code], pythonpath=str(fake)))
    assert p.stdout.split()[0] == "True"
    assert "a real torch_xla is installed" in p.stderr and "--xla-compat=force" in p.stderr
    p = ok(run([LAUNCHER, "--xla-compat=force", "python", "-c", code], pythonpath=str(fake)))
    assert p.stdout.split()[0] == "False" and "compat/xla_site/torch_xla" in p.stdout
    p = ok(run([sys.executable, "-m", "lazytpu", "--xla-compat=off", "-c",
                "import importlib.util; print(importlib.util.find_spec('torch_xla') is None)"]))
    assert p.stdout.split() == ["True"]


SMALL = textwrap.dedent("""
    import torch, torch_xla, torch_xla.core.xla_model as xm, lazytpu
    d = xm.xla_device()
    x = torch.ones(4, device=d)
    for i in range(6):
        x = x * 2
        xm.mark_step()
        v = x.sum().item()
    print("BF16", int(lazytpu._C.bf16_mode()), "DEV", xm.xla_device_hw(d))
""")


def test_environment_variables(tmp_path):
    graphs, metrics = tmp_path / "graphs.txt", tmp_path / "metrics.txt"
    p = ok(run([sys.executable, "-m", "lazytpu", "-c", SMALL],
               {"XLA_USE_BF16": "1", "PT_XLA_DEBUG": "1", "XLA_FLAGS": "--xla_dump_to=/tmp/x",
                "XLA_SAVE_TENSORS_FILE": str(graphs), "XLA_METRICS_FILE": str(metrics),
                "PJRT_DEVICE": "TPU", "XLA_IR_DEBUG": "1"}))
    assert "BF16 1 DEV TPU" in p.stdout
    assert "XLA_FLAGS=--xla_dump_to=/tmp/x is ignored" in p.stderr
    assert "host reads in the last 4 steps" in p.stderr          # PT_XLA_DEBUG warnings
    assert "graph " in graphs.read_text() and "mul(" in graphs.read_text()
    assert "Counter: MarkStep" in metrics.read_text()
    p = ok(run([sys.executable, "-m", "lazytpu", "-c", SMALL], {"PJRT_DEVICE": "CPU"}))
    assert "DEV CPU" in p.stdout
    p = run([sys.executable, "-m", "lazytpu", "-c", SMALL], {"PJRT_DEVICE": "CUDA"})
    assert p.returncode != 0 and "PJRT_DEVICE=CUDA is not available" in p.stderr
    dot = tmp_path / "g"
    ok(run([sys.executable, "-m", "lazytpu", "-c", SMALL],
           {"XLA_SAVE_TENSORS_FILE": str(dot), "XLA_SAVE_TENSORS_FMT": "dot"}))
    assert "digraph" in (tmp_path / "g.dot").read_text()


PYTORCH_XLA = os.environ.get("LAZYTPU_PYTORCH_XLA_TESTS")


@pytest.mark.skipif(not PYTORCH_XLA, reason="set LAZYTPU_PYTORCH_XLA_TESTS to the test/ "
                    "directory of a pytorch/xla checkout to run its training scripts "
                    "(they are not redistributed here)")
@pytest.mark.parametrize("cores", [8, 1])
def test_pytorch_xla_mnist_script_unchanged(cores):
    cmd = [LAUNCHER, "python", os.path.join(PYTORCH_XLA, "test_train_mp_mnist.py"),
           "--fake_data", "--num_epochs", "1", "--batch_size", "64", "--metrics_debug"]
    if cores == 1:
        cmd += ["--num_cores", "1"]
    p = ok(run(cmd, pythonpath=STUBS, timeout=1500, cwd=PYTORCH_XLA))
    assert "Max Accuracy: 100.00%" in p.stdout
    assert "Metric: CompileTime" in p.stdout
