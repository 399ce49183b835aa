"""lazytpu.metrics: the torch_xla-style metrics API.

Counters are monotonic integers (CachedCompile, UncachedCompile, MarkStep,
``lazytpu::<op>`` per traced op, ``aten::<op>`` per CPU fallback, ...);
metrics are sample series (CompileTime, ExecuteTime, TransferToDeviceTime, ...).

In torch_xla compatibility mode the names are torch_xla's where they mean
the same thing: ``xla::<op>`` for the traced-op counters, CreateXlaTensor /
DestroyXlaTensor for the device tensors made and freed. Every function here
takes and returns the names of the mode the process runs in.
"""
from . import _C

__all__ = ["metrics_report", "short_metrics_report", "counter_names",
           "counter_value", "metric_names", "metric_data", "metric_samples",
           "clear_all", "clear_counters", "clear_metrics", "executed_fallback_ops",
           "metrics_json"]

_COMPAT = bool(_C.xla_compat())
# lazytpu name prefix or name -> torch_xla's, in compatibility mode
_RENAME = {"CreateLtTensor": "CreateXlaTensor", "DestroyLtTensor": "DestroyXlaTensor"}
_UNNAME = {v: k for k, v in _RENAME.items()}


def _user(name):
    """The name a counter has in this mode."""
    if not _COMPAT:
        return name
    if name.startswith("lazytpu::"):
        return "xla::" + name[len("lazytpu::"):]
    return _RENAME.get(name, name)


def _core(name):
    """The core's name of a counter named in this mode."""
    if not _COMPAT:
        return name
    if name.startswith("xla::"):
        return "lazytpu::" + name[len("xla::"):]
    return _UNNAME.get(name, name)


def _user_text(text):
    if not _COMPAT:
        return text
    text = text.replace("Counter: lazytpu::", "Counter: xla::")
    for a, b in _RENAME.items():
        text = text.replace("Counter: %s\n" % a, "Counter: %s\n" % b)
    return text


def metrics_report():
    """The full text report: metrics, counters, then the analysis sections:
    "== recompilation ==" (which input changed shape, the sync cause and the
    user's line), "== warnings ==" (with LAZYTPU_DEBUG) and "== fallback =="
    (per CPU-fallback op: calls, time, call sites, hint). See
    docs/troubleshooting.md."""
    return _user_text(_C.metrics_report())


def metrics_json():
    return _C.metrics_json()


def _names(s):
    return [n for n in (s or "").split("\n") if n]


def counter_names():
    """Names of the counters with a value (cleared counters are gone, as in
    torch_xla)."""
    return [_user(n) for n in _names(_C.counter_names()) if _C.counter_value(n)]


def counter_value(name):
    """Value of a counter (None if it has none, like torch_xla)."""
    v = _C.counter_value(_core(name))
    return v if v else None


def metric_names():
    """Names of the metrics with samples."""
    return [n for n in _names(_C.metric_names()) if (_C.metric_data(n) or (0,))[0]]


def metric_data(name):
    """(total_samples, accumulator) of a metric, or None if it has none."""
    d = _C.metric_data(name)
    return d if d and d[0] else None


def metric_samples(name):
    """The kept samples of a metric, [(time_ns, value), ...] oldest first
    (the newest 1024), or None if it has none."""
    d = metric_data(name)
    return _C.metric_samples(name) if d else None


def clear_all():
    """Resets every counter and metric (and the analysis notes)."""
    _C.clear_all()


def clear_counters():
    """Resets the counters only."""
    _C.clear_counters()


def clear_metrics():
    """Resets the metrics only."""
    _C.clear_metrics()


def executed_fallback_ops(include_scalar_reads=False):
    """Names of aten ops that ran on the CPU fallback (counter > 0).
    ``aten::_local_scalar_dense`` counts .item() calls (torch_xla's name):
    no fallback in lazytpu (the host reads section lists them), listed only
    with include_scalar_reads (torch_xla counts it as one)."""
    return [n for n in counter_names()
            if n.startswith("aten::") and (include_scalar_reads or n not in _NOT_FALLBACK)]


_NOT_FALLBACK = {"aten::_local_scalar_dense"}


_SHORT = ("CompileTime", "ExecuteTime", "TransferToDeviceTime",
          "TransferFromDeviceTime")


def short_metrics_report(counter_names=None, metric_names=None,
                         include_scalar_reads=False):
    """A few lines: compile/execute time totals, compiles, steps and the
    fallback counters (``aten::_local_scalar_dense`` too with
    include_scalar_reads)."""
    lines = []
    for m in (metric_names or _SHORT):
        d = metric_data(m)
        if d is not None:
            lines.append("Metric: %s  TotalSamples: %d  Accumulator: %s"
                         % (m, d[0], _fmt_ns(d[1])))
    wanted = counter_names or ("CachedCompile", "UncachedCompile", "MarkStep")
    fallbacks = executed_fallback_ops(include_scalar_reads)
    for c in list(wanted) + [f for f in fallbacks if f not in wanted]:
        v = counter_value(c)
        if v:
            lines.append("Counter: %s  Value: %d" % (c, v))
    return "\n".join(lines) + ("\n" if lines else "")


def _fmt_ns(ns):
    ns = float(ns)
    if ns >= 1e9:
        return "%.3fs" % (ns / 1e9)
    if ns >= 1e6:
        return "%.3fms" % (ns / 1e6)
    return "%.3fus" % (ns / 1e3)
