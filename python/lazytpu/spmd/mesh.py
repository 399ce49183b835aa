"""Device meshes: the cores of an SPMD program arranged in named axes."""
import collections

import numpy as np

from .runtime import global_runtime_device_count

_GLOBAL_MESH = [None]


class Mesh:
    """``Mesh(device_ids, mesh_shape, axis_names=None)``: the cores
    ``device_ids`` (a flat list, placed row-major) arranged as an array of
    ``mesh_shape``, one name per axis. Raises AssertionError, like
    torch_xla, when the ids are not as many as the mesh's positions, repeat,
    or exceed the mesh, or the names do not fit."""

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        if not isinstance(device_ids, np.ndarray):
            device_ids = np.array(list(device_ids))
        mesh_shape = tuple(int(s) for s in mesh_shape)
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise AssertionError("Mesh: %d axis names %s for a mesh of shape %s"
                                     % (len(axis_names), axis_names, mesh_shape))
            if len(set(axis_names)) != len(axis_names):
                raise AssertionError("Mesh: axis names %s repeat" % (axis_names,))
        if device_ids.size != int(np.prod(mesh_shape)):
            raise AssertionError("Mesh: %d device ids for a mesh of shape %s (%d positions)"
                                 % (device_ids.size, mesh_shape, int(np.prod(mesh_shape))))
        if len(np.unique(device_ids)) != device_ids.size:
            raise AssertionError("Mesh: device ids %s repeat" % device_ids.tolist())
        self.device_ids = device_ids.reshape(-1)
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        if not all(0 <= d < self.size() for d in self.device_ids.tolist()):
            raise AssertionError("Mesh: device ids %s must lie in [0, %d)"
                                 % (self.device_ids.tolist(), self.size()))

    def size(self):
        return int(np.prod(self.mesh_shape))

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

    __str__ = __repr__


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
