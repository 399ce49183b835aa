"""torch_xla's custom ops in the ``xla`` namespace (torch.ops.xla.*), each
on lazytpu's implementation:

- ``dynamo_mark_sharding(input, device_ids, mesh_shape, axis_names,
  partition_spec) -> Tensor``: mark_sharding of a device tensor over
  Mesh(device_ids, mesh_shape, literal axis_names) with the literal
  partition_spec (texts, so that the op has a plain schema for dynamo);
  returns input. Any other tensor is returned unannotated, as in torch_xla.
"""
import ast

import torch

XLA_LIB = torch.library.Library("xla", "FRAGMENT")  # noqa: TOR901

XLA_LIB.define("dynamo_mark_sharding(Tensor input, int[] device_ids, int[] mesh_shape, "
               "str axis_names, str partition_spec) -> Tensor")


def _dynamo_mark_sharding_device(input, device_ids, mesh_shape, axis_names, partition_spec):
    from lazytpu.spmd import Mesh, mark_sharding
    mesh = Mesh(device_ids, tuple(mesh_shape), ast.literal_eval(axis_names))
    mark_sharding(input, mesh, ast.literal_eval(partition_spec))
    return input


def _dynamo_mark_sharding_other(input, device_ids, mesh_shape, axis_names, partition_spec):
    return input


for _key in ("XLA", "PrivateUse1"):
    XLA_LIB.impl("dynamo_mark_sharding", _dynamo_mark_sharding_device, _key)
XLA_LIB.impl("dynamo_mark_sharding", _dynamo_mark_sharding_other, "CompositeExplicitAutograd")
