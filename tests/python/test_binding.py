"""One binding: Python reaches the C core only through lazytpu._C (no ctypes
anywhere under python/), and the core's enums reach Python from the C
headers through _C, not as numbers copied by hand."""
import os
import re

import torch

import lazytpu
from lazytpu import _C, collectives, debug, precision

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(lazytpu.__file__)))
HEADER = os.path.join(PYTHON_DIR, "..", "include", "lazytpu.h")


def _python_sources():
    out = []
    for root, dirs, files in os.walk(PYTHON_DIR):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return out


def _header_enum(name):
    """{member: value} of `typedef enum <name> { ... }` in include/lazytpu.h,
    with C's implicit numbering."""
    with open(HEADER) as f:
        text = f.read()
    m = re.search(r"typedef enum %s \{(.*?)\} %s;" % (name, name), text, re.S)
    assert m, "no enum %s in %s" % (name, HEADER)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    out, nxt = {}, 0
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        ident, _, value = item.partition("=")
        ident = ident.strip()
        nxt = int(value) if value.strip() else nxt
        out[ident] = nxt
        nxt += 1
    return out


def test_no_ctypes_under_python():
    """No module of the package (nor the autoload hook beside it) imports
    or names ctypes, cffi or a CDLL: every Python -> C call goes through _C."""
    files = _python_sources()
    assert len(files) > 50, files   # the tree was found, not an empty dir
    assert os.path.join(PYTHON_DIR, "_lazytpu_device.py") in files
    bad = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                if re.search(r"\b(ctypes|cffi|CDLL|cdll|PyDLL)\b", line):
                    bad.append("%s:%d: %s" % (os.path.relpath(path, PYTHON_DIR), no,
                                              line.strip()))
    assert not bad, "\n".join(bad)


def test_no_hand_copied_defaults_for_c_constants():
    """No `getattr(_C, "NAME", <number>)`: a default is a hand copy of the
    C value that hides a missing export."""
    pat = re.compile(r"getattr\(\s*(?:\w+\.)?_C\s*,\s*[\"'][A-Z][A-Z0-9_]*[\"']\s*,")
    bad = []
    for path in _python_sources():
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                if pat.search(line):
                    bad.append("%s:%d: %s" % (path, no, line.strip()))
    assert not bad, "\n".join(bad)


def test_sync_causes_match_header():
    enum = _header_enum("lt_sync_cause")
    causes = {k: v for k, v in enum.items() if k != "LT_NUM_SYNC_CAUSES"}
    assert len(causes) == enum["LT_NUM_SYNC_CAUSES"] == len(_C.SYNC_CAUSE_NAMES)
    for ident, value in causes.items():
        py = ident.replace("LT_SYNC_", "SYNC_")
        assert getattr(_C, py) == value, py
        # the name the core gives the cause (trace events, counters)
        assert _C.SYNC_CAUSE_NAMES[value] == ident[len("LT_SYNC_"):].lower()
    assert debug._STEP_CAUSES == ("mark_step", "optimizer_step", "loader_step")


def test_dtypes_match_header():
    enum = _header_enum("lt_dtype")
    n = enum.pop("LT_NUM_DTYPES")
    assert len(enum) == n == len(_C.DTYPE_NAMES)
    for ident, value in enum.items():
        assert getattr(_C, "DTYPE_" + ident[3:]) == value, ident
        assert _C.DTYPE_NAMES[value] == ident[3:].lower()
    # the host collectives' torch dtype -> lt_dtype table: each code names
    # the dtype of the same width and kind
    short = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float64: "f64",
             torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}
    assert {t: _C.DTYPE_NAMES[c] for t, c in collectives._DTYPE.items()} == short


def test_reduce_units_trace_rows_precisions_match_header():
    red = _header_enum("lt_reduce_type")
    assert {k[3:]: v for k, v in red.items()} == {
        k: getattr(_C, k) for k in ("REDUCE_SUM", "REDUCE_MUL", "REDUCE_MIN",
                                    "REDUCE_MAX", "REDUCE_AND", "REDUCE_OR")}
    assert collectives._REDUCE == {k[len("LT_REDUCE_"):].lower(): v for k, v in red.items()}
    assert set(collectives._COMBINE) == set(red.values())
    units = _header_enum("lt_metric_unit")
    assert {k[3:]: v for k, v in units.items()} == {
        k: getattr(_C, k) for k in ("UNIT_NS", "UNIT_BYTES", "UNIT_COUNT")}
    with open(HEADER) as f:
        text = f.read()
    for row in ("HOST", "LOADER"):
        m = re.search(r"#define LT_TRACE_TID_%s \((-?\d+)\)" % row, text)
        assert m and getattr(_C, "TRACE_TID_" + row) == int(m.group(1)), row
    levels = _header_enum("lt_matmul_precision")
    assert {k[3:]: v for k, v in levels.items()} == {
        "MATMUL_" + n.upper(): getattr(_C, "MATMUL_" + n.upper()) for n in precision.LEVELS}
    assert precision.LEVELS == _C.MATMUL_PRECISIONS == ("f32", "default", "high", "highest")


def test_precision_levels_round_trip():
    was = lazytpu.get_matmul_precision()
    try:
        for level in precision.LEVELS:
            lazytpu.set_matmul_precision(level)
            assert lazytpu.get_matmul_precision() == level
    finally:
        lazytpu.set_matmul_precision(was)
