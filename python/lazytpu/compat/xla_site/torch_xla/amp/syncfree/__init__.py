"""torch_xla.amp.syncfree on lazytpu.amp: optimizers whose skipped step
(an inf/nan gradient found by a GradScaler) is decided on the device."""
from .adam import Adam  # noqa: F401
from .adamw import AdamW  # noqa: F401
from .sgd import SGD  # noqa: F401
