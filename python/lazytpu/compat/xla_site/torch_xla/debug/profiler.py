"""torch_xla.debug.profiler on lazytpu: Trace / StepTrace / trace_me spans and
the capture API (start_trace / stop_trace, start_server + trace) of
lazytpu.profiler, which writes <logdir>/plugins/profile/<run>/<host>.xplane.pb
and .trace.json.gz (docs/torch_xla.md)."""
from lazytpu.debug import StepTrace, Trace, trace_me  # noqa: F401
from lazytpu.profiler import (start_server, start_trace, stop_trace, trace,  # noqa: F401
                              trace_detached)
