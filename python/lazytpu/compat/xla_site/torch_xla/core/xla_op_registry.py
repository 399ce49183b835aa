"""torch_xla.core.xla_op_registry: PyTorch operations defined by an XLA
lowering function (a Python function building HLO with xla_builder).
lazytpu has no HLO builder (torch_xla.core.xla_builder), so an operation
registered here is refused, with NotImplementedError naming it, when it is
called; registering it works, as scripts register at import."""


class Op:
    """An operation `name` lowered by `opfn` (an xla_builder function)."""

    def __init__(self, name, opfn):
        self._name = name
        self._opfn = opfn
        self._opname = "xla::_op_" + name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            "torch_xla.core.xla_op_registry: the operation %r is an XLA lowering function "
            "(xla_builder HLO), which lazytpu's torch_xla layer cannot run (lazytpu has no "
            "HLO); write it with torch operations on xla tensors instead" % self._name)


def register(name, opfn):
    """Registers operation `name` with the XLA lowering function `opfn`;
    returns it (calling it raises NotImplementedError here)."""
    return Op(name, opfn)
