"""torch_xla.amp.autocast_mode: torch_xla's autocast (bf16 on the device),
lazytpu.amp's."""
from lazytpu.amp import autocast  # noqa: F401
