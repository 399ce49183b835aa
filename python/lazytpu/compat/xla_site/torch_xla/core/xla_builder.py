"""torch_xla.core.xla_builder: XLA's HLO builder (Op, create_computation,
placeholder tensors). lazytpu has no HLO, so this module has none of its
names: it exists because scripts import it beside torch_xla's loops, and
every name asked of it raises AttributeError saying so. Loops:
torch_xla.experimental.fori_loop / scan (lazytpu's own)."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        "torch_xla.core.xla_builder.%s: XLA's HLO builder is not part of lazytpu's "
        "torch_xla layer (lazytpu has no HLO); for loops use "
        "torch_xla.experimental.fori_loop / scan" % name)
