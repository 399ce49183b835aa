"""scripts/check_layers.py: the C core's parts depend on each other one way
(base <- metrics <- spawn <- lazy, lazy -> spawn through the collective
kernels only), checked on this tree, and the checker catches include and
call cycles in small made-up trees (objects compiled here with cc)."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def write(root, files):
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)


def compile_tree(root, objdir, sources):
    """Compiles root/<src>.c to objdir/<src>.o (the layout check_layers
    reads with --objects)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    for rel in sources:
        out = os.path.join(objdir, rel[:-2] + ".o")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run([cc, "-c", os.path.join(root, rel), "-o", out], check=True)


def test_tree_includes_one_way():
    r = run("--root", ROOT, "--no-calls")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check_layers: ok" in r.stdout


def test_tree_calls_one_way():
    build = os.environ.get("LAZYTPU_BIN_DIR", os.path.join(ROOT, "build"))
    if not os.path.isdir(os.path.join(build, "CMakeFiles", "lazytpu_core.dir")):
        pytest.skip("no CMake build of the core at " + build)
    r = run("--root", ROOT, "--build", build)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = int(r.stdout.split(" include and ")[1].split()[0])
    assert calls > 0          # the objects were read: metrics -> base etc.


def test_public_header_is_self_contained():
    with open(os.path.join(ROOT, "include", "lazytpu.h")) as f:
        text = f.read()
    assert "ops.def" not in "".join(l for l in text.splitlines() if l.lstrip().startswith("#"))


def test_include_cycle_found(tmp_path):
    write(tmp_path, {
        "base/b.h": "int b(void);\n",
        "spawn/w.h": '#include "d.h"\n',          # spawn -> lazy
        "lazy/d.h": '#include "w.h"\n',           # lazy -> spawn outside collective.c
    })
    r = run("--root", str(tmp_path), "--no-calls")
    assert r.returncode == 1, r.stdout
    assert "layer violation spawn -> lazy: spawn/w.h:1" in r.stdout
    assert "layer violation lazy -> spawn: lazy/d.h:1" in r.stdout
    assert "cycle: lazy -> spawn -> lazy" in r.stdout


def test_base_includes_nothing(tmp_path):
    write(tmp_path, {"metrics/m.h": "int m;\n", "base/e.c": '#include "m.h"\n'})
    r = run("--root", str(tmp_path), "--no-calls")
    assert r.returncode == 1
    assert "layer violation base -> metrics: base/e.c:1" in r.stdout


def test_public_header_including_internal_refused(tmp_path):
    write(tmp_path, {"lazy/ops.def": "", "include/api.h": '#include "../lazy/ops.def"\n'})
    r = run("--root", str(tmp_path), "--no-calls")
    assert r.returncode == 1
    assert "layer violation include -> lazy: include/api.h:1" in r.stdout


def test_call_cycle_found(tmp_path):
    src = tmp_path / "src"
    write(src, {
        "lazy/sync.c": "int world_size(void);\nint lazy_dtype(void) { return world_size(); }\n",
        "spawn/world.c": "int lazy_dtype(void);\nint world_size(void) { return lazy_dtype(); }\n",
    })
    compile_tree(src, tmp_path / "obj", ["lazy/sync.c", "spawn/world.c"])
    r = run("--root", str(src), "--objects", str(tmp_path / "obj"))
    assert r.returncode == 1, r.stdout
    assert "layer violation spawn -> lazy: spawn/world.c: calls lazy_dtype (lazy/sync.c)" in r.stdout
    assert "layer violation lazy -> spawn: lazy/sync.c: calls world_size (spawn/world.c)" in r.stdout
    assert "cycle: lazy -> spawn -> lazy" in r.stdout


def test_calls_down_and_through_collectives_pass(tmp_path):
    src = tmp_path / "src"
    write(src, {
        "base/error.c": "int set_error(int s) { return s; }\n",
        "metrics/report.c": "int set_error(int);\nint report(void) { return set_error(1); }\n",
        "spawn/world.c": "int report(void);\nint world_size(void) { return report(); }\n",
        "lazy/kernels/collective.c": "int world_size(void);\nint coll(void) { return world_size(); }\n",
        "lazy/fault.c": "int coll(void);\nint fault(void) { return coll(); }\n",
    })
    objs = ["base/error.c", "metrics/report.c", "spawn/world.c",
            "lazy/kernels/collective.c", "lazy/fault.c"]
    compile_tree(src, tmp_path / "obj", objs)
    r = run("--root", str(src), "--objects", str(tmp_path / "obj"))
    assert r.returncode == 0, r.stdout
    assert "0 include and 3 call edges" in r.stdout
