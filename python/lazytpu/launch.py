"""lazytpu.launch: data-parallel training on N processes, one simulated core
each (like ``torch_xla.distributed.xla_multiprocessing`` on a TPU v3-8).

    import lazytpu

    def train(index, lr):
        dev = lazytpu.device()            # this process's core
        ...
        lazytpu.optimizer_step(opt)       # gradients all-reduced (mean)
        lazytpu.mark_step()

    if __name__ == "__main__":
        lazytpu.spawn(train, args=(0.1,), nprocs=8)

Workers run through the ``lazytpu-run`` launcher (shared-memory world,
supervision: if one worker fails every other one is stopped and ``spawn``
raises :class:`WorkerError` naming the ordinal and the cause). ``fn`` is
pickled by reference, so it must be importable (a module-level function; for
a script, guard the call with ``if __name__ == "__main__":``). Under
``mpirun -np H`` every host's ``spawn`` goes through its own launcher, which
joins the other hosts (docs/multihost.md).
"""
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import traceback

from . import _C
from .world import get_ordinal

__all__ = ["spawn", "launch", "WorkerError", "at_worker_exit", "MpModelWrapper",
           "MpSerialExecutor"]


class WorkerError(RuntimeError):
    """A worker failed. ``ordinal`` (-1 if the launcher itself stopped, e.g.
    timeout or interrupt), ``exit_code`` (the launcher's) and ``cause``."""

    def __init__(self, message, ordinal=-1, exit_code=1, cause=""):
        super().__init__(message)
        self.ordinal = ordinal
        self.exit_code = exit_code
        self.cause = cause



def _lib_path():
    """Path of the liblazytpu.so this process loaded (through _C)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if p.endswith("/liblazytpu.so"):
                    return p
    except OSError:
        pass
    return None


def _find_launcher():
    cands = []
    if _C.option("LAZYTPU_BIN_DIR"):
        cands.append(os.path.join(_C.option("LAZYTPU_BIN_DIR"), "lazytpu-run"))
    lp = _lib_path()
    if lp:
        cands.append(os.path.join(os.path.dirname(lp), "lazytpu-run"))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    w = shutil.which("lazytpu-run")
    if w:
        return w
    raise RuntimeError("lazytpu.spawn: cannot find the lazytpu-run launcher "
                       "(looked in %s and PATH; set LAZYTPU_BIN_DIR)" % ", ".join(cands))


def _main_path():
    """The parent's __main__ script (absolute path), or None (interactive,
    ``-c``, or pytest's entry point)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.exists(path) and not path.endswith("pytest"):
        return os.path.abspath(path)
    return None


def _main_module_name():
    """For ``python -m pkg.mod`` (or ``-m pkg``: pkg.__main__): the module
    name of __main__, whose file workers then load as that module of its
    package (relative imports work); None for a script."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) or None


def _process_context():
    """What a worker needs of this process before it loads __main__ or
    unpickles anything (what multiprocessing's spawn passes too): sys.argv
    (a script that parses it at module level, e.g. argparse, runs again in
    every worker), sys.path, the working directory, the name __main__ was
    run as, and the authentication key, so that multiprocessing.Manager
    proxies in the arguments (Lightning's return queue) connect back to
    this process's manager."""
    return {
        "sys_argv": list(sys.argv),
        "sys_path": list(sys.path),
        "cwd": os.getcwd(),
        "main_name": _main_module_name(),
        "authkey": bytes(multiprocessing.current_process().authkey),
    }


class _SpawnContext:
    """What spawn(join=False) returns: join() waits and raises on failure."""

    def __init__(self, proc, tmpdir, nprocs):
        self.proc = proc
        self.tmpdir = tmpdir
        self.nprocs = nprocs
        self.processes = [proc]   # the launcher, which supervises the workers

    def pids(self):
        return [self.proc.pid]

    def join(self, timeout=None):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        status = os.path.join(self.tmpdir, "status")
        ordinal, msg = -1, ""
        try:
            with open(status) as f:
                parts = f.read().rstrip("\n").split("\t", 2)
            code, ordinal, msg = int(parts[0]), int(parts[1]), parts[2]
        except (OSError, ValueError, IndexError):
            pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        if code != 0:
            if not msg:
                msg = "lazytpu-run exited with code %d" % code
            cause = msg.split(": ", 1)[1] if ": " in msg else msg
            raise WorkerError("lazytpu.spawn: " + msg, ordinal, code, cause)
        return True


def spawn(fn, args=(), nprocs=None, join=True, daemon=False,
          start_method="spawn", timeout=None, metrics_file=None, in_process=True):
    """Runs ``fn(index, *args)`` in ``nprocs`` worker processes (default 8),
    each driving one simulated core (``lazytpu.device()`` in the worker).
    Blocks until all exit (``join=True``) and raises :class:`WorkerError`
    naming the ordinal and cause if any fails; with ``join=False`` returns a
    context whose ``join()`` does that. ``nprocs=1`` runs ``fn(0, *args)`` in
    this process (a worker process instead with ``in_process=False``). ``timeout`` (seconds) stops a hanging job; ``metrics_file``
    collects every worker's metrics report (merged)."""
    if start_method not in ("spawn", "fork", "forkserver"):
        raise ValueError("lazytpu.spawn: unknown start_method %r" % start_method)
    if _loading_main:
        # the script's module code runs again in every worker (as
        # __mp_main__) to import fn: a spawn() there is not guarded by
        # `if __name__ == "__main__"`. Python's multiprocessing and
        # torch_xla refuse it too; running fn here would run it twice.
        raise RuntimeError(
            "lazytpu.spawn was called while a worker was importing the main script "
            "(%s): the script calls spawn at module level, so every worker would "
            "start it again; start the workers only from the main process, under "
            "`if __name__ == \"__main__\":`" % _loading_main)
    if _C.option("LAZYTPU_SHM_NAME"):
        # already a worker of a launched world (lazytpu-run -n N python
        # script.py): this process is one of the N, fn runs here
        local = _C.option("LAZYTPU_LOCAL_WORLD_SIZE") or _C.option("LAZYTPU_WORLD_SIZE")
        if nprocs not in (None, 1, local):
            raise ValueError("lazytpu.spawn(nprocs=%d) inside a world of %d processes per "
                             "host (started by lazytpu-run -n %d): use nprocs=None"
                             % (nprocs, local, local))
        fn(get_ordinal(), *args)
        return None
    n = 8 if nprocs is None else int(nprocs)
    under_mpi = "OMPI_COMM_WORLD_SIZE" in os.environ or "PMIX_RANK" in os.environ
    if n == 1 and not under_mpi and in_process:
        fn(0, *args)
        return None
    try:
        payload = pickle.dumps((fn, tuple(args)))
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise ValueError("lazytpu.spawn: fn and args must be picklable (fn by "
                         "reference: a module-level function): %s" % e) from None
    # the parent's process context (_process_context), and the script when
    # fn or objects in args (a Lightning trainer holding the script's
    # module) come from it
    head = _process_context()
    head["main_path"] = _main_path() if (getattr(fn, "__module__", "") == "__main__"
                                         or b"__main__" in payload) else None
    tmpdir = tempfile.mkdtemp(prefix="lazytpu-spawn-")
    job = os.path.join(tmpdir, "job.pkl")
    with open(job, "wb") as f:
        pickle.dump(head, f)
        f.write(payload)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    cmd = [_find_launcher(), "-n", str(n), "--quiet",
           "--status-file", os.path.join(tmpdir, "status")]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    if metrics_file:
        cmd += ["--metrics", os.path.abspath(metrics_file)]
    cmd += ["--", sys.executable, "-c",
            "import lazytpu.launch as s; s._worker_main(%r)" % job]
    proc = subprocess.Popen(cmd, env=env)
    ctx = _SpawnContext(proc, tmpdir, n)
    if not join:
        return ctx
    try:
        ctx.join()
    except KeyboardInterrupt:
        proc.send_signal(2)
        proc.wait()
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    return None


class MpModelWrapper:
    """torch_xla's model wrapper for spawn: keeps the model (created once, in
    the parent) and hands it to each worker's device with to()."""

    def __init__(self, model):
        self._model = model

    def to(self, device):
        return self._model.to(device)


class MpSerialExecutor:
    """Runs a function on the host's processes one at a time, in ordinal order
    (e.g. downloading a data set once), returning each process's result."""

    def run(self, fn):
        from .collectives import rendezvous
        from .world import get_local_ordinal, local_world_size
        result = None
        me = get_local_ordinal()
        for k in range(max(local_world_size(), 1)):
            if k == me:
                result = fn()
            rendezvous("lazytpu.MpSerialExecutor.%d" % k)
        return result


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    """torch_xla.launch: fn(index, *args) on every core of this host (in this
    process when debug_single_process or when already a worker)."""
    if debug_single_process:
        fn(0, *args)
        return None
    return spawn(fn, args=args, nprocs=None, start_method=start_method)


_exit_hooks = []


def at_worker_exit(fn):
    """Registers fn() to run when a spawn worker ends (workers leave with
    os._exit, which skips atexit handlers)."""
    _exit_hooks.append(fn)


def _run_exit_hooks():
    for fn in _exit_hooks:
        try:
            fn()
        except Exception as e:  # best effort at exit
            sys.stderr.write("lazytpu: exit hook %r failed: %s\n" % (fn, e))


# The name the parent ran __main__ as (python -m NAME), from the job's head.
_parent_main_name = None


_loading_main = None   # the script _load_main is running (spawn refuses then)


def _load_main(path):
    """Makes a script's functions importable as __main__ in the worker (the
    script runs as __mp_main__, so its `if __name__ == "__main__"` block
    does not). A module the parent ran with ``python -m`` is loaded with
    its package, so that its relative imports work. Run after
    _restore_context: the script sees the parent's sys.argv and working
    directory."""
    import importlib.util
    import types
    mod = types.ModuleType("__mp_main__")
    spec = None
    if _parent_main_name:
        try:
            spec = importlib.util.find_spec(_parent_main_name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and (spec.origin is None
                                 or os.path.abspath(spec.origin) != path):
            spec = None
    if spec is not None:
        mod.__spec__ = spec
        mod.__package__ = spec.parent
        mod.__loader__ = spec.loader
    mod.__file__ = path
    sys.modules["__mp_main__"] = mod
    sys.modules["__main__"] = mod
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    global _loading_main
    _loading_main = path
    try:
        exec(code, mod.__dict__)
    finally:
        _loading_main = None


def _restore_context(head):
    """The parent's process context (_process_context) in this worker."""
    global _parent_main_name
    for p in reversed(head.get("sys_path", [])):
        if p not in sys.path:
            sys.path.insert(0, p)
    if head.get("sys_argv") is not None:
        sys.argv[:] = head["sys_argv"]
    if head.get("cwd"):
        try:
            os.chdir(head["cwd"])
        except OSError as e:
            raise RuntimeError("lazytpu.spawn: the worker cannot enter the parent's "
                               "working directory %s: %s" % (head["cwd"], e)) from None
    _parent_main_name = head.get("main_name")
    if head.get("authkey"):
        multiprocessing.current_process().authkey = head["authkey"]


def _write_metrics():
    path = _C.option("LAZYTPU_METRICS_FILE")
    if not path:
        return
    path = path.replace("{ordinal}", str(get_ordinal()))
    try:
        from . import metrics
        with open(path, "w") as f:
            f.write(metrics.metrics_report())
    except Exception as e:  # metrics are best effort at exit
        sys.stderr.write("lazytpu: could not write metrics to %s: %s\n" % (path, e))


def _worker_main(job):
    """Entry point of a worker process (run by lazytpu-run): restores the
    parent's sys.argv, sys.path, working directory and authentication key,
    then its __main__ script (when fn or args need it), then runs
    fn(ordinal, *args). An exception prints its traceback (forwarded by the
    launcher with an "[ordinal k]" prefix) and exits 1."""
    try:
        with open(job, "rb") as f:
            head = pickle.load(f)
            _restore_context(head)
            if head.get("main_path"):
                _load_main(head["main_path"])
            fn, args = pickle.load(f)
        fn(get_ordinal(), *args)
        _C.wait(-1)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        _write_metrics()
        _run_exit_hooks()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        _write_metrics()
        _run_exit_hooks()
        os._exit(1)
    _write_metrics()
    _run_exit_hooks()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: the world and cores need no cleanup
    os._exit(0)
