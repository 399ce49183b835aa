"""The torch_xla version this layer presents (lazytpu.compat.TORCH_XLA_VERSION)."""
from lazytpu.compat import TORCH_XLA_VERSION as __version__  # noqa: F401

__xla_gitrev__ = "lazytpu"
__torch_gitrev__ = "lazytpu"
