"""torch_xla.amp on lazytpu.amp: autocast (bf16). As in torch_xla 2.9 it
exports nothing else: GradScaler left it (use torch.amp.GradScaler("xla")),
and the syncfree optimizers are reached by importing torch_xla.amp.syncfree."""
from .autocast_mode import autocast  # noqa: F401
