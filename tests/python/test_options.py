"""The options table (base/options.def) from Python and over the tree:
docs/env.md is what scripts/gen_env_doc.py makes of it, no code reads a
LAZYTPU_* variable except through it, every LAZYTPU_* name in the code is a
row, and Python sees the values the C core reads."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import lazytpu
from lazytpu import _C

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE_DIRS = ("lazy", "spawn", "metrics", "backend", "base", "include", "python")
CODE_EXT = (".c", ".h", ".cpp", ".def", ".py")
# preprocessor and CMake names, not environment variables
BUILD_NAMES = {"LAZYTPU_H", "LAZYTPU_SPMD_H", "LAZYTPU_EVENTS_H", "LAZYTPU_CACHE_H", "LAZYTPU_HAVE_MPI", "LAZYTPU_LSAN_KEEP_PLUGINS",
               "LAZYTPU_MPI"}


def _gen():
    spec = importlib.util.spec_from_file_location(
        "gen_env_doc", os.path.join(REPO, "scripts", "gen_env_doc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _code_files():
    for d in CODE_DIRS:
        for root, dirs, files in os.walk(os.path.join(REPO, d)):
            dirs[:] = [x for x in dirs if x not in ("_lib", "__pycache__")]
            for f in files:
                if f.endswith(CODE_EXT):
                    p = os.path.join(root, f)
                    with open(p, encoding="utf-8") as fh:
                        yield os.path.relpath(p, REPO), fh.read()


def _table_names():
    return {row["name"] for row in _C.options()}


def test_env_doc_is_generated():
    with open(os.path.join(REPO, "docs", "env.md")) as f:
        have = f.read()
    want = _gen().render(_C.options())
    assert have == want, ("docs/env.md differs from base/options.def: run "
                          "PYTHONPATH=python python scripts/gen_env_doc.py")


def test_env_doc_lists_every_row():
    with open(os.path.join(REPO, "docs", "env.md")) as f:
        doc = f.read()
    for row in _C.options():
        assert "| `%s`" % row["name"] in doc


def test_no_getenv_outside_the_table():
    c_read = re.compile(r'getenv\s*\(\s*"LAZYTPU_')
    # reads in Python: os.environ.get("LAZYTPU_..."), os.getenv(...),
    # os.environ["LAZYTPU_..."] not assigned, "LAZYTPU_..." in os.environ
    py_read = re.compile(r'(os\.environ\.get|os\.getenv)\s*\(\s*["\']LAZYTPU_'
                         r'|os\.environ\[\s*["\']LAZYTPU_\w+["\']\s*\](?!\s*=[^=])'
                         r'|["\']LAZYTPU_\w+["\']\s+(not\s+)?in\s+os\.environ')
    bad = []
    for path, text in _code_files():
        pat = py_read if path.endswith(".py") else c_read
        for i, line in enumerate(text.splitlines(), 1):
            if pat.search(line):
                bad.append("%s:%d: %s" % (path, i, line.strip()))
    assert not bad, "LAZYTPU_* read outside base/options.c:\n" + "\n".join(bad)


def test_every_name_in_the_code_is_a_row():
    names = _table_names()
    bad = []
    for path, text in _code_files():
        for m in re.finditer(r"LAZYTPU_[A-Z0-9_]*[A-Z0-9]", text):
            if m.group(0) not in names and m.group(0) not in BUILD_NAMES:
                bad.append("%s: %s" % (path, m.group(0)))
    assert not bad, "LAZYTPU_* names missing from base/options.def:\n" + "\n".join(sorted(set(bad)))


def test_table_rows():
    rows = _C.options()
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))
    for r in rows:
        assert r["type"] in ("bool", "int", "size", "seconds", "string", "enum"), r
        assert r["when"] in ("init", "process", "call"), r
        assert r["who"] in ("user", "launcher"), r
        assert r["doc"] and "|" not in r["doc"], r     # one markdown cell
        if r["type"] == "enum":
            assert r["default"] in r["range"].split("|"), r
    with pytest.raises(KeyError, match="LAZYTPU_NO_SUCH"):
        _C.option("LAZYTPU_NO_SUCH")


def test_python_reads_what_c_reads(monkeypatch):
    # per-call options follow the environment at once
    monkeypatch.setenv("LAZYTPU_CONV_ALGO", "im2col")
    assert _C.option("LAZYTPU_CONV_ALGO") == "im2col"
    monkeypatch.setenv("LAZYTPU_CONV_ALGO", "fast")          # malformed: the default
    assert _C.option("LAZYTPU_CONV_ALGO") == "auto"
    assert _C.option_state("LAZYTPU_CONV_ALGO") == -1
    monkeypatch.delenv("LAZYTPU_CONV_ALGO")
    assert _C.option_state("LAZYTPU_CONV_ALGO") == 0
    monkeypatch.setenv("LAZYTPU_COLLECTIVE_TIMEOUT", "2.5")
    assert _C.option("LAZYTPU_COLLECTIVE_TIMEOUT") == 2.5
    monkeypatch.setenv("LAZYTPU_SHM_BYTES", "4K")
    assert _C.option("LAZYTPU_SHM_BYTES") == 4096
    # the world's place, as lazytpu.world reports it
    monkeypatch.setenv("LAZYTPU_ORDINAL", "3")
    monkeypatch.setenv("LAZYTPU_WORLD_SIZE", "4")
    monkeypatch.setenv("LAZYTPU_NUM_HOSTS", "2")
    monkeypatch.delenv("LAZYTPU_LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("LAZYTPU_LOCAL_ORDINAL", raising=False)
    assert (lazytpu.get_ordinal(), lazytpu.world_size()) == (3, 4)
    assert lazytpu.world.local_world_size() == 2
    assert lazytpu.get_local_ordinal() == 3
    monkeypatch.setenv("LAZYTPU_WORLD_SIZE", "four")
    assert lazytpu.world_size() == 1
    # init-time options: the value lt_init took, not today's environment
    monkeypatch.setenv("LAZYTPU_GRAPH_LIMIT", "17")
    assert _C.option("LAZYTPU_GRAPH_LIMIT") != 17


@pytest.mark.parametrize("name,value,msg", [
    ("LAZYTPU_GRAPH_LIMIT", "lots", "LAZYTPU_GRAPH_LIMIT=lots: expected an integer >= 1"),
    ("LAZYTPU_CONV_ALGO", "fast", "LAZYTPU_CONV_ALGO=fast: expected auto, winograd or im2col"),
])
def test_malformed_variable_stops_import(name, value, msg):
    env = dict(os.environ, **{name: value})
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    p = subprocess.run([sys.executable, "-c", "import torch, lazytpu"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode != 0
    assert msg in p.stderr
