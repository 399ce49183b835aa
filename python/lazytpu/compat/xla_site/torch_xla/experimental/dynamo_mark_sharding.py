"""torch_xla.experimental.dynamo_mark_sharding: a deprecated import (the op
torch.ops.xla.dynamo_mark_sharding is registered with torch_xla), kept as
in torch_xla 2.9: it only warns."""
import warnings

warnings.warn(
    "dynamo_mark_sharding will be auto registered starting 2.5 release, please remove this import"
)
