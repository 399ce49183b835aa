"""lazytpu.metrics: the torch_xla-style metrics API.

Counters are monotonic integers (CachedCompile, UncachedCompile, MarkStep,
``lazytpu::<op>`` per traced op, ``aten::<op>`` per CPU fallback, ...);
metrics are sample series (CompileTime, ExecuteTime, TransferToDeviceTime, ...).
"""
from . import _C

__all__ = ["metrics_report", "short_metrics_report", "counter_names",
           "counter_value", "metric_names", "metric_data", "clear_all",
           "clear_counters", "clear_metrics", "executed_fallback_ops",
           "metrics_json"]


def metrics_report():
    """The full text report: metrics, counters, then the analysis sections:
    "== recompilation ==" (which input changed shape, the sync cause and the
    user's line), "== warnings ==" (with LAZYTPU_DEBUG) and "== fallback =="
    (per CPU-fallback op: calls, time, call sites, hint). See
    docs/troubleshooting.md."""
    return _C.metrics_report()


def metrics_json():
    return _C.metrics_json()


def _names(s):
    return [n for n in (s or "").split("\n") if n]


def counter_names():
    return _names(_C.counter_names())


def counter_value(name):
    """Value of a counter (None if it never existed, like torch_xla)."""
    if name not in counter_names():
        return None
    return _C.counter_value(name)


def metric_names():
    return _names(_C.metric_names())


def metric_data(name):
    """(total_samples, accumulator) of a metric, or None if unknown."""
    return _C.metric_data(name)


def clear_all():
    """Resets every counter and metric to zero."""
    _C.clear_all()


clear_counters = clear_all
clear_metrics = clear_all


def executed_fallback_ops():
    """Names of aten ops that ran on the CPU fallback (counter > 0).
    ``aten::_local_scalar_dense`` counts .item() calls (torch_xla's name)
    but is no fallback in lazytpu: the host reads section lists them."""
    return [n for n in counter_names()
            if n.startswith("aten::") and n not in _NOT_FALLBACK
            and _C.counter_value(n) > 0]


_NOT_FALLBACK = {"aten::_local_scalar_dense"}


_SHORT = ("CompileTime", "ExecuteTime", "TransferToDeviceTime",
          "TransferFromDeviceTime")


def short_metrics_report(counter_names=None, metric_names=None):
    """A few lines: compile/execute time totals, compiles, steps and the
    fallback counters."""
    lines = []
    for m in (metric_names or _SHORT):
        d = _C.metric_data(m)
        if d is not None and d[0] > 0:
            lines.append("Metric: %s  TotalSamples: %d  Accumulator: %s"
                         % (m, d[0], _fmt_ns(d[1])))
    wanted = counter_names or ("CachedCompile", "UncachedCompile", "MarkStep")
    for c in wanted:
        v = _C.counter_value(c)
        if v:
            lines.append("Counter: %s  Value: %d" % (c, v))
    for c in executed_fallback_ops():
        lines.append("Counter: %s  Value: %d" % (c, _C.counter_value(c)))
    return "\n".join(lines) + ("\n" if lines else "")


def _fmt_ns(ns):
    ns = float(ns)
    if ns >= 1e9:
        return "%.3fs" % (ns / 1e9)
    if ns >= 1e6:
        return "%.3fms" % (ns / 1e6)
    return "%.3fus" % (ns / 1e3)
