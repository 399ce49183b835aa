"""Device meshes: the cores of an SPMD program arranged in named axes."""
import collections
import math

import numpy as np

from .runtime import global_runtime_device_count

_GLOBAL_MESH = [None]


class Mesh:
    """``Mesh(device_ids, mesh_shape, axis_names=None)``: the cores
    ``device_ids`` (a flat list, placed row-major) arranged as an array of
    ``mesh_shape``, one name per axis. Raises AssertionError with torch_xla
    2.9's messages when the ids are not as many as the cores
    (global_runtime_device_count) or the mesh's positions, repeat, or
    exceed the mesh, or the names do not fit."""

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        if not isinstance(device_ids, np.ndarray):
            device_ids = np.array(list(device_ids))
        mesh_shape = tuple(int(s) for s in mesh_shape)
        n = global_runtime_device_count()
        if device_ids.size != n:
            raise AssertionError("Number of device IDs (%d) must match the global number of "
                                 "devices (%d)" % (device_ids.size, n))
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise AssertionError("Number of axis names (%d) must match mesh dimensions "
                                     "(%d): names %s, mesh shape %s" % (
                                         len(axis_names), len(mesh_shape), axis_names,
                                         mesh_shape))
            if len(set(axis_names)) != len(axis_names):
                raise AssertionError("Axis names must be unique, got: %s" % (axis_names,))
        if device_ids.size != int(np.prod(mesh_shape)):
            raise AssertionError("Number of device IDs (%d) must match mesh size (%d) of "
                                 "shape %s" % (device_ids.size, int(np.prod(mesh_shape)),
                                               mesh_shape))
        if len(np.unique(device_ids)) != device_ids.size:
            raise AssertionError("Device IDs must be unique, got: %s" % device_ids.tolist())
        self.device_ids = device_ids.reshape(-1)
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        if not all(0 <= d < self.size() for d in self.device_ids.tolist()):
            raise AssertionError("Device IDs must be less than mesh size (%d), got: %s"
                                 % (self.size(), self.device_ids.tolist()))

    def size(self):
        return math.prod(self.mesh_shape)

    def shape(self):
        names = self.axis_names if self.axis_names is not None else range(len(self.mesh_shape))
        return collections.OrderedDict(zip(names, self.mesh_shape))

    def get_logical_mesh(self):
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name):
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.mesh_shape == other.mesh_shape
                and self.axis_names == other.axis_names
                and self.device_ids.tolist() == other.device_ids.tolist())

    def __hash__(self):
        return hash((self.mesh_shape, self.axis_names, tuple(self.device_ids.tolist())))

    def __repr__(self):
        return "Mesh(device_ids=%s, mesh_shape=%s, axis_names=%s)" % (
            self.device_ids.tolist(), self.mesh_shape, self.axis_names)

    def __str__(self):
        """torch_xla 2.9's text, read back by Mesh.from_str."""
        return "{'device_ids': %s, 'mesh_shape': %s, 'axis_names': %s}" % (
            self.device_ids.tolist(), self.mesh_shape, self.axis_names)

    @classmethod
    def from_str(cls, mesh_str):
        """The Mesh whose str() is mesh_str; None when the text is not one."""
        import ast
        try:
            d = ast.literal_eval(mesh_str.replace("Mesh", ""))
            return cls(np.array(d["device_ids"]), d["mesh_shape"], d["axis_names"])
        except (ValueError, SyntaxError, KeyError, TypeError):
            return None

    def get_op_sharding(self, partition_spec):
        """The OpSharding (torch_xla._XLAC.OpSharding) of partition_spec
        over this mesh; the spec is checked as mark_sharding checks it."""
        from .op_sharding import OpSharding
        return OpSharding.from_mesh(self, tuple(partition_spec))


class HybridMesh(Mesh):
    """``HybridMesh(ici_mesh_shape=, dcn_mesh_shape=None, axis_names=None)``:
    a mesh of ici_mesh_shape * dcn_mesh_shape (elementwise). lazytpu's cores
    are one slice of one host, so a dcn_mesh_shape over more than one slice
    raises ValueError (as torch_xla does on a single slice); the devices are
    placed in core order."""

    def __init__(self, *, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None):
        ici_mesh_shape = tuple(int(s) for s in ici_mesh_shape)
        if dcn_mesh_shape is None:
            dcn_mesh_shape = (1,) * len(ici_mesh_shape)
        dcn_mesh_shape = tuple(int(s) for s in dcn_mesh_shape)
        if len(ici_mesh_shape) != len(dcn_mesh_shape):
            raise AssertionError("HybridMesh: ici_mesh_shape %s and dcn_mesh_shape %s differ "
                                 "in rank" % (ici_mesh_shape, dcn_mesh_shape))
        if int(np.prod(dcn_mesh_shape)) > 1:
            raise ValueError("Invalid dcn_mesh_shape for single slice mesh: %s (lazytpu's "
                             "cores are one slice)" % (dcn_mesh_shape,))
        n = global_runtime_device_count()
        if int(np.prod(ici_mesh_shape)) != n:
            raise ValueError("Number of devices %d must equal the product of mesh_shape %s"
                             % (n, ici_mesh_shape))
        self.ici_mesh_shape = ici_mesh_shape
        self.dcn_mesh_shape = dcn_mesh_shape
        mesh_shape = tuple(a * b for a, b in zip(ici_mesh_shape, dcn_mesh_shape))
        super().__init__(np.arange(n), mesh_shape, axis_names)


def get_1d_mesh(axis_name=None):
    """All cores in one axis (named axis_name if given)."""
    n = global_runtime_device_count()
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


def set_global_mesh(mesh):
    """The mesh that APIs given no mesh use (FSDPv2, manual sharding)."""
    _GLOBAL_MESH[0] = mesh


def get_global_mesh():
    """The mesh set with set_global_mesh, or None."""
    return _GLOBAL_MESH[0]
