"""The command lines of lazytpu, kept outside the package so that starting
them does not load torch or the engine:

    lazytpu-run [-n N | --hosts H ...] [--xla-compat=auto|force|off] [--] CMD ...
    python -m lazytpu [--xla-compat=...] script.py [args ...]

``lazytpu-run -n N CMD`` starts CMD as N workers, one simulated core each,
through the C launcher shipped in lazytpu/_lib/ (docs/multicore.md,
docs/multihost.md). Without -n/--hosts it runs CMD once, and the program's
own spawn (lazytpu.spawn, xmp.spawn, torch_xla.launch) starts the workers.

Both turn on torch_xla compatibility for the run (``import torch_xla``
resolves to lazytpu's layer, device tensors are "xla" tensors; see
lazytpu/compat/__init__.py), unless a real torch_xla is installed (then it
is used and a note says so; --xla-compat=force overrides) or
--xla-compat=off.
"""
import importlib.util
import os
import sys

TORCH_XLA_VERSION = "2.9.0"
_LAUNCHER_VALUE_OPTS = {"-n", "--nprocs", "--timeout", "--grace", "--metrics",
                        "--shm-bytes", "--status-file", "--hosts", "--hostfile"}


def package_dir():
    """The lazytpu package directory, found without importing it."""
    spec = importlib.util.find_spec("lazytpu")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lazytpu: the lazytpu package is not importable from %s"
                         % sys.executable)
    return list(spec.submodule_search_locations)[0]


def xla_site():
    """The directory whose torch_xla package is lazytpu's compatibility layer."""
    return os.path.join(package_dir(), "compat", "xla_site")


def real_torch_xla():
    """Directory of a torch_xla importable without the compatibility layer, or
    None."""
    site = os.path.abspath(xla_site())
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != site]
        mod = sys.modules.get("torch_xla")
        spec = mod.__spec__ if mod is not None else importlib.util.find_spec("torch_xla")
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None or spec.origin is None:
        return None
    origin = os.path.abspath(spec.origin)
    return None if origin.startswith(site + os.sep) else os.path.dirname(origin)


def activate_env(env, mode="auto"):
    """Turns torch_xla compatibility on in `env` (a dict for child processes):
    LAZYTPU_XLA_COMPAT=1 and the layer first on PYTHONPATH. mode "off" does
    nothing; "auto" keeps a real torch_xla if one is installed; "force" uses
    the layer anyway. Returns a one-line note, or None."""
    if mode == "off":
        return None
    real = real_torch_xla()
    if real and mode != "force":
        return ("a real torch_xla is installed (%s): using it, not lazytpu's torch_xla "
                "layer (pass --xla-compat=force to run on lazytpu)" % real)
    site = xla_site()
    env["LAZYTPU_XLA_COMPAT"] = "1"
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != site]
    env["PYTHONPATH"] = os.pathsep.join([site] + parts)
    return None


def _split_compat(argv):
    """(mode, argv without the --xla-compat option)."""
    mode, out = "auto", []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a.startswith("--xla-compat="):
            mode = a.split("=", 1)[1]
        elif a == "--xla-compat":
            mode = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        else:
            out.append(a)
        i += 1
    if mode not in ("auto", "force", "off"):
        raise SystemExit("lazytpu: --xla-compat takes auto, force or off (got %r)" % mode)
    return mode, out


def _command_start(argv):
    """Index of CMD in the launcher's arguments, and whether -n/--hosts was
    given."""
    i, workers = 0, False
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return i + 1, workers
        name = a.split("=", 1)[0]
        if name in ("-n", "--nprocs", "--hosts") or (a.startswith("-n") and a[2:].isdigit()):
            workers = True
        if a in _LAUNCHER_VALUE_OPTS:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return i, workers
    return len(argv), workers


def main(argv=None):
    """lazytpu-run."""
    mode, argv = _split_compat(list(sys.argv[1:] if argv is None else argv))
    k, workers = _command_start(argv)
    if k >= len(argv):
        raise SystemExit("usage: lazytpu-run [-n N | --hosts H] [--xla-compat=auto|force|off] "
                         "[--] CMD [ARGS...]")
    # `python` in CMD means this environment's interpreter (the one with torch
    # and lazytpu), not whatever `python` comes first on PATH
    if argv[k] in ("python", "python3", "python3.11"):
        argv[k] = sys.executable
    env = dict(os.environ)
    note = activate_env(env, mode)
    if note:
        sys.stderr.write("lazytpu-run: %s\n" % note)
    if not workers:
        os.execvpe(argv[k], argv[k:], env)
    path = os.path.join(package_dir(), "_lib", "lazytpu-run")
    if not os.access(path, os.X_OK):
        raise SystemExit("lazytpu-run: the launcher %s is missing: rebuild lazytpu "
                         "(pip install --no-build-isolation -e .)" % path)
    os.execve(path, [path] + argv, env)


def run_python(argv):
    """python -m lazytpu [--xla-compat=...] script.py [args]: the script in a
    fresh interpreter with torch_xla compatibility on."""
    mode, argv = _split_compat(list(argv))
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit("usage: python -m lazytpu [--xla-compat=auto|force|off] "
                         "script.py [ARGS...]   (or -m module / -c code)")
    env = dict(os.environ)
    note = activate_env(env, mode)
    if note:
        sys.stderr.write("lazytpu: %s\n" % note)
    os.execve(sys.executable, [sys.executable] + argv, env)
