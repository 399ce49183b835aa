"""torch_xla.experimental on lazytpu: eager mode (here), the loops
(fori_loop, scan, scan_layers), deprecation helpers. Modules of XLA's own
machinery (pallas kernels, stablehlo custom calls, plugins) are not provided."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]
