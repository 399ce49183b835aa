"""lazytpu.profiler: capture the trace events of a time window into files a
profile viewer opens (torch_xla.debug.profiler's capture API).

    lazytpu.profiler.start_trace(logdir) ... lazytpu.profiler.stop_trace()
    server = lazytpu.profiler.start_server(9012)      # in the traced process
    lazytpu.profiler.trace("localhost:9012", logdir, duration_ms=2000)

A capture keeps every trace event that starts inside the window (compile,
execute on each core, sync, transfers, CPU fallbacks, Trace spans), whether
or not LAZYTPU_TRACE is set, and writes them where TensorBoard's profile
plugin looks for a run: <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/
<host>.xplane.pb (XSpace protobuf) and <host>.trace.json.gz (Chrome trace
JSON: Perfetto and chrome://tracing open it). See docs/torch_xla.md for what
differs from torch_xla's files.

trace() asks a profiler server (start_server, possibly in another process)
over TCP to capture for duration_ms; the server's process writes the files
(the logdir must be reachable from it, as with torch_xla).
"""
import socket
import socketserver
import threading
import time

from . import _C

__all__ = ["start_trace", "stop_trace", "trace", "trace_detached",
           "start_server", "ProfilerServer"]

_lock = threading.Lock()
_log_dir = None


def start_trace(log_dir):
    """Starts capturing; stop_trace() writes the capture under log_dir.
    RuntimeError ("... Only one profile may be run at a time.") while a
    capture (start_trace or a server's trace request) runs."""
    global _log_dir
    with _lock:
        _C.capture_start()
        _log_dir = str(log_dir)


def stop_trace():
    """Ends the capture started by start_trace and writes it under its
    log_dir; returns the run directory written. RuntimeError ("No profile
    started") without one."""
    global _log_dir
    with _lock:
        if _log_dir is None:
            raise RuntimeError("No profile started")
        log_dir, _log_dir = _log_dir, None
        return _C.capture_stop(log_dir)


def _capture(logdir, duration_ms, delay_ms):
    """One capture of duration_ms after delay_ms in this process; the run
    directory written."""
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)
    _C.capture_start()
    time.sleep(max(0, duration_ms) / 1000.0)
    return _C.capture_stop(logdir)


class _Handler(socketserver.StreamRequestHandler):
    """One request line "capture <duration_ms> <delay_ms> <logdir>"; the
    reply line "ok <run_dir>" or "error <message>"."""

    def handle(self):
        line = self.rfile.readline(8192).decode("utf-8", "replace").rstrip("\n")
        parts = line.split(" ", 3)
        try:
            if len(parts) != 4 or parts[0] != "capture":
                raise RuntimeError("bad profiler request %r" % line[:80])
            reply = "ok " + _capture(parts[3], int(parts[1]), int(parts[2]))
        except (RuntimeError, ValueError) as e:
            reply = "error " + str(e).replace("\n", " ")
        self.wfile.write((reply + "\n").encode())


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = False        # server_close waits for a capture in flight
    block_on_close = True

    def server_bind(self):
        # gRPC (torch_xla's profiler server) binds with SO_REUSEPORT: a
        # second server on the same port starts too.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


class ProfilerServer:
    """A profiler server on `port` (all interfaces), serving trace()
    requests from a thread until it is garbage collected or stop() is
    called; stopping waits for a capture in flight."""

    def __init__(self, port):
        self.port = int(port)
        try:
            self._srv = _TCPServer(("", self.port), _Handler)
        except (OSError, OverflowError) as e:
            raise RuntimeError("profiler server: cannot listen on port %s: %s" % (port, e)) from None
        self._thread = threading.Thread(target=self._srv.serve_forever, args=(0.1,),
                                        name="lazytpu-profiler-server", daemon=True)
        self._thread.start()

    def stop(self):
        srv, self._srv = getattr(self, "_srv", None), None
        if srv is not None:
            srv.shutdown()
            srv.server_close()

    def __del__(self):
        self.stop()


def start_server(port, only_on_master=True):
    """Starts a profiler server on `port` in this process and returns it
    (None on a process that is not the local master when only_on_master).
    RuntimeError when the port cannot be listened on."""
    from .core import is_master_ordinal
    if only_on_master and not is_master_ordinal():
        return None
    return ProfilerServer(port)


def _request(addr, logdir, duration_ms, delay_ms, timeout):
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise RuntimeError("profiler: bad service address %r (want host:port)" % addr)
    with socket.create_connection((host or "localhost", int(port)), timeout=timeout) as s:
        s.sendall(("capture %d %d %s\n" % (duration_ms, delay_ms, logdir)).encode())
        reply = s.makefile("rb").readline().decode("utf-8", "replace").rstrip("\n")
    kind, _, rest = reply.partition(" ")
    if kind != "ok":
        raise RuntimeError(rest or "profiler: %s closed the connection" % addr)
    return rest


def trace(service_addr, logdir, duration_ms=1000, num_tracing_attempts=3,
          host_tracer_level=2, device_tracer_level=1, delay_ms=0,
          timeout_s=120, interval_s=5):
    """Asks the profiler server(s) at service_addr ("host:port", comma
    separated) to capture duration_ms of their events (after delay_ms) into
    logdir; blocks until done and returns the run directories written.
    Retries a failed request num_tracing_attempts times, then every
    interval_s until timeout_s, then raises RuntimeError. The tracer levels
    are accepted (lazytpu records the same events at every level)."""
    del host_tracer_level, device_tracer_level
    addrs = [a for a in str(service_addr).split(",") if a.strip()]
    if not addrs:
        raise RuntimeError("profiler: no service address given")
    wait = max(5.0, (delay_ms + duration_ms) / 1000.0 + 30.0)
    err = None
    rounds = max(0, int(timeout_s) // max(1, int(interval_s))) + 1
    for r in range(rounds):
        for _ in range(max(1, int(num_tracing_attempts))):
            try:
                return [_request(a, str(logdir), int(duration_ms), int(delay_ms), wait)
                        for a in addrs]
            except (OSError, RuntimeError) as e:
                err = e
        if r + 1 < rounds:
            time.sleep(interval_s)
    raise RuntimeError("profiler: trace of %s failed: %s" % (service_addr, err))


def trace_detached(*args, **kwargs):
    """trace(...) on a background thread (returns at once; the thread is
    returned)."""
    t = threading.Thread(target=trace, args=args, kwargs=kwargs, daemon=True)
    t.start()
    return t
