"""torch_xla.debug.metrics (``met``) on lazytpu.metrics, with torch_xla's
names (xla::<op> counters) and return values: metric_data gives
(total samples, accumulator, [(time_ns, value), ...]); a ``.item()``
(``aten::_local_scalar_dense``) counts as a fallback op, as in torch_xla."""
from lazytpu import metrics as _m
from lazytpu.metrics import (clear_all, clear_counters, clear_metrics,  # noqa: F401
                             counter_names, counter_value, metric_names, metrics_report)


def metric_data(name):
    """(TOTAL_SAMPLES, ACCUMULATOR, SAMPLES) of a metric, None if it has no
    samples; SAMPLES are the newest (time_ns, value) pairs kept."""
    d = _m.metric_data(name)
    if d is None:
        return None
    return d[0], d[1], _m.metric_samples(name) or []


def executed_fallback_ops():
    """The aten ops that ran on the CPU fallback (and .item() reads)."""
    return _m.executed_fallback_ops(include_scalar_reads=True)


def short_metrics_report(counter_names=None, metric_names=None):
    """Compile/execute time totals, the given (or default) counters and the
    fallback counters."""
    return _m.short_metrics_report(counter_names or None, metric_names or None,
                                   include_scalar_reads=True)
