"""torch_xla 2.9's PT_XLA_DEBUG graph analysis (lazytpu.compat.debug_analysis),
in fresh torch_xla-mode processes: the blocks torch_xla's debug_util.cpp
writes to PT_XLA_DEBUG_FILE, their causes, graph counts and levels, checked
against what torch_xla 2.9 writes for the same program (its format: a
"Compilation Analysis" block and a "Post Compilation Analysis" block per
compile, an "Execution Analysis" block per run from level 2 on)."""
import re
from xla_script import run_xla_script

SCRIPT = """
    import os, sys
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.profiler as xp
    import torch_xla.utils.utils as xu
    import torch_xla.distributed.parallel_loader as pl

    path = os.environ["PT_XLA_DEBUG_FILE"]
    open(path, "w").close()

    def take():
        with open(path) as f:
            text = f.read()
        open(path, "w").close()
        return text

    d = torch_xla.device()
    take()
    a = torch.randn(3, 5, device=d)
    b = (a * 3.5).sum()
    torch_xla.sync()
    print("SYNC", repr(take()))
    print("SYNC2", repr(take()))        # nothing new without a graph
    c = a + 2.5
    print(c.cpu().shape)
    print("READ", repr(take()))
    a2 = a * 7.0
    with xp.StepTrace("train"):
        e = a2 + 1.5
    print("STEPTRACE", repr(take()))

    def prog(t):
        return torch.logsumexp(t, 1)

    f = torch.randn(4, 6, device=d)
    torch_xla.compile(prog, name="mine")(f)
    print("COMPILE", repr(take()))

    loader = pl.MpDeviceLoader(xu.SampleGenerator(
        data=(torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64)), sample_count=3), d)
    for x, y in loader:
        z = x + 100.0
    print("LOADER", repr(take()))

    g = torch.randn(4, 4, device=d)
    comp = torch.compile(lambda t: t * 100, backend="openxla")
    r = comp(g)
    print("DYNAMO", repr(take()))
    assert torch.allclose(r.cpu(), g.cpu() * 100)
    with torch_xla.experimental.eager_mode_context(True):
        h = torch.randn(3, 3, device=d) * 2
        torch_xla.sync()
    print("EAGER", repr(take()))
"""


def _run(tmp_path, **env_extra):
    stdout = run_xla_script(tmp_path, SCRIPT, timeout=600,
                            PT_XLA_DEBUG_FILE=str(tmp_path / "debug.txt"), **env_extra)
    out = {}
    for line in stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag.isupper() and rest.startswith("'"):
            out[tag] = eval(rest)
    return out


def _blocks(text, prefix):
    """[(cause, hash, n_in, n_out, name)] of each `prefix` Analysis block."""
    out = []
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln == prefix + "Analysis: Compilation Cause" or \
                ln == prefix + "Analysis: Execution Cause":
            cause = lines[i + 1].split(":", 1)[1].strip()
            info = {}
            for ln2 in lines[i + 2:]:
                if "Python Frame" in ln2:
                    break
                m = re.match(r".*Analysis:\s+(Graph Name|Graph Hash|Number of Graph Inputs|"
                             r"Number of Graph Outputs): (.+)$", ln2)
                if m:
                    info[m.group(1)] = m.group(2)
            out.append((cause, info["Graph Hash"], int(info["Number of Graph Inputs"]),
                        int(info["Number of Graph Outputs"]), info.get("Graph Name")))
    return out


def comp(text):
    return _blocks(text, "Compilation ")


def execs(text):
    return _blocks(text, "Execution ")


def test_level_2_and_above_writes_compile_and_execution_blocks(tmp_path):
    o = _run(tmp_path, PT_XLA_DEBUG="1")            # level 100
    s = o["SYNC"]
    c, e = comp(s), execs(s)
    # one graph: randn (its seed an input), a*3.5 (the scalar an input), sum
    assert len(c) == 1 and len(e) == 1, s
    assert c[0][0] == e[0][0] == "user torch_xla.sync"
    assert c[0][1] == e[0][1]                       # same graph hash
    assert c[0][3] == 2 and e[0][3] == 2            # a and b
    assert s.count("Post Compilation Analysis: Graph input size: ") == 1
    assert re.search(r"Post Compilation Analysis: Graph output size: 0\.0+\d* GB", s)
    # the frames start at torch_xla.sync and stop after 8 with a ".........." line
    frames = s.split("Compilation Analysis: Python Frame Triggered Execution: \n")[1]
    assert frames.startswith("Compilation Analysis:   sync (")
    assert "torch_xla.py:" in frames.splitlines()[0]
    assert o["SYNC2"] == ""
    # a value read: compiled and run, torch_xla's words
    r = o["READ"]
    assert [x[0] for x in comp(r)] == [
        "most likely user code trying to access tensor value before torch_xla.sync"]
    assert len(execs(r)) == 1
    assert [x[0] for x in execs(o["STEPTRACE"])] == [
        "torch_xla.sync when exiting a profiler StepTrace region"]
    # torch_xla.compile: the pending graph first, then the function's, named
    k = o["COMPILE"]
    assert [(x[0], x[4]) for x in execs(k)] == [
        ("torch_xla.compile clear the pending graph prior calling the target function",
         "mine_clear_pending"), ("torch_xla.compile", "mine")]
    assert [x[4] for x in comp(k)] == ["mine_clear_pending", "mine"]
    # a loader: one compile, one run per batch, same graph (x and 100.0 in)
    ld = o["LOADER"]
    assert len(comp(ld)) == 1 and len(execs(ld)) == 3
    assert {x[0] for x in execs(ld)} == {"torch_xla.sync in parallel loader at step end"}
    assert {(x[1], x[2], x[3]) for x in comp(ld) + execs(ld)} == {(comp(ld)[0][1], 2, 1)}
    # torch.compile(backend="openxla"): the input sync, then the FX graph
    dy = o["DYNAMO"]
    assert [x[0] for x in comp(dy)] == ["torch_xla.sync when dynamo processing input graphs",
                                        "dynamo is compiling a FX graph to HLO"]
    assert [x[0] for x in execs(dy)] == ["torch_xla.sync when dynamo processing input graphs",
                                         "dynamo is executing a compiled program"]
    assert comp(dy)[1][1] == execs(dy)[1][1] and comp(dy)[1][2] == 2   # t and 100
    # eager mode: nothing (torch_xla: "PT_XLA_DEBUG not to output anything")
    assert o["EAGER"] == ""


def test_level_1_writes_compile_blocks_only(tmp_path):
    o = _run(tmp_path, PT_XLA_DEBUG_LEVEL="1")
    assert len(comp(o["SYNC"])) == 1 and execs(o["SYNC"]) == []
    assert "Execution Analysis" not in "".join(o.values())
    assert len(comp(o["LOADER"])) == 1
    assert [x[4] for x in comp(o["COMPILE"])] == ["mine_clear_pending", "mine"]


def test_off_writes_nothing(tmp_path):
    o = _run(tmp_path, PT_XLA_DEBUG="0")
    assert not any(o.values())
