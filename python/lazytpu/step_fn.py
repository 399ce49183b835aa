"""lazytpu.compile_step: a function traced lazily as one step (torch_xla.compile).

    step = lazytpu.compile_step(train_step, full_graph=True, name="train")
    loss = step(x, y)            # mark_step, trace train_step, mark_step
    with lazytpu.compile_step(name="eval"): ...

The pending work is ended first (a step boundary: closures run), the
function is traced op by op as usual, and a step boundary after it compiles
(once per distinct graph, then from the cache) and runs what it traced as
one program: forward, backward and optimizer together.

full_graph=True: nothing may execute while the function is traced. A value
read of a pending value, an op whose output shape depends on values, a CPU
fallback, the cut at LAZYTPU_GRAPH_LIMIT or a step boundary inside raises a
RuntimeError at that point, naming it and the user's line (the core's
execution guard, lt_set_no_execution); what was traced before it still runs
at the closing step boundary, as in torch_xla.

max_different_graphs=N: the function (identified by name and object, so
several wrappers of one function share the count, as in torch_xla) may make
at most N distinct graphs: a call whose graphs (the keys of the graphs its
syncs ran) were never seen before for it counts one more; the (N+1)-th raises
a RuntimeError after the step ran, naming the call, the arguments' shapes of
the new and the first graph and the core's recompilation note.

In the metrics report: counters ``CompiledStep::<name>`` (calls) and
``CompiledStepGraphs::<name>`` (distinct graphs), and a ``== compiled steps
==`` section with one line per new graph (its call, line, arguments). With
LAZYTPU_TRACE each call is a span named after the function.
"""
import functools
import json
import sys
import threading
import weakref

import torch

from . import _C
from .core import _caller, mark_step

__all__ = ["compile_step"]

# the name of the graph a compile_step's step boundary is syncing on this
# thread ("<name>_clear_pending" for the one before the function, as
# torch_xla.compile), None outside them: graph_name()
_syncing = threading.local()


def graph_name():
    """The name of the compile_step graph this thread is syncing, or None."""
    return getattr(_syncing, "name", None)


def _named_mark_step(name):
    _syncing.name = name
    try:
        mark_step()
    finally:
        _syncing.name = None

_LATEST = 2 ** 64 - 1          # synced_graphs(_LATEST): just the latest number
_MAX_KEPT = 4096               # distinct graph signatures remembered per function

_sessions = {}                                  # session id -> _Session
_alive = weakref.WeakValueDictionary()          # session id -> the function


class _Session:
    """The distinct graphs of one function (all its wrappers)."""

    def __init__(self, label):
        self.label = label
        self.calls = 0
        self.graphs = {}        # signature (tuple of graph keys) -> its description


def _session(f, label):
    """torch_xla's session per (name, id(f)); a dead function's id may be
    reused by a new one: its session is dropped then."""
    sid = "%s_%d" % (label, id(f))
    if sid not in _alive:
        _sessions.pop(sid, None)
    try:
        _alive[sid] = f
    except TypeError:           # not weak-referenceable: keep no history across wrappers
        return _Session(label)
    s = _sessions.get(sid)
    if s is None:
        s = _sessions[sid] = _Session(label)
    return s


_SHORT_DTYPE = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16",
                torch.float16: "f16", torch.int64: "i64", torch.int32: "i32",
                torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


def _describe_args(args, kwargs, limit=8):
    """'f32[16, 512], i64[16, 512]': the tensors among the arguments (nested
    lists, tuples, dicts), the first `limit`."""
    out = []

    def walk(x):
        if len(out) > limit:
            return
        if isinstance(x, torch.Tensor):
            out.append("%s[%s]" % (_SHORT_DTYPE.get(x.dtype, str(x.dtype)),
                                   ", ".join(str(d) for d in x.shape)))
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(args)
    walk(kwargs)
    if not out:
        return "no tensor arguments"
    more = ", ..." if len(out) > limit else ""
    return "arguments " + ", ".join(out[:limit]) + more


def _recompile_note(keys):
    """The core's recompilation note about one of `keys` (which input changed
    shape, the cause, the line), or None."""
    try:
        notes = json.loads(_C.metrics_json()).get("notes", {})
    except ValueError:
        return None
    lines = notes.get("recompilation", {}).get("lines", [])
    wanted = ["graph %016x" % k for k in keys]
    for line in reversed(lines):
        if any(w in line for w in wanted):
            return line
    return None


def _name_of(f, name):
    if name is not None:
        return str(name)
    if f is None:
        return "step"
    n = getattr(f, "__name__", None)
    return n if n else type(f).__name__


def compile_step(fn=None, full_graph=False, name=None, max_different_graphs=None,
                 _api="lazytpu.compile_step", _refused=None):
    """fn traced lazily as one step (see the module docstring). Without fn:
    a context manager (``with compile_step(full_graph=True): ...``), a new
    graph count for each ``with``. As a decorator: ``@compile_step`` or
    ``@compile_step(full_graph=True)``."""
    if max_different_graphs is not None and (
            isinstance(max_different_graphs, bool) or not isinstance(max_different_graphs, int)
            or max_different_graphs < 0):
        raise TypeError("%s: max_different_graphs must be a non-negative int or None, got %r"
                        % (_api, max_different_graphs))
    label = _name_of(fn, name)
    session = _session(fn, label) if fn is not None else _Session(label)
    region = _Region(session, label, full_graph, max_different_graphs, _api)
    if fn is None:      # a context manager, or a decorator: @compile_step(full_graph=True)
        region.decorate = functools.partial(compile_step, full_graph=full_graph, name=name,
                                            max_different_graphs=max_different_graphs,
                                            _api=_api, _refused=_refused)
        return region

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        token = region.begin(args, kwargs)
        ok = False
        try:
            out = fn(*args, **kwargs)
            ok = True
        except RuntimeError as e:
            # full_graph's refusal, in the words of the API (_refused first)
            if _refused and full_graph and str(e).startswith(region.owner):
                raise RuntimeError("%s\n%s" % (_refused, e)) from None
            raise
        finally:
            region.end(token, ok)
        return out

    return wrapped


class _Region:
    """The step around the function (or the ``with`` body). Plain methods,
    not a contextlib generator: the user's frame for the step boundaries'
    notes is the first frame outside lazytpu and torch."""

    def __init__(self, session, label, full_graph, limit, api):
        self.session, self.label, self.full_graph, self.limit = session, label, full_graph, limit
        self.api = api
        self.owner = "%s(%s, full_graph=True)" % (api, label)
        self._with = []         # tokens of the open ``with`` blocks

    def begin(self, args, kwargs):
        _named_mark_step(self.label + "_clear_pending")   # the pending work is not the function's
        since, _ = _C.synced_graphs(_LATEST)
        t0 = _C.now_ns() if _C.trace_enabled() else 0
        prev = _C.set_no_execution(self.owner) if self.full_graph else None
        # torch_xla's eager mode (when compatibility mode loaded it) stays
        # off inside: the function is traced as one graph, as in torch_xla
        eager = sys.modules.get("lazytpu.compat.eager")
        quiet = eager.suspended() if eager is not None else None
        if quiet is not None:
            quiet.__enter__()
        return since, t0, prev, quiet, args, kwargs

    def end(self, token, ok):
        since, t0, prev, quiet, args, kwargs = token
        if quiet is not None:
            quiet.__exit__(None, None, None)
        if self.full_graph:
            _C.set_no_execution(prev)
        if t0:
            _C.trace_event(self.label, "compile_step", t0, _C.now_ns() - t0, _C.TRACE_TID_HOST)
        _named_mark_step(self.label)             # compile (or fetch) and run the step
        self.session.calls += 1
        _C.counter_inc("CompiledStep::" + self.label, 1)
        if ok:
            _count_graph(self.session, since, self.limit, self.api, args, kwargs)

    def __call__(self, fn):
        return self.decorate(fn)

    def __enter__(self):
        self._with.append(self.begin((), None))
        return self

    def __exit__(self, exc_type, exc, tb):
        self.end(self._with.pop(), exc_type is None)
        return False


def _count_graph(session, since, limit, api, args, kwargs):
    """Counts this call's graphs (keys synced since `since`) in the session;
    raises when they are new and the session already has `limit` graphs."""
    _, keys = _C.synced_graphs(since)
    sig = tuple(keys)
    if not sig or sig in session.graphs:
        return
    n = len(session.graphs) + 1
    where = _caller(2) or "<unknown line>"
    desc = "graph %d (%s) on call %d at %s, %s" % (
        n, " ".join("%016x" % k for k in sig), session.calls, where,
        _describe_args(args, kwargs or {}))
    if limit is not None and n > limit:
        first = next(iter(session.graphs.values()), None)
        msg = ("Maximum number of different graphs allowed per function exceeded: %d\n"
               "%s(%s) made a new %s" % (limit, api, session.label, desc))
        if first:
            msg += "\nits first was %s" % first
        note = _recompile_note(sig)
        if note:
            msg += "\ncore: " + note
        raise RuntimeError(msg)
    if len(session.graphs) < _MAX_KEPT:
        session.graphs[sig] = desc
    _C.counter_inc("CompiledStepGraphs::" + session.label, 1)
    _C.metrics_note("compiled steps", "%s: %s" % (session.label, desc))
