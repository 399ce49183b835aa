"""torch_xla.debug.metrics_saver: with XLA_METRICS_FILE set, every
torch_xla.sync() (and xm.mark_step) appends "[MetricsData; step=N]" and the
metrics report to that file (``FILE.<local ordinal>`` in a world of several
processes; STDERR / STDOUT print it), as torch_xla 2.9 does."""
import os
import sys
import threading

import lazytpu

_LOCK = threading.Lock()
_TLS = threading.local()


def _counter():
    n = getattr(_TLS, "counter", 0)
    _TLS.counter = n + 1
    return n


def _metrics_file():
    path = os.environ.get("XLA_METRICS_FILE")
    if path and path not in ("STDERR", "STDOUT") and lazytpu.world_size() > 1:
        path = "%s.%d" % (path, lazytpu.get_local_ordinal())
    return path


def save_metrics(metrics_file=None):
    """Appends this step's metrics report to metrics_file (default: from
    XLA_METRICS_FILE; nothing when unset)."""
    path = metrics_file or _metrics_file()
    if not path:
        return
    data = "[MetricsData; step=%d]\n%s\n" % (_counter(), lazytpu.metrics.metrics_report())
    if path == "STDERR":
        print(data, file=sys.stderr)
    elif path == "STDOUT":
        print(data)
    else:
        with _LOCK, open(path, "a") as f:
            f.write(data)
