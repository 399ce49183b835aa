"""Runs one pytorch/xla test file as ``python FILE ARGS`` would (sys.argv,
sys.path[0] and ``__main__`` as for a script), recording every unittest
outcome as one JSON line in the file named by $XLA_SUITE_RESULTS.

Started by scripts/xla_suite.py as ``python -m lazytpu xla_suite_probe.py
FILE ARGS``. The hooks sit on unittest.TestResult, which every runner the
suite uses (unittest.main, absltest, torch's run_tests) reports through.
Only this process records: spawn workers are fresh interpreters.
"""
import json
import os
import runpy
import sys
import traceback
import unittest

OUT = os.environ["XLA_SUITE_RESULTS"]
PID = os.getpid()


def _emit(rec):
    if os.getpid() != PID:
        return
    with open(OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _tid(test):
    tid = test.id() if hasattr(test, "id") else str(test)
    return tid[len("__main__."):] if tid.startswith("__main__.") else tid


def _err_text(err):
    if err is None:
        return ""
    etype, value, _ = err
    lines = "".join(traceback.format_exception_only(etype, value)).strip().splitlines()
    return (lines[-1] if lines else etype.__name__)[:400]


def _hook(name, outcome, text_of=None):
    orig = getattr(unittest.TestResult, name)

    def hooked(self, test, *args):
        rec = {"test": _tid(test), "outcome": outcome}
        if text_of is not None and args:
            rec["msg"] = text_of(args[0])
        _emit(rec)
        return orig(self, test, *args)

    setattr(unittest.TestResult, name, hooked)


def _install():
    _hook("addSuccess", "pass")
    _hook("addFailure", "fail", _err_text)
    _hook("addError", "error", _err_text)
    _hook("addSkip", "skip", lambda reason: str(reason)[:300])
    _hook("addExpectedFailure", "pass", None)          # the test's own expectedFailure
    _hook("addUnexpectedSuccess", "fail", None)
    orig_start = unittest.TestResult.startTest
    orig_sub = unittest.TestResult.addSubTest

    def start(self, test):
        _emit({"test": _tid(test), "outcome": "started"})
        return orig_start(self, test)

    def sub(self, test, subtest, err):
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            _emit({"test": _tid(test), "outcome": "fail" if failed else "error",
                   "msg": "subtest %s: %s" % (subtest._subDescription(), _err_text(err))})
        return orig_sub(self, test, subtest, err)

    unittest.TestResult.startTest = start
    unittest.TestResult.addSubTest = sub


def main():
    path = os.path.abspath(sys.argv[1])
    sys.argv = [path] + sys.argv[2:]
    sys.path[0] = os.path.dirname(path)
    _install()
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:
        _emit({"event": "died", "msg": _err_text((type(e), e, None))})
        raise


if __name__ == "__main__":
    main()
