"""lazytpu-run: the launcher command installed with the package.

    lazytpu-run [-n 8] [--timeout S] [--metrics FILE] [--] CMD ...

Starts CMD once per simulated core in a shared-memory world (see
docs/multicore.md); the work is done by the C launcher shipped in
lazytpu/_lib/, which this wrapper executes in place.
"""
import os
import sys


def launcher_path():
    """Path of the C launcher next to the package's copy of liblazytpu.so."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "_lib", "lazytpu-run")
    if not os.access(path, os.X_OK):
        raise SystemExit("lazytpu-run: the launcher %s is missing: rebuild lazytpu "
                         "(pip install --no-build-isolation -e .)" % path)
    return path


def _command_start(argv):
    """Index of CMD in the launcher's arguments (after its options)."""
    takes_value = {"-n", "--nprocs", "--timeout", "--grace", "--metrics",
                   "--shm-bytes", "--status-file", "--hosts"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return i + 1
        if a in takes_value:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return i
    return len(argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # `python` in CMD means this environment's interpreter (the one that has
    # torch and lazytpu), not whatever `python` is first on PATH
    k = _command_start(argv)
    if k < len(argv) and argv[k] in ("python", "python3", "python3.11"):
        argv[k] = sys.executable
    path = launcher_path()
    os.execv(path, [path] + list(argv))


if __name__ == "__main__":
    main()
