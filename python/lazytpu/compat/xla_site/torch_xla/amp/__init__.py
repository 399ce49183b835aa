"""torch_xla.amp on lazytpu.amp: autocast (bf16), GradScaler, and the
syncfree optimizers (a skipped step decided on the device, no host read)."""
from lazytpu.amp import GradScaler, autocast  # noqa: F401
from . import syncfree  # noqa: F401
