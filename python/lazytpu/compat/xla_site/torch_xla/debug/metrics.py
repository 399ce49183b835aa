"""torch_xla.debug.metrics (``met``) on lazytpu.metrics."""
from lazytpu.metrics import (clear_all, clear_counters, clear_metrics,  # noqa: F401
                             counter_names, counter_value, executed_fallback_ops,
                             metric_data, metric_names, metrics_report,
                             short_metrics_report)
