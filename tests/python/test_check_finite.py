"""LAZYTPU_CHECK_FINITE=1 (issue 14, point 4; docs/errors.md): the first op
of a step that produces a NaN or an Inf fails the program; the error names
the op, its operands' shapes and dtypes and the user's line that traced it,
and lands like any execution error (at the read, else once at the step)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "check_finite.py")


def _line(tag):
    with open(SCRIPT) as f:
        for i, line in enumerate(f, 1):
            if tag in line:
                return i
    raise AssertionError(tag)


def _run(flag):
    env = dict(os.environ, LAZYTPU_NUM_CORES="1")
    if flag:
        env["LAZYTPU_CHECK_FINITE"] = "1"
    else:
        env.pop("LAZYTPU_CHECK_FINITE", None)
    p = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return {d["name"]: d for d in map(json.loads, p.stdout.splitlines())}


@pytest.fixture(scope="module")
def checked():
    return _run(True)


def test_forward_names_the_first_op_and_its_line(checked):
    r = checked["forward"]
    assert r.get("type") == "RuntimeError", r
    msg = r["msg"]
    assert msg.startswith("LAZYTPU_CHECK_FINITE: log produced Inf (element 1 of f32[3])"), msg
    assert "in log(f32[3]) -> f32[3] traced at check_finite.py:%d in forward" % (
        _line("FORWARD_LINE")) in msg, msg
    assert "core 0" in msg, msg


def test_the_core_keeps_working(checked):
    assert checked["fine_after"] == {"name": "fine_after", "ok": [4.0, 4.0]}


def test_backward_values_are_checked(checked):
    r = checked["backward"]
    assert r.get("type") == "RuntimeError", r
    assert r["msg"].startswith("LAZYTPU_CHECK_FINITE: "), r
    # ops the autograd engine traces run on its thread, without a Python
    # frame: the message names the line that synced the program
    assert "produced Inf" in r["msg"], r
    assert "program synced at check_finite.py:%d in backward" % _line("BACKWARD_READ") in r["msg"], r


def test_unread_nan_reported_once_at_the_step(checked):
    r = checked["at_step"]
    assert r.get("type") == "RuntimeError", r
    assert r["msg"].startswith("LAZYTPU_CHECK_FINITE: sqrt produced NaN (element 1 of f32[2])"), r
    assert "traced at check_finite.py:%d in at_step" % _line("STEP_LINE") in r["msg"], r
    assert checked["step_again"] == {"name": "step_again", "ok": None}


def test_nan_given_as_data_is_named_as_such(checked):
    r = checked["data_in"]
    assert r.get("type") == "RuntimeError", r
    assert "add produced NaN" in r["msg"] and "already held a non-finite value" in r["msg"], r


def test_off_by_default():
    r = _run(False)
    assert r["forward"]["ok"][1] == float("-inf")
    assert r["backward"]["ok"][0] == float("inf")
    assert r["data_in"]["ok"][1] == 2.0
