"""lazytpu's persistent compile cache: compiled programs are stored in a
directory and later processes load them instead of compiling.

    lazytpu.set_compile_cache_dir("/path/to/cache")     # before the first step
    # or: LAZYTPU_COMPILE_CACHE_DIR=/path/to/cache python train.py

One file per graph, keyed by the graph, the lazytpu build and the compile
options (lazy/pcache.h); a file that does not match the graph it is loaded
for is ignored and the graph compiles again. Counters: PersistentCacheHit,
PersistentCacheMiss, PersistentCacheDeserializeFailure (torch_xla's names).
torch_xla.runtime.initialize_cache is this function.
"""
import os

from . import _C

__all__ = ["set_compile_cache_dir", "compile_cache_info"]


def set_compile_cache_dir(path, readonly=False):
    """Stores compiled programs in `path` (created if missing, unless
    readonly) and loads them from there; readonly=True only loads; None turns
    the persistent cache off. Must come before the first step that runs a
    graph: RuntimeError afterwards, and when the directory cannot be made.
    Processes started afterwards (lazytpu.spawn, lazytpu-run, xmp.spawn)
    inherit the choice through LAZYTPU_COMPILE_CACHE_DIR."""
    path = None if path is None else os.fspath(path)
    _C.compile_cache_set_dir(path, bool(readonly))
    if path is None:
        os.environ.pop("LAZYTPU_COMPILE_CACHE_DIR", None)
        os.environ.pop("XLA_PERSISTENT_CACHE_PATH", None)
    else:
        os.environ["LAZYTPU_COMPILE_CACHE_DIR"] = path
    os.environ["LAZYTPU_COMPILE_CACHE_READONLY"] = "1" if readonly else "0"
    if "XLA_PERSISTENT_CACHE_READ_ONLY" in os.environ:   # read beside it: either on is on
        os.environ["XLA_PERSISTENT_CACHE_READ_ONLY"] = "1" if readonly else "0"


def compile_cache_info():
    """{'initialized': the compile cache was used (its directory is fixed),
    'path': the persistent directory or None, 'readonly': bool, 'programs':
    compiled programs held in memory}."""
    initialized, path, readonly, programs = _C.compile_cache_info()
    return {"initialized": initialized, "path": path, "readonly": readonly,
            "programs": programs}
