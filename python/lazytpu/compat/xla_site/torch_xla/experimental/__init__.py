"""torch_xla.experimental on lazytpu: eager mode (here), the loops
(fori_loop, scan, scan_layers), deprecation helpers, custom_kernel's
flash_attention (computed with the device's ops), the device-plugin
registry (plugins: the simulated TPU's plugin). Modules of XLA's own
machinery (other pallas kernels, stablehlo custom calls) are not provided."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]

# loaded on first access, as 2.9 has it loaded once torch_xla is imported
from lazytpu.compat import submodules_on_access as _on_access  # noqa: E402

__getattr__ = _on_access(__name__, ("scan",))
