"""torch_xla._XLAC on lazytpu: the few binding functions that scripts and
libraries call directly (sharding queries, lazytpu.spmd). lazytpu.spmd is
imported on first use: it needs numpy, which `import torch_xla` must not."""


def _get_xla_sharding_spec(t):
    """XLA's text of t's sharding, "" when it has none."""
    from lazytpu.spmd import sharding_spec_text
    return sharding_spec_text(t)


def _get_xla_sharding_type(t):
    """t's ShardingType as an int, None when it has no sharding."""
    from lazytpu.spmd import sharding_type_of
    return sharding_type_of(t)
