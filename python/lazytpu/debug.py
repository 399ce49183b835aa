"""lazytpu.debug: why is my step slow? (docs/troubleshooting.md)

    lazytpu.debug.set_debug(1)          step warnings on stderr (= LAZYTPU_DEBUG=1)
    lazytpu.debug.take_warnings()       warning lines since the last call
    lazytpu.debug.fallback_report()     CPU fallbacks: op, calls, time, frames, hint
    lazytpu.debug.graph_text(loss)      the pending graph of some tensors (nothing runs)
    lazytpu.debug.graph_dot(loss)       the same graph in Graphviz DOT
    lazytpu.debug.plot_steps(trace, 'steps.png')
                                        step times from a LAZYTPU_TRACE file, with
                                        compiles, fallbacks and value reads marked
    lazytpu.debug.trace_span(name)      a span of your own in the LAZYTPU_TRACE file
    lazytpu.debug.tensor_info(t)        shape, dtype, storage dtype, pending
    lazytpu.debug.live_tensors(core)    device tensors alive on a core

Environment (read when lazytpu is imported): LAZYTPU_DEBUG=1 / PT_XLA_DEBUG=1
(warnings), LAZYTPU_SAVE_GRAPHS=<file> (every synced graph, text or .dot),
LAZYTPU_TRACE=<file.json> (Chrome/Perfetto trace events).
"""
import contextlib
import json
import os

import torch

from . import _C
from . import core
from .profiler import start_server  # noqa: F401  (torch_xla's name; lazytpu.profiler)

__all__ = ["set_debug", "debug_enabled", "take_warnings", "fallback_report",
           "graph_text", "graph_dot", "trace_enabled", "trace_path",
           "flush_trace", "trace_span", "step_timeline", "plot_steps",
           "live_tensors", "step_report", "tensor_info", "caller"]

_STEP_CAUSES = tuple(_C.SYNC_CAUSE_NAMES[c] for c in (
    _C.SYNC_MARK_STEP, _C.SYNC_OPTIMIZER_STEP, _C.SYNC_LOADER_STEP))
_VALUE_READ = _C.SYNC_CAUSE_NAMES[_C.SYNC_VALUE_READ]


# ------------------------------------------------------------- warnings

def set_debug(mode=1):
    """Turns the step warnings on or off: 0/False off, 1/True warnings on
    stderr (what LAZYTPU_DEBUG=1 does), 2 collect them quietly (read them
    with take_warnings()). Returns whether warnings were on before."""
    was = bool(_C.debug_enabled())
    _C.debug_set(int(mode))
    return was


def debug_enabled():
    """True when the step warnings are on (LAZYTPU_DEBUG=1, PT_XLA_DEBUG=1
    or set_debug)."""
    return bool(_C.debug_enabled())


def take_warnings():
    """The "lazytpu: warning: ..." lines emitted since the last call (a list
    of str, [] if none). Warnings are evaluated at step boundaries, over the
    last 4 steps, after a warm-up of 2 steps, while debug is on."""
    return [ln for ln in (_C.take_warnings() or "").split("\n") if ln]


def fallback_report():
    """The report's "== fallback ==" section ("" when nothing fell back):
    per aten op the calls, total time, the first 3 Python frames it was
    called from, and a hint naming the native alternative."""
    return _C.fallback_report() or ""


# ---------------------------------------------------------- graph dumps

def _device_tensors(tensors, what):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise ValueError("lazytpu.debug.%s: give at least one device tensor" % what)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.device.type not in core.DEVICE_TYPES:
            raise ValueError("lazytpu.debug.%s: argument %d is %s, not a lazytpu "
                             "device tensor" % (what, i, _describe(t)))
    return list(tensors)


def _describe(t):
    if isinstance(t, torch.Tensor):
        return "a %s tensor" % t.device
    return "a %s" % type(t).__name__


def graph_text(*tensors):
    """The graph that syncing these tensors would compile and run, as text:
    "graph <key>: N nodes, P params, O outputs (struct <key>, core C)", then one line
    per node ("%5 = add(%3, %4) f32[64, 256]") with "# param j" and
    "# output k" marks. Nothing is executed. Accepts tensors or one list."""
    ts = _device_tensors(tensors, "graph_text")
    with torch.no_grad():
        return torch.ops.lazytpu.graph_text(ts)


def graph_dot(*tensors):
    """The same graph as graph_text, in Graphviz DOT ("digraph G {...}");
    render with `dot -Tsvg`."""
    ts = _device_tensors(tensors, "graph_dot")
    with torch.no_grad():
        return torch.ops.lazytpu.graph_dot(ts)


# --------------------------------------------------------------- tracing

def trace_enabled():
    """True when LAZYTPU_TRACE was set when lazytpu was imported."""
    return bool(_C.trace_enabled())


def trace_path():
    """The trace file this process writes (LAZYTPU_TRACE with the ordinal
    substituted, as the C side does), or None when tracing is off."""
    p = _C.option("LAZYTPU_TRACE")
    if not p or not trace_enabled():
        return None
    ordinal = _C.option("LAZYTPU_ORDINAL")
    world = _C.option("LAZYTPU_WORLD_SIZE")
    if "{ordinal}" in p:
        return p.replace("{ordinal}", str(ordinal), 1)
    if "%d" in p:
        return p.replace("%d", str(ordinal), 1)
    if world > 1:
        head, tail = os.path.split(p)
        root, ext = os.path.splitext(tail)
        return os.path.join(head, "%s.%d%s" % (root, ordinal, ext) if ext
                            else "%s.%d" % (tail, ordinal))
    return p


def flush_trace():
    """Writes the buffered trace events: the file is then valid JSON (it is
    also flushed at exit)."""
    _C.trace_flush()


@contextlib.contextmanager
def trace_span(name, cat="user"):
    """A span of your own on the trace's host thread:
        with lazytpu.debug.trace_span("augment"): ...
    Costs nothing when LAZYTPU_TRACE is not set."""
    if not _C.trace_enabled():
        yield
        return
    t0 = _C.now_ns()
    try:
        yield
    finally:
        _C.trace_event(str(name), str(cat), t0, _C.now_ns() - t0, _C.TRACE_TID_HOST)


class Trace:
    """A named span in the trace (LAZYTPU_TRACE), as a context manager or
    decorator: ``with Trace("fwd"): ...``. Extra keyword arguments are
    accepted (torch_xla's annotations) and shown in the span's name."""

    def __init__(self, name, **kwargs):
        self.name = str(name)
        if kwargs:
            self.name += " " + " ".join("%s=%s" % kv for kv in sorted(kwargs.items()))
        self._t0 = None

    def __enter__(self):
        self._t0 = _C.now_ns() if _C.trace_enabled() else None
        return self

    def __exit__(self, *exc):
        if self._t0 is not None:
            _C.trace_event(self.name, "user", self._t0, _C.now_ns() - self._t0, _C.TRACE_TID_HOST)
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with Trace(self.name):
                return fn(*args, **kwargs)
        wrapped.__name__ = getattr(fn, "__name__", "traced")
        return wrapped


class StepTrace(Trace):
    """A Trace for a whole training step: ends the step (mark_step) on exit,
    like torch_xla's StepTrace."""

    def __init__(self, name, step_num=None, **kwargs):
        if step_num is not None:
            kwargs["step_num"] = step_num
        super().__init__(name, **kwargs)

    def __exit__(self, *exc):
        from .core import mark_step
        if exc[0] is None:
            mark_step()
        return super().__exit__(*exc)


def trace_me(scope):
    """Decorator: every call of the function is a span named `scope`."""
    return Trace(scope)


# ------------------------------------------------------------ step plots

def _load_events(source):
    """Trace events from a path, JSON text, a parsed trace or an event list."""
    if source is None:
        path = trace_path()
        if path is None:
            raise ValueError("lazytpu.debug: no trace: run with LAZYTPU_TRACE=<file.json> "
                             "(set before importing lazytpu) or pass the trace file")
        flush_trace()
        source = path
    if isinstance(source, (bytes, bytearray)):
        source = source.decode()
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if isinstance(source, str):
        if source.lstrip().startswith(("{", "[")):
            data = json.loads(source)
        else:
            if source == trace_path():
                flush_trace()
            with open(source) as f:
                data = json.load(f)
    else:
        data = source
    if isinstance(data, dict) and "traceEvents" in data:
        return data["traceEvents"]
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and ("metrics" in data or "counters" in data):
        raise ValueError(
            "lazytpu.debug: this is a metrics JSON (lazytpu.metrics.metrics_json()), which "
            "holds totals, not steps; run with LAZYTPU_TRACE=<file.json> and pass that file")
    raise ValueError("lazytpu.debug: not a LAZYTPU_TRACE file (no 'traceEvents')")


def step_timeline(source=None, core=None):
    """Per-step data from a LAZYTPU_TRACE trace (a path, JSON text, the parsed
    dict, or None for this process's own trace).

    A step ends with a sync whose cause is mark_step, optimizer_step or
    loader_step on `core` (default: the core with the most steps). Each step
    is a dict: step, core, start_us, end_us, wall_ms (host time from the previous
    step's end to this one's), sync_ms, compiles, compile_ms, execute_ms
    (device time of the core in the step's window), value_reads (syncs caused
    by .item()/.cpu()/print), fallbacks (aten op names), loader_wait_ms."""
    events = [e for e in _load_events(source) if e.get("ph") == "X"]
    syncs = []
    for e in events:
        if e.get("name") == "sync":
            a = e.get("args") or {}
            syncs.append((float(e["ts"]), float(e.get("dur", 0)), a.get("cause", ""),
                          int(a.get("core", 0))))
    steps = [s for s in syncs if s[2] in _STEP_CAUSES]
    if not steps:
        return []
    if core is None:
        counts = {}
        for s in steps:
            counts[s[3]] = counts.get(s[3], 0) + 1
        core = max(sorted(counts), key=lambda c: counts[c])
    steps = sorted((s for s in steps if s[3] == core), key=lambda s: s[0])
    if not steps:
        return []
    first_ts = min(float(e["ts"]) for e in events)
    out = []
    prev_end = first_ts
    for i, (ts, dur, cause, _c) in enumerate(steps):
        end = ts + dur
        out.append({"step": i, "core": core, "start_us": prev_end, "end_us": end,
                    "wall_ms": (end - prev_end) / 1e3, "sync_ms": dur / 1e3,
                    "cause": cause, "compiles": 0, "compile_ms": 0.0,
                    "execute_ms": 0.0, "value_reads": 0, "fallbacks": [],
                    "loader_wait_ms": 0.0})
        prev_end = end
    starts = [s["start_us"] for s in out]

    def step_of(t):
        # the step whose window (start, end] holds t; None after the last
        lo, hi = 0, len(out) - 1
        if t > out[-1]["end_us"]:
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] < t:
                lo = mid
            else:
                hi = mid - 1
        return out[lo]

    for e in events:
        name, cat = e.get("name"), e.get("cat", "")
        t, d = float(e["ts"]), float(e.get("dur", 0))
        s = step_of(t)
        if s is None:
            continue
        if name == "compile":
            s["compiles"] += 1
            s["compile_ms"] += d / 1e3
        elif name == "execute" and e.get("tid") == core:
            s["execute_ms"] += d / 1e3
        elif name == "sync" and (e.get("args") or {}).get("cause") == _VALUE_READ:
            s["value_reads"] += 1
        elif cat == "fallback":
            s["fallbacks"].append(name)
        elif cat == "loader":
            s["loader_wait_ms"] += d / 1e3
    return out


def plot_steps(source=None, path="steps.png", core=None, title=None):
    """Draws the step time of each step to `path` (PNG, matplotlib's Agg
    backend; pyplot's state is not touched) and returns step_timeline().

    `source` is a LAZYTPU_TRACE file (path, JSON text or parsed dict), or
    None for this process's own trace (flushed first). Bars are the wall
    time per step with its compile time in red and input waits in grey; the
    line is device execute time; markers show steps that compiled (red
    triangle), ran CPU fallbacks (orange square) or read values (blue dot).
    A metrics JSON only has totals and is refused with a clear error."""
    steps = step_timeline(source, core)
    if not steps:
        raise ValueError("lazytpu.debug.plot_steps: the trace has no step boundary "
                         "(mark_step, optimizer_step or a loader step)")
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.ticker import MaxNLocator

    x = [s["step"] for s in steps]
    wall = [s["wall_ms"] for s in steps]
    comp = [min(s["compile_ms"], s["wall_ms"]) for s in steps]
    wait = [min(s["loader_wait_ms"], max(s["wall_ms"] - c, 0.0))
            for s, c in zip(steps, comp)]
    rest = [max(w - c - q, 0.0) for w, c, q in zip(wall, comp, wait)]
    fig = Figure(figsize=(max(6.0, min(16.0, 0.12 * len(steps) + 5)), 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(x, rest, bottom=[c + q for c, q in zip(comp, wait)], color="#4c72b0",
           label="step wall time", width=0.8)
    ax.bar(x, comp, color="#d62728", label="compile", width=0.8)
    if any(wait):
        ax.bar(x, wait, bottom=comp, color="#9e9e9e", label="input wait", width=0.8)
    ax.plot(x, [s["execute_ms"] for s in steps], color="#2ca02c", linewidth=1.2,
            marker=".", markersize=3, label="execute (core %d)" % steps[0]["core"])
    top = max(wall) if wall else 1.0
    marks = (("compiles", "^", "#d62728", "compiled", 1.04),
             ("fallbacks", "s", "#ff7f0e", "CPU fallback", 1.10),
             ("value_reads", "o", "#1f77b4", "value read", 1.16))
    for key, mk, col, lab, lift in marks:
        xs = [s["step"] for s in steps if s[key]]
        if xs:
            ax.scatter(xs, [top * lift] * len(xs), marker=mk, color=col, s=22,
                       label=lab, zorder=3)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    n_comp = sum(s["compiles"] for s in steps)
    n_fb = sum(len(s["fallbacks"]) for s in steps)
    n_rd = sum(s["value_reads"] for s in steps)
    ax.set_title(title or "lazytpu steps: %d steps, %d compiles, %d fallbacks, "
                 "%d value reads" % (len(steps), n_comp, n_fb, n_rd), fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, ncol=7,
              frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return steps


# ---------------------------------------------------------- introspection

def live_tensors(core=0):
    """Number of live device tensors on a core (leak checks)."""
    return _C.live_tensors(core)


def step_report():
    keys = ("MarkStep", "UncachedCompile", "CachedCompile")
    return {k: _C.counter_value(k) for k in keys}


def tensor_info(t):
    """A dict describing a device tensor, from the C core."""
    s = torch.ops.lazytpu.tensor_info(t)
    out = {}
    for part in s.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def caller():
    """The user frame the shim records for fallbacks and value reads
    ("file.py:LINE in function")."""
    return _C.caller()
