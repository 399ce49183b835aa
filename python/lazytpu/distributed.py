"""lazytpu.distributed: a torch.distributed backend over lazytpu's collectives,
so DistributedDataParallel and torch.distributed calls work on the device.

    import lazytpu.distributed                    # registers backend "lazytpu"
    dist.init_process_group("lazytpu", init_method="lazytpu://")
    model = DDP(model.to(lazytpu.device()))

Inside a world started by lazytpu-run / lazytpu.spawn every process already
knows its rank and the world size (lazytpu.world): the ``lazytpu://`` (and,
in torch_xla compatibility mode, ``xla://``) init method needs no address.
Collectives on device tensors are traced into the step's graph like
lazytpu.all_reduce; the Work they return is complete at once (the value is
there when the step runs). The store (which torch.distributed needs for its
own bookkeeping) is a FileStore next to the world's shared memory: one host.
"""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from . import _C
from . import collectives as _coll
from .world import get_ordinal, world_size

__all__ = ["ProcessGroupLazyTPU", "register_backend"]

_REDUCE_OPS = [(dist.ReduceOp.SUM, _coll.REDUCE_SUM), (dist.ReduceOp.PRODUCT, _coll.REDUCE_MUL),
               (dist.ReduceOp.MIN, _coll.REDUCE_MIN), (dist.ReduceOp.MAX, _coll.REDUCE_MAX),
               (dist.ReduceOp.BAND, _coll.REDUCE_AND), (dist.ReduceOp.BOR, _coll.REDUCE_OR)]


def _done(result):
    fut = torch.futures.Future()
    fut.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(fut)


def _reduce_type(op, size=None):
    if op == dist.ReduceOp.AVG:
        return _coll.REDUCE_SUM, 1.0 / max(size or world_size(), 1)
    for torch_op, kind in _REDUCE_OPS:
        if op == torch_op:
            return kind, 1.0
    raise RuntimeError("lazytpu process group: reduce op %s is not supported" % op)


class ProcessGroupLazyTPU(ProcessGroup):
    """A ProcessGroup whose collectives are lazytpu's, over the whole world
    or, when ``_groups()`` names replica groups (a partition of the world's
    ordinals, as ``groups=`` of lazytpu's collectives), over this process's
    group: all_reduce, all_gather, reduce_scatter, reduce; the others need
    the whole world."""

    def __init__(self, prefix_store, rank, size, timeout, name="lazytpu"):
        super().__init__(rank, size)
        self._name = name
        self._timeout = timeout

    def getBackendName(self):
        return self._name

    def _groups(self):
        """Replica groups of this process group (None: the whole world)."""
        return None

    def _whole_world(self, what):
        if self._groups():
            raise NotImplementedError("lazytpu process group: %s on a subgroup (groups %s)"
                                      % (what, self._groups()))

    # every collective updates its output tensors in place and returns a
    # completed Work
    def allreduce(self, tensors, opts):
        kind, scale = _reduce_type(opts.reduceOp, self.size())
        _coll.all_reduce(kind, list(tensors), scale=scale, groups=self._groups())
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def allgather(self, output_tensors_list, input_tensors, opts=None):
        for outs, t in zip(output_tensors_list, input_tensors):
            g = _coll.all_gather(t.unsqueeze(0), dim=0, groups=self._groups())
            with torch.no_grad():
                for k, o in enumerate(outs):
                    o.copy_(g[k])
        return _done(output_tensors_list)

    def _allgather_base(self, output_tensor, input_tensor, opts=None):
        with torch.no_grad():
            output_tensor.copy_(_coll.all_gather(input_tensor, dim=0, groups=self._groups())
                                .reshape(output_tensor.shape))
        return _done([output_tensor])

    # torch 2.13's names for the single-tensor forms (dist.all_gather_into_tensor
    # and dist.reduce_scatter_tensor call these; torch 2.9, which torch_xla
    # 2.9 was built for, called _allgather_base / _reduce_scatter_base), and
    # their coalesced forms (dist._coalescing_manager): one collective each
    def all_gather_single(self, output_tensor, input_tensor, opts=None):
        return self._allgather_base(output_tensor, input_tensor, opts)

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None):
        for o, i in zip(output_tensors, input_tensors):
            self._allgather_base(o, i, opts)
        return _done(list(output_tensors))

    def reduce_scatter_single(self, output_tensor, input_tensor, opts):
        return self._reduce_scatter_base(output_tensor, input_tensor, opts)

    def reduce_scatter_single_coalesced(self, output_tensors, input_tensors, opts):
        for o, i in zip(output_tensors, input_tensors):
            self._reduce_scatter_base(o, i, opts)
        return _done(list(output_tensors))

    def broadcast(self, tensors, opts):
        if self.size() == 1:                 # a group of one: the values stay
            return _done(tensors)
        self._whole_world("broadcast")
        root = opts.rootRank
        with torch.no_grad():
            for t in tensors:
                t.copy_(_coll.broadcast(t, root))
        return _done(tensors)

    def reduce_scatter(self, output_tensors, input_tensors_list, opts):
        kind, scale = _reduce_type(opts.reduceOp, self.size())
        n = self.size()
        for out, ins in zip(output_tensors, input_tensors_list):
            stacked = torch.stack(list(ins))            # [n, *shape]
            mine = _coll.reduce_scatter(kind, stacked, scale, 0, n, groups=self._groups())
            with torch.no_grad():
                out.copy_(mine.reshape(out.shape))
        return _done(output_tensors)

    def _reduce_scatter_base(self, output_tensor, input_tensor, opts):
        kind, scale = _reduce_type(opts.reduceOp, self.size())
        mine = _coll.reduce_scatter(kind, input_tensor, scale, 0, self.size(),
                                    groups=self._groups())
        with torch.no_grad():
            output_tensor.copy_(mine.reshape(output_tensor.shape))
        return _done([output_tensor])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        self._whole_world("all_to_all")
        if output_split_sizes or input_split_sizes:
            raise RuntimeError("lazytpu process group: all_to_all with uneven splits")
        res = _coll.all_to_all(input, 0, 0, self.size())
        with torch.no_grad():
            output.copy_(res)
        return _done([output])

    def reduce(self, tensors, opts):
        kind, scale = _reduce_type(opts.reduceOp, self.size())
        res = [_coll.all_reduce(kind, t, scale=scale, groups=self._groups()) for t in tensors]
        if self.rank() == opts.rootRank:
            with torch.no_grad():
                for t, r in zip(tensors, res):
                    t.copy_(r)
        return _done(tensors)

    def barrier(self, opts=None):
        self._whole_world("barrier")
        _coll.rendezvous("lazytpu.distributed.barrier")
        return _done([])


def _create(name, cls):
    def create(prefix_store, rank, size, timeout):
        return cls(prefix_store, rank, size, timeout, name)
    return create


def _store_path():
    shm = (_C.option("LAZYTPU_SHM_NAME") or "").strip("/") or "lazytpu-single-%d" % os.getpid()
    return os.path.join(tempfile.gettempdir(), "%s.store" % shm)


def _rendezvous(url, timeout=datetime.timedelta(minutes=5), **kwargs):
    rank, size = get_ordinal(), world_size()
    store = dist.FileStore(_store_path(), size)
    store.set_timeout(timeout)
    yield (store, rank, size)
    raise RuntimeError("lazytpu rendezvous: unable to perform re-rendezvous")


_registered = set()


def register_backend(name="lazytpu", cls=None):
    """Registers backend `name` (process groups of class `cls`, a
    ProcessGroupLazyTPU) and init method ``<name>://`` with torch.distributed
    (idempotent)."""
    if name in _registered:
        return
    dist.Backend.register_backend(name, _create(name, cls or ProcessGroupLazyTPU),
                                  devices=[name])
    dist.register_rendezvous_handler(name, _rendezvous)
    _registered.add(name)


register_backend("lazytpu")
