"""torch_xla.debug.metrics_compare_utils: metrics reports as numbers, and a
check of a new report against earlier ones (regression alerts in CI).

Works on the text of ``met.metrics_report()`` (lazytpu's report has
torch_xla's ``Metric:`` / ``Counter:`` layout) or of any torch_xla report.
Durations become seconds (``_sec`` keys), sizes megabytes (``_mb``, decimal:
1GB = 1000MB), plain numbers stay as they are.
"""
import re

import numpy as np

_METRIC = re.compile(
    r"Metric: (\S+)\s+TotalSamples: (\d+)\s+Accumulator: (\S+)[^P]*?"
    r"Percentiles: ([^\n]*)")
_COUNTER = re.compile(r"Counter: (\S+)\s+Value: (\d+)")
_PERCENTILE = re.compile(r"(\d+)%=(\S+?)(?:;|$)")
_TIME = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?"
                   r"(?:([\d.]+)us)?")
_TIME_SECONDS = (86400.0, 3600.0, 60.0, 1.0, 1e-3, 1e-6)
_SIZE = re.compile(r"([\d.]+)(PB|TB|GB|MB|KB|B)")
_SIZE_MB = {"PB": 1e9, "TB": 1e6, "GB": 1e3, "MB": 1.0, "KB": 1e-3, "B": 1e-6}


def _number(text):
    """(value, unit suffix) of one report value: plain, a duration or a size."""
    try:
        return float(text), ""
    except ValueError:
        pass
    m = _TIME.fullmatch(text)
    if m and any(m.groups()):
        return sum(float(g) * s for g, s in zip(m.groups(), _TIME_SECONDS) if g), "_sec"
    m = _SIZE.fullmatch(text)
    if m:
        return float(m.group(1)) * _SIZE_MB[m.group(2)], "_mb"
    raise ValueError("metrics_compare_utils: cannot read %r as a number, a duration "
                     "or a size" % text)


def parse_metrics_report(report, dehumanize=True):
    """{key: value} of one report: ``NAME__TotalSamples``,
    ``NAME__Accumulator[_unit]``, ``NAME__Percentile_P[_unit]`` per metric
    and ``NAME__Value`` per counter. dehumanize=False keeps the values as the
    report's strings (and the keys without units)."""
    out = {}
    for m in _METRIC.finditer(report):
        name, samples, acc, pct = m.groups()
        out[name + "__TotalSamples"] = float(samples) if dehumanize else samples
        items = [("Accumulator", acc)] + [("Percentile_" + p, v)
                                          for p, v in _PERCENTILE.findall(pct)]
        for key, text in items:
            if dehumanize:
                v, unit = _number(text)
                out["%s__%s%s" % (name, key, unit)] = v
            else:
                out["%s__%s" % (name, key)] = text
    for name, value in _COUNTER.findall(report):
        out[name + "__Value"] = int(value) if dehumanize else value
    return out


def get_data_points_from_metrics_reports(metrics_reports):
    """{key: [value per report]} over several reports, None where a report
    lacks the key."""
    parsed = [parse_metrics_report(r) for r in metrics_reports]
    keys = set()
    for p in parsed:
        keys.update(p)
    return {k: [p.get(k) for p in parsed] for k in keys}


def _aggregates(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return np.mean(vals), np.std(vals)


def compare_metrics(data_points, metrics_report, config=None):
    """Lines (one per failing key, sorted by key) where the newest report's
    value fails its check against the earlier data points; "" when all pass.

    config: ``base_expression`` (default ``"v == v_mean"``) and per key
    ``KEY_expression``, Python expressions over ``v``, ``v_mean`` and
    ``v_stddev``. A counter the earlier reports never had is reported only
    when it names a CPU fallback (``aten::...``)."""
    config = config or {}
    base = config.get("base_expression", "v == v_mean")
    report = ""
    for key, v in sorted(parse_metrics_report(metrics_report).items()):
        if key not in data_points:
            if key.startswith("aten::"):
                report += "Found new aten counter: %s: %s\n" % (key, v)
            continue
        agg = _aggregates(data_points[key])
        if agg is None:
            continue
        expr = config.get(key + "_expression", base)
        ok = eval(expr, {"__builtins__": {}},
                  {"v": v, "v_mean": agg[0], "v_stddev": agg[1]})
        if not ok:
            report += ("{} failed its expression check. Expression: {}.  Mean: {}.  "
                       "Stddev: {}.  Actual Value: {}\n").format(key, expr, agg[0], agg[1],
                                                                 v)
    return report
