"""torch_xla.debug.profiler on lazytpu: Trace / StepTrace / trace_me spans and
the capture API (start_trace / stop_trace, start_server + trace) of
lazytpu.profiler, which writes <logdir>/plugins/profile/<run>/<host>.xplane.pb
and .trace.json.gz (docs/torch_xla.md).

As in 2.9, a Trace also opens an IR scope (per thread, named
"<name>.<id>", ids counting from 1 after each step), and ending a step with
the scopes reset (torch_xla.sync(), xm.mark_step(), a StepTrace's end) while
a Trace is open raises RuntimeError "Expecting scope to be empty but it is
<scopes>": a program that syncs inside a Trace fails on torch_xla 2.9 too."""
import functools
import threading

from lazytpu import debug as _debug
from lazytpu.profiler import (start_server, start_trace, stop_trace, trace,  # noqa: F401
                              trace_detached)

_scopes = threading.local()


def _state():
    if not hasattr(_scopes, "stack"):
        _scopes.stack, _scopes.next_id = [], 1
    return _scopes


def _push(name):
    s = _state()
    entry = "%s.%d" % (name, s.next_id)
    s.next_id += 1
    s.stack.append(entry)
    return entry


def _pop(entry):
    s = _state()
    if entry in s.stack:
        s.stack.remove(entry)


def check_scopes_empty():
    """Before a step that resets the scopes (torch_xla.sync(reset_scope=True)):
    RuntimeError naming the open scopes, else the ids restart at 1."""
    s = _state()
    if s.stack:
        raise RuntimeError("Expecting scope to be empty but it is " + "/".join(s.stack))
    s.next_id = 1


class Trace(_debug.Trace):
    """A span named `name` (lazytpu.debug.Trace) and, while it is open, an
    IR scope (see the module's docstring)."""

    def __enter__(self):
        self._scope = _push(self.name.split(" ", 1)[0])
        return super().__enter__()

    def __exit__(self, *exc):
        scope, self._scope = getattr(self, "_scope", None), None
        if scope is not None:
            _pop(scope)
        return super().__exit__(*exc)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with Trace(self.name):
                return fn(*args, **kwargs)
        return wrapped


class StepTrace(Trace):
    """A Trace around a whole step: on exit its own scope closes, then the
    step ends (torch_xla.sync(): RuntimeError if an outer Trace is still
    open), then the span."""

    def __init__(self, name, step_num=None, **kwargs):
        if step_num is not None:
            kwargs["step_num"] = step_num
        super().__init__(name, **kwargs)

    def __exit__(self, *exc):
        scope, self._scope = getattr(self, "_scope", None), None
        if scope is not None:
            _pop(scope)
        try:
            if exc[0] is None:
                import torch_xla
                torch_xla.sync()
        finally:
            _debug.Trace.__exit__(self, *exc)
        return False


def trace_me(scope):
    """Decorator: every call of the function is a Trace named `scope`."""
    return Trace(scope)
