"""Spawned workers run with the parent's process context: a script that
parses sys.argv at module level (argparse at the top) is re-executed in
every worker (functions and classes defined in it are pickled by
reference), so each worker must see the parent's sys.argv, sys.path and
working directory before the script runs again, as with multiprocessing's
spawn. Checked for lazytpu.spawn from `python script.py`, `python -m
pkg.module`, `lazytpu-run python script.py` (the script's own spawn starts
the workers) and `lazytpu-run -n N python script.py`, and for Lightning's
Trainer(devices=8) with accelerator="lazytpu" and with accelerator="tpu"
(torch_xla compatibility mode, Lightning's own XLAStrategy).

Each case runs the script in a fresh interpreter whose working directory
is a temporary directory (not the repository), with arguments that the
script requires.
"""
import ast
import os
import shutil
import subprocess
import sys

import pytest
import torch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(REPO, "tests", "python", "scripts")
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "lazytpu-run")


def run(cmd, cwd, timeout=600):
    """Runs cmd with this tree's lazytpu (and nothing of the test's
    environment that would change where workers start)."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    p = subprocess.run(cmd, env=env, cwd=str(cwd), capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
        p.returncode, p.stdout[-4000:], p.stderr[-6000:])
    return p


def worker_lines(out, n):
    """{ordinal: (sys.argv, cwd, tag, sys.path[0])} written by the workers."""
    got = {}
    with open(out) as f:
        for line in f:
            k, rest = line.rstrip("\n").split("\t", 1)
            got[int(k)] = ast.literal_eval(rest)
    assert sorted(got) == list(range(n)), got
    return got


def parent_line(stdout):
    line = [ln for ln in stdout.splitlines() if ln.startswith("OK ")]
    assert line, stdout
    return ast.literal_eval(line[-1][3:])


def test_spawn_workers_get_argv_cwd_and_path(tmp_path):
    """python spawn_argv.py OUT --tag T: the script parses a required
    positional and a required option at module level; both workers load it
    again with the same arguments and see the parent's cwd and sys.path[0]
    (the script's directory)."""
    script = os.path.join(SCRIPTS, "spawn_argv.py")
    out = tmp_path / "workers.txt"
    p = run([sys.executable, script, str(out), "--tag", "t1"], cwd=tmp_path)
    argv, cwd, tag, path0 = parent_line(p.stdout)
    assert argv == [script, str(out), "--tag", "t1"] and tag == "t1"
    assert cwd == str(tmp_path) and path0 == SCRIPTS
    for k, v in worker_lines(out, 2).items():
        assert v == (argv, cwd, tag, path0), (k, v)


def test_spawn_workers_relative_paths_resolve_in_the_parents_cwd(tmp_path):
    """A relative output path and a relative script path (as typed in a shell
    in that directory) mean the same file in every worker."""
    shutil.copy(os.path.join(SCRIPTS, "spawn_argv.py"), tmp_path / "s.py")
    run([sys.executable, "s.py", "rel.txt", "--tag", "rel", "--nprocs", "3"], cwd=tmp_path)
    got = worker_lines(tmp_path / "rel.txt", 3)
    for v in got.values():
        assert v[0] == ["s.py", "rel.txt", "--tag", "rel", "--nprocs", "3"]
        assert v[1] == str(tmp_path) and v[2] == "rel"


def test_spawn_from_python_dash_m_module(tmp_path):
    """python -m pkg.main OUT --tag T: the workers load pkg.main as a module
    of its package (its relative import works) with the parent's argv."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("VALUE = 'from-helper'\n")
    src = open(os.path.join(SCRIPTS, "spawn_argv.py")).read()
    src = src.replace("import lazytpu  # noqa: E402",
                      "import lazytpu  # noqa: E402\nfrom .helper import VALUE  # noqa: E402")
    src = src.replace("ARGS.tag, sys.path[0])))\n\n\nif", "ARGS.tag + VALUE, sys.path[0])))\n\n\nif")
    (pkg / "main.py").write_text(src)
    out = tmp_path / "m.txt"
    p = run([sys.executable, "-m", "pkg.main", str(out), "--tag", "m"], cwd=tmp_path)
    argv, cwd, _, _ = parent_line(p.stdout)
    assert argv[1:] == [str(out), "--tag", "m"]
    for v in worker_lines(out, 2).values():
        assert v[0] == argv and v[1] == str(tmp_path) and v[2] == "mfrom-helper", v


@pytest.mark.parametrize("workers", [None, 2], ids=["script-spawns", "launcher-n2"])
def test_lazytpu_run_python_script_args(tmp_path, workers):
    """lazytpu-run python script.py ARGS (the script's spawn starts the
    workers) and lazytpu-run -n 2 python script.py ARGS (every process is a
    worker and runs the script itself)."""
    script = os.path.join(SCRIPTS, "spawn_argv.py")
    out = tmp_path / "lr.txt"
    cmd = [LAUNCHER] + (["-n", str(workers)] if workers else []) + \
        ["python", script, str(out), "--tag", "lr"]
    run(cmd, cwd=tmp_path)
    got = worker_lines(out, 2)
    for v in got.values():
        assert v[0] == [script, str(out), "--tag", "lr"], v
        assert v[1] == str(tmp_path) and v[2] == "lr"


@pytest.mark.parametrize("accelerator", ["lazytpu", "tpu"])
def test_lightning_eight_cores_script_parses_argv_at_module_level(tmp_path, accelerator):
    """Trainer(accelerator=..., devices=8) in a script whose argparse (a
    required positional and a required option) runs at import: all 8
    workers re-execute it with the parent's argv and train on the device
    ("lazytpu" through lazytpu.lightning's strategy; "tpu" through
    Lightning's XLAStrategy under `python -m lazytpu`, i.e. xmp.spawn)."""
    pytest.importorskip("lightning", reason="lightning is not installed in this "
                        "environment (scripts/bootstrap.sh installs it)")
    script = os.path.join(SCRIPTS, "lightning_argv.py")
    out = tmp_path / "result.pt"
    args = [script, accelerator, str(out), "--steps", "2"]
    cmd = [sys.executable] + (["-m", "lazytpu"] if accelerator == "tpu" else []) + args
    p = run(cmd, cwd=tmp_path, timeout=900)
    assert "DONE" in p.stdout
    result = torch.load(out, weights_only=False)
    assert result["strategy"] == ("LazyTPUStrategy" if accelerator == "lazytpu"
                                  else "XLAStrategy")
    want_dev = "lazytpu" if accelerator == "lazytpu" else "xla"
    for k in range(8):
        rep = torch.load("%s.rank%d" % (out, k), weights_only=False)
        assert rep["argv"] == args, (k, rep["argv"])
        assert rep["cwd"] == str(tmp_path)
        assert rep["args"] == {"accelerator": accelerator, "out": str(out), "steps": 2}
        assert rep["device"] == want_dev, (k, rep["device"])
