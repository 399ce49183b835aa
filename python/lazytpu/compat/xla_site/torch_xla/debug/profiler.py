"""torch_xla.debug.profiler on lazytpu: Trace / StepTrace spans land in
lazytpu's Perfetto trace (LAZYTPU_TRACE=file.json); start_server is accepted
(there is no profiler service to connect to)."""
from lazytpu.debug import StepTrace, Trace, start_server, trace_me  # noqa: F401
