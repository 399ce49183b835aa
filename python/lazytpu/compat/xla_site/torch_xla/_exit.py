"""XLA_METRICS_FILE: the metrics report is appended to that file when the
process ends (each spawn worker appends its own, with its ordinal)."""
import atexit
import os

import lazytpu
import lazytpu.launch


def _append_metrics():
    path = os.environ.get("XLA_METRICS_FILE")
    if not path:
        return
    with open(path, "a") as f:
        f.write("== ordinal %d ==\n" % lazytpu.get_ordinal())
        f.write(lazytpu.metrics.metrics_report())


atexit.register(_append_metrics)
lazytpu.launch.at_worker_exit(_append_metrics)
