
_ON_ACCESS = ("spmd",)

def __getattr__(name):
    """Submodules 2.9 has loaded once torch_xla is imported, loaded here on
    first access (spmd)."""
    if name in _ON_ACCESS:
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
