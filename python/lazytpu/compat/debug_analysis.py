"""torch_xla's PT_XLA_DEBUG graph analysis on lazytpu (torch_xla mode).

With PT_XLA_DEBUG=1 (level 100) or PT_XLA_DEBUG_LEVEL=N, torch_xla 2.9
writes, for every graph it compiles, a "Compilation Analysis" block (why,
the graph's hash, inputs and outputs, the Python frames) followed by a "Post
Compilation Analysis" block (sizes in GB) and, from level 2 on, an "Execution
Analysis" block for every graph it runs; to PT_XLA_DEBUG_FILE (appended) or
stderr, on the process of local ordinal 0, nothing in eager mode (except a
torch.compile program's run). This module writes the same blocks from
lazytpu's graph events (lazytpu._C.set_graph_hook: a compile-cache miss,
then each program queued), in torch_xla's words:

    user torch_xla.sync                          torch_xla.sync / xm.mark_step
    torch_xla.sync in parallel loader at step end    MpDeviceLoader's step
    torch_xla.sync when exiting a profiler StepTrace region
    torch_xla.compile clear the pending graph prior calling the target function
    torch_xla.compile                            the function's graph
    torch_xla.sync when dynamo processing input graphs
    dynamo is compiling a FX graph to HLO        torch.compile's recording
    dynamo is executing a compiled program       torch.compile's replay
    most likely user code trying to access tensor value before torch_xla.sync

The graph hash is lazytpu's graph key; the inputs are the program's
parameters (device data and non-constant scalars); "Compiled program size"
is "Unknown" (lazytpu generates no code; torch_xla prints the same when
XLA does not say).
"""
import os
import sys

from lazytpu import _C
from lazytpu import step_fn
from lazytpu.compat import eager

_LINE = "=" * 80
_DASH = "-" * 80
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # .../lazytpu
_SITE = os.path.join(_PKG, "compat", "xla_site")


def debug_level(env=os.environ):
    """torch_xla's GetDebugLevel: PT_XLA_DEBUG_LEVEL, else 100 when
    PT_XLA_DEBUG is true, else -1 (off)."""
    enabled = env.get("PT_XLA_DEBUG", "").strip().lower() in ("1", "true", "yes", "on", "y")
    try:
        level = int(env.get("PT_XLA_DEBUG_LEVEL", "-1").strip() or "-1")
    except ValueError:
        level = -1
    return 100 if level == -1 and enabled else level


def _internal(path):
    """lazytpu's own frames (not its torch_xla tree)."""
    p = os.path.abspath(path)
    return p.startswith(_PKG + os.sep) and not p.startswith(_SITE + os.sep)


def _frames(f):
    """(function, file, line) from f outwards, from the first frame that
    is not lazytpu's own: the innermost ones are lazytpu's implementation of
    the torch_xla call (torch_xla's is C++, not in its Python stack)."""
    while f is not None and _internal(f.f_code.co_filename):
        f = f.f_back
    out = []
    while f is not None:
        out.append((f.f_code.co_name, f.f_code.co_filename, f.f_lineno))
        f = f.f_back
    return out


def _raw(f):
    """(function, file) of every frame from f outwards (lazytpu's too)."""
    out = []
    while f is not None:
        out.append((f.f_code.co_name, os.path.abspath(f.f_code.co_filename)))
        f = f.f_back
    return out


def _is(frame, function, path_tail):
    return frame[0] == function and frame[1].endswith(path_tail)


def _cause(kind, cause, replay, raw):
    """torch_xla's words for why this graph compiles or runs."""
    if replay:
        return ("dynamo is executing a compiled program" if kind == _C.GRAPH_EXECUTE
                else "dynamo is compiling a FX graph to HLO")
    if cause == _C.SYNC_LOADER_STEP:
        return "torch_xla.sync in parallel loader at step end"
    if cause in (_C.SYNC_MARK_STEP, _C.SYNC_OPTIMIZER_STEP):
        for fr in raw:
            if _is(fr, "begin", os.path.join("lazytpu", "step_fn.py")):
                return ("torch_xla.compile clear the pending graph prior calling the "
                        "target function")
            if _is(fr, "end", os.path.join("lazytpu", "step_fn.py")):
                return "torch_xla.compile"
            if _is(fr, "__exit__", os.path.join("lazytpu", "debug.py")) or \
                    _is(fr, "__exit__", os.path.join("torch_xla", "debug", "profiler.py")):
                return "torch_xla.sync when exiting a profiler StepTrace region"
        return "user torch_xla.sync"
    if cause == _C.SYNC_EXPLICIT and any(
            _is(fr, "_record", os.path.join("lazytpu", "compile.py")) for fr in raw):
        return "torch_xla.sync when dynamo processing input graphs"
    return "most likely user code trying to access tensor value before torch_xla.sync"


def _gb(n):
    return "%f" % (n / 1024.0 / 1024.0 / 1024.0)


class Analysis:
    """The hook: formats torch_xla's blocks for each graph event."""

    def __init__(self, level, path=None, max_frames=8):
        self.level, self.path, self.max_frames = level, path, max_frames

    def _write(self, text):
        if self.path:
            with open(self.path, "a") as f:
                f.write(text)
        else:
            sys.stderr.write(text)

    def __call__(self, ev):
        kind, core, cause, replay, key, n_params, n_outputs, in_b, out_b, alias_b, \
            scratch_b, _kernels = ev
        if eager.is_enabled() and not (replay and kind == _C.GRAPH_EXECUTE):
            return                     # nothing for eager mode's own programs
        if self.level <= 0 or (self.level <= 1 and kind != _C.GRAPH_COMPILE):
            return
        f = sys._getframe(1)
        frames = _frames(f)
        if not frames:
            return                     # no Python frame (another thread): as torch_xla
        prefix = ("Compilation Analysis: " if kind == _C.GRAPH_COMPILE
                  else "Execution Analysis: ")
        out = ["", prefix + _LINE,
               prefix + ("Compilation Cause" if kind == _C.GRAPH_COMPILE
                         else "Execution Cause"),
               prefix + "  " + _cause(kind, cause, replay, _raw(f)),
               prefix + "Graph Info: "]
        name = step_fn.graph_name()
        if name:
            out.append(prefix + "  Graph Name: " + name)
        out += [prefix + "  Graph Hash: %016x" % key,
                prefix + "  Number of Graph Inputs: %d" % n_params,
                prefix + "  Number of Graph Outputs: %d" % n_outputs,
                prefix + "Python Frame Triggered Execution: "]
        for i, (fn, file, line) in enumerate(frames):
            if i >= self.max_frames:
                out.append(prefix + "  ..........")
                break
            out.append(prefix + "  %s (%s:%d)" % (fn, file, line))
        out += [prefix + _DASH, prefix + _LINE]
        if kind == _C.GRAPH_COMPILE and not eager.is_enabled():
            p = "Post Compilation Analysis: "
            out += ["", p + _LINE,
                    p + "Graph input size: %s GB" % _gb(in_b),
                    p + "Graph output size: %s GB" % _gb(out_b),
                    p + "Aliased Input size: %s GB" % _gb(alias_b),
                    p + "Intermediate tensor size: %s GB" % _gb(scratch_b),
                    p + "Compiled program size: Unknown  GB",
                    p + _DASH, p + _LINE]
        self._write("\n".join(out) + "\n")


def install(env=os.environ):
    """Registers the analysis when PT_XLA_DEBUG / PT_XLA_DEBUG_LEVEL ask for
    it, on the process of local ordinal 0 (as torch_xla's
    PJRT_LOCAL_PROCESS_RANK check). Returns the hook or None."""
    level = debug_level(env)
    if level <= 0:
        return None
    local = _C.option("LAZYTPU_LOCAL_ORDINAL")
    if local is None:
        local = _C.option("LAZYTPU_ORDINAL")
    if local:
        return None
    try:
        max_frames = int(env.get("PT_XLA_DEBUG_MAX_FRAME", "8"))
    except ValueError:
        max_frames = 8
    hook = Analysis(level, env.get("PT_XLA_DEBUG_FILE") or None, max_frames)
    _C.set_graph_hook(hook)
    return hook
