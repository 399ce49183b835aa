"""torch_xla.core.xla_builder: XLA's HLO builder (Op, create_computation,
placeholder tensors). lazytpu has no HLO, so this module has none of its
builder names: it exists because scripts import it beside torch_xla's loops,
and every other name asked of it raises AttributeError saying so. Loops:
torch_xla.experimental.fori_loop / scan (lazytpu's own)."""


def create_placeholder_tensor(shape, dtype):
    """torch_xla 2.9: a device tensor without a buffer, for staging a user
    computation's HLO. Refused here (NotImplementedError): lazytpu's device
    tensors always hold a value or a pending graph, and it stages no HLO."""
    raise NotImplementedError(
        "torch_xla.core.xla_builder.create_placeholder_tensor(%r, %s): buffer-less "
        "placeholder tensors (for staging a user computation's HLO) are not part of "
        "lazytpu's torch_xla layer (lazytpu has no HLO)" % (tuple(shape), dtype))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        "torch_xla.core.xla_builder.%s: XLA's HLO builder is not part of lazytpu's "
        "torch_xla layer (lazytpu has no HLO); for loops use "
        "torch_xla.experimental.fori_loop / scan" % name)
