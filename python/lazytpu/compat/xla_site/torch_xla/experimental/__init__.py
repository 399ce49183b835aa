"""torch_xla.experimental on lazytpu: eager mode (here), the loops
(fori_loop, scan, scan_layers), deprecation helpers, custom_kernel's
flash_attention (computed with the device's ops). Modules of XLA's own
machinery (other pallas kernels, stablehlo custom calls, plugins) are not
provided."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]

_ON_ACCESS = ("scan",)

def __getattr__(name):
    """Submodules 2.9 has loaded once torch_xla is imported, loaded here on
    first access (scan)."""
    if name in _ON_ACCESS:
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
