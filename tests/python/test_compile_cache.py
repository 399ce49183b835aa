"""The persistent compile cache (lazy/pcache.c): a second process running the
same step loads the programs the first one compiled, computes the same values,
and compiles nothing; read-only mode writes nothing; another graph or other
compile options miss; a damaged file is ignored and compiled again; the
directory is fixed once the compile cache is in use (torch_xla's
initialize_cache raises AssertionError, lazytpu's RuntimeError).

Every run is a fresh Python process (run_step / run_xla_script) over a cache
directory under tmp_path.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from xla_script import run_xla_script

COUNTERS = ("PersistentCacheHit", "PersistentCacheMiss", "PersistentCacheDeserializeFailure",
            "UncachedCompile", "CachedCompile")

# One training step of a small MLP (forward, backward, SGD update) on the
# lazytpu device; prints the counters, the loss and the updated weights.
STEP = """
import json, sys, torch, lazytpu
import lazytpu.metrics as met
width = int(sys.argv[1]) if len(sys.argv) > 1 else 16
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(width, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
x, y = torch.randn(8, width), torch.randint(0, 4, (8,))
d = lazytpu.device()
md = m.to(d)
opt = torch.optim.SGD(md.parameters(), lr=0.1, momentum=0.9)
for _ in range(2):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(md(x.to(d)), y.to(d))
    loss.backward()
    opt.step()
    lazytpu.mark_step()
out = {"loss": loss.item(), "w": [p.detach().cpu().flatten().tolist() for p in md.parameters()]}
out["counters"] = {n: met.counter_value(n) for n in %r}
out["compile_time"] = met.metric_data("CompileTime")
out["info"] = lazytpu.compile_cache_info()
print("RESULT " + json.dumps(out))
""" % (COUNTERS,)


def _eager_step(width=16):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(width, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, width), torch.randint(0, 4, (8,))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    return loss.item(), [p.detach().flatten() for p in m.parameters()]


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XLA_", "PT_XLA", "PJRT_"))
           and not (k.startswith("LAZYTPU_") and k != "LAZYTPU_BIN_DIR")}
    env.update(extra)
    return env


def run_step(tmp_path, cache, *args, check=True, **env):
    """Runs STEP in a fresh process with LAZYTPU_COMPILE_CACHE_DIR=cache."""
    script = tmp_path / "step.py"
    script.write_text(STEP)
    extra = {"LAZYTPU_COMPILE_CACHE_DIR": str(cache)} if cache is not None else {}
    extra.update(env)
    p = subprocess.run([sys.executable, str(script), *map(str, args)], env=_clean_env(**extra),
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    if not check:
        return p
    assert p.returncode == 0, p.stderr[-4000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _files(cache):
    return sorted(f for f in os.listdir(cache) if f.endswith(".ltp")) if os.path.isdir(cache) else []


def _assert_matches_eager(r, width=16):
    loss, ws = _eager_step(width)
    assert abs(r["loss"] - loss) <= 1e-5 * max(1.0, abs(loss))
    for got, want in zip(r["w"], ws):
        torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-6)


def test_second_process_loads_and_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    first = run_step(tmp_path, cache)
    c1 = first["counters"]
    assert c1["PersistentCacheHit"] is None
    assert c1["UncachedCompile"] and c1["PersistentCacheMiss"] == c1["UncachedCompile"]
    assert len(_files(cache)) == c1["UncachedCompile"]
    assert first["info"]["path"] == str(cache) and first["info"]["initialized"]
    _assert_matches_eager(first)

    second = run_step(tmp_path, cache)
    c2 = second["counters"]
    assert c2["PersistentCacheHit"] == c1["UncachedCompile"]
    assert c2["PersistentCacheMiss"] is None and c2["UncachedCompile"] is None
    assert c2["PersistentCacheDeserializeFailure"] is None
    assert second["compile_time"] is None or second["compile_time"][0] == 0
    # a loaded program computes exactly what the compiled one did
    assert second["loss"] == first["loss"] and second["w"] == first["w"]
    _assert_matches_eager(second)
    assert len(_files(cache)) == c1["UncachedCompile"]


def test_readonly_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    r = run_step(tmp_path, cache, LAZYTPU_COMPILE_CACHE_READONLY="1")
    assert r["counters"]["PersistentCacheMiss"] == r["counters"]["UncachedCompile"] > 0
    assert not cache.exists()                 # not even created
    _assert_matches_eager(r)
    run_step(tmp_path, cache)                 # a writer fills it
    before = {f: os.stat(cache / f).st_mtime_ns for f in os.listdir(cache)}
    r = run_step(tmp_path, cache, "20", LAZYTPU_COMPILE_CACHE_READONLY="1")   # other graphs
    assert r["counters"]["PersistentCacheMiss"] > 0 and r["counters"]["UncachedCompile"] > 0
    assert {f: os.stat(cache / f).st_mtime_ns for f in os.listdir(cache)} == before
    r = run_step(tmp_path, cache, LAZYTPU_COMPILE_CACHE_READONLY="1")         # same graphs
    assert r["counters"]["UncachedCompile"] is None and r["counters"]["PersistentCacheHit"] > 0


def test_changed_graph_or_options_miss(tmp_path):
    cache = tmp_path / "cache"
    n = run_step(tmp_path, cache)["counters"]["UncachedCompile"]
    r = run_step(tmp_path, cache, "20")       # the first layer's graphs change shape
    assert r["counters"]["PersistentCacheMiss"] == r["counters"]["UncachedCompile"] > 0
    assert (r["counters"]["PersistentCacheHit"] or 0) < n     # the unchanged graphs may hit
    _assert_matches_eager(r, 20)
    assert len(_files(cache)) == n + r["counters"]["UncachedCompile"]
    # the same graphs compiled with other options are other programs
    r = run_step(tmp_path, cache, LAZYTPU_HFUSE="0", LAZYTPU_GEMM_EPILOGUE="0")
    assert r["counters"]["PersistentCacheHit"] is None and r["counters"]["UncachedCompile"] == n
    _assert_matches_eager(r)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_file_is_ignored_and_recompiled(tmp_path, damage):
    cache = tmp_path / "cache"
    n = run_step(tmp_path, cache)["counters"]["UncachedCompile"]
    files = _files(cache)
    victim = cache / files[0]
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x40
        victim.write_bytes(bytes(b))
    else:
        victim.write_bytes(b"")
    r = run_step(tmp_path, cache)
    c = r["counters"]
    assert c["PersistentCacheDeserializeFailure"] == 1 and c["UncachedCompile"] == 1
    assert c["PersistentCacheHit"] == n - 1
    _assert_matches_eager(r)
    assert victim.read_bytes() != b"" and _files(cache) == files   # stored again
    r = run_step(tmp_path, cache)
    assert r["counters"]["PersistentCacheHit"] == n and r["counters"]["UncachedCompile"] is None


def test_file_of_another_graph_under_the_key_is_refused(tmp_path):
    """A file whose record is whole but belongs to another graph (as a
    64-bit key collision would give) is not run: the signature check
    refuses it and the graph compiles."""
    cache = tmp_path / "cache"
    run_step(tmp_path, cache)
    a = set(_files(cache))
    run_step(tmp_path, cache, "20")
    b = sorted(set(_files(cache)) - a)
    a = sorted(a)
    # put a width-20 program under each width-16 name (same config id)
    cfg = {f.split("-")[1] for f in a + b}
    assert len(cfg) == 1
    for k, f in enumerate(a):
        (cache / f).write_bytes((cache / b[k % len(b)]).read_bytes())
    r = run_step(tmp_path, cache)
    c = r["counters"]
    assert c["PersistentCacheHit"] is None
    assert c["PersistentCacheDeserializeFailure"] == len(a) == c["UncachedCompile"]
    _assert_matches_eager(r)


def test_concurrent_writers_leave_whole_files(tmp_path):
    cache = tmp_path / "cache"
    script = tmp_path / "step.py"
    script.write_text(STEP)
    env = _clean_env(LAZYTPU_COMPILE_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    assert not [f for f in os.listdir(cache) if not f.endswith(".ltp")]   # no temp left
    r = run_step(tmp_path, cache)
    assert r["counters"]["UncachedCompile"] is None
    assert r["counters"]["PersistentCacheDeserializeFailure"] is None
    _assert_matches_eager(r)


def test_set_dir_after_first_step_raises(tmp_path):
    code = textwrap.dedent("""
        import torch, lazytpu
        d = lazytpu.device()
        x = torch.ones(3).to(d)
        lazytpu.set_compile_cache_dir(%r)         # a transfer only: still accepted
        (x + 1).cpu()
        try:
            lazytpu.set_compile_cache_dir(%r)
        except RuntimeError as e:
            print("REFUSED", e)
        print(lazytpu.compile_cache_info())
    """ % (str(tmp_path / "a"), str(tmp_path / "b")))
    p = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "REFUSED" in p.stdout and "already been initialized" in p.stdout
    assert (tmp_path / "a").is_dir() and not (tmp_path / "b").exists()
    assert _files(tmp_path / "a")


def test_uncreatable_dir_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    code = ("import lazytpu\ntry:\n    lazytpu.set_compile_cache_dir(%r)\n"
            "except RuntimeError as e:\n    print('REFUSED', e)\n" % str(tmp_path / "file"))
    p = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "REFUSED" in p.stdout and "cannot create" in p.stdout


# ---- torch_xla 2.9's API (pytorch/xla test/test_persistent_cache.py's checks)

XLA_SINGLE = """
import os, sys, torch, torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr
xr.initialize_cache(sys.argv[1], readonly=sys.argv[2] == "1")
t = torch.randn(16)
xt = t.to('xla')
s = xt + xt
torch_xla.sync()
assert torch.allclose(s.cpu(), t + t)
print("COUNTERS", met.counter_value("PersistentCacheMiss"), met.counter_value("PersistentCacheHit"),
      met.counter_value("UncachedCompile"), xr.get_num_cached_compilation_graph())
try:
    xr.initialize_cache(sys.argv[1])
except AssertionError as e:
    print("ASSERT", e)
"""


def _xla_counters(out):
    line = [ln for ln in out.splitlines() if ln.startswith("COUNTERS")][-1]
    return [None if v == "None" else int(v) for v in line.split()[1:]]


def test_torch_xla_initialize_cache_across_processes(tmp_path):
    cache = tmp_path / "xla-cache"
    out = run_xla_script(tmp_path, XLA_SINGLE, args=(str(cache), "0"))
    assert _xla_counters(out) == [1, None, 1, 1]
    assert "ASSERT Computation cache has already been initialized" in out
    assert len(_files(cache)) == 1
    out = run_xla_script(tmp_path, XLA_SINGLE, args=(str(cache), "0"))
    assert _xla_counters(out) == [None, 1, None, 1]
    # readonly: loads, writes nothing
    out = run_xla_script(tmp_path, XLA_SINGLE, args=(str(tmp_path / "ro"), "1"))
    assert _xla_counters(out) == [1, None, 1, 1] and not (tmp_path / "ro").exists()


XLA_MP = """
import os, sys, torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

def _mp_fn(rank, tmpdir, want):
    xr.initialize_cache(os.path.join(tmpdir, str(rank)))
    t = torch.randn(16)
    s = t.to('xla') + t.to('xla')
    torch_xla.sync()
    assert torch.allclose(s.cpu(), t + t)
    got = (met.counter_value("PersistentCacheMiss"), met.counter_value("PersistentCacheHit"))
    assert got == want, (rank, got, want)

if __name__ == "__main__":
    want = (1, None) if sys.argv[2] == "cold" else (None, 1)
    xmp.spawn(_mp_fn, args=(sys.argv[1], want))
    print("MP OK")
"""


def test_torch_xla_spawned_workers(tmp_path):
    cache = tmp_path / "mp-cache"
    for phase in ("cold", "warm"):
        out = run_xla_script(tmp_path, XLA_MP, args=(str(cache), phase), CPU_NUM_DEVICES="2")
        assert "MP OK" in out
    assert sorted(os.listdir(cache)) == ["0", "1"]


XLA_SPMD = """
import sys, numpy as np, torch, torch_xla
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
xr.initialize_cache(sys.argv[1])
xr.use_spmd()
torch.manual_seed(0)
t, w = torch.randn(16, 8), torch.randn(8, 4)
xt, xw = t.to('xla'), w.to('xla')
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n,))
xs.mark_sharding(xt, mesh, (0, None))
s = (xt @ xw).relu() + xt.sum()
torch_xla.sync()
torch.testing.assert_close(s.cpu(), (t @ w).relu() + t.sum(), rtol=1e-5, atol=1e-5)
print("COUNTERS", met.counter_value("PersistentCacheMiss"), met.counter_value("PersistentCacheHit"),
      met.counter_value("UncachedCompile"))
"""


@pytest.mark.parametrize("partition", ["0", "1"])
def test_torch_xla_spmd_sharded(tmp_path, partition):
    cache = tmp_path / "spmd-cache"
    env = dict(CPU_NUM_DEVICES="4", LAZYTPU_NUM_CORES="4", LAZYTPU_SPMD_PARTITION=partition)
    miss, hit, unc = _xla_counters(run_xla_script(tmp_path, XLA_SPMD, args=(str(cache),), **env))
    assert miss and miss == unc and hit is None
    assert _xla_counters(run_xla_script(tmp_path, XLA_SPMD, args=(str(cache),), **env)) == \
        [None, miss, None]
