"""torch_xla.distributed.xla_backend: registers the torch.distributed backend
'xla' (and init method 'xla://'), implemented by lazytpu.distributed over
lazytpu's collectives.

As in torch_xla 2.9, ``dist.new_group(ranks, pg_options=)`` gives the new
group a ``_mesh`` (the replica groups its collectives run over): the whole
world, one group per rank, the given ``pg_options['xla_pg_options']['mesh']``,
a rectangular mesh inferred from ``ranks`` with ``{'spmd': True}`` (ValueError
when ranks are not a row or column of one), else ``[ranks]``. The ops 2.9
leaves unimplemented raise NotImplementedError."""
import logging

import torch.distributed as dist

from lazytpu.distributed import ProcessGroupLazyTPU
from lazytpu.distributed import register_backend as _register


class ProcessGroupXla(ProcessGroupLazyTPU):
    """The 'xla' process group: lazytpu's, over the replica groups ``_mesh``
    (empty: the whole world). Refused in SPMD mode (AssertionError), as in
    torch_xla 2.9: SPMD's one process drives every core itself."""

    def __init__(self, prefix_store, rank, size, timeout, name="xla"):
        from lazytpu.spmd.runtime import is_spmd
        assert not is_spmd(), ("XLA backend is not supported with SPMD. Please use a CPU "
                               "process group instead.")
        super().__init__(prefix_store, rank, size, timeout, name)
        self._mesh = []

    def _groups(self):
        mesh = self._mesh
        if not mesh or (len(mesh) == 1 and len(mesh[0]) == dist.group.WORLD.size()):
            return None
        return mesh

    def allreduce_coalesced(self, *args):
        raise NotImplementedError

    def recv_anysource(self, *args):
        raise NotImplementedError

    def monitored_barrier(self, *args):
        raise NotImplementedError

    def Options(self, *args):
        raise NotImplementedError


_register("xla", ProcessGroupXla)


def _infer_mesh(slice_ranks, world_size):
    """The rectangular mesh of world_size ranks in which slice_ranks is a
    row (consecutive ranks) or a column (ranks a row's length apart)."""
    n = len(slice_ranks)
    if world_size % n:
        raise ValueError("Given slice length doesn't equal to a side of a rectangle. "
                         "World size: %d, slice length: %d" % (world_size, n))
    start, step = slice_ranks[0], slice_ranks[1] - slice_ranks[0]
    if list(slice_ranks) != list(range(start, start + step * n, step)):
        raise ValueError("Given slice isn't a range with evenly distributed steps: %s"
                         % (slice_ranks,))
    rows = world_size // n
    if step == 1:
        if start % n or start >= world_size:
            raise ValueError("Given horizontal slice doesn't have a correct start: World "
                             "size: %d, slice length: %d, slice: %s"
                             % (world_size, n, slice_ranks))
        return [list(range(i * n, (i + 1) * n)) for i in range(rows)]
    if start >= rows:
        raise ValueError("Given vertical slice doesn't have a correct start: World size: "
                         "%d, slice length: %d, slice: %s" % (world_size, n, slice_ranks))
    if step != rows:
        raise ValueError("Given vertical slice doesn't have a correct step: World size: "
                         "%d, slice length: %d, slice: %s" % (world_size, n, slice_ranks))
    return [list(range(i, i + n * step, step)) for i in range(rows)]


_orig_new_group = dist.new_group


def new_xla_process_group(ranks=None, timeout=dist.default_pg_timeout, backend=None,
                          pg_options=None):
    """torch.distributed.new_group with the 'xla' group's mesh (see above)."""
    opts = pg_options.get("xla_pg_options", {}) if isinstance(pg_options, dict) else {}
    mesh = opts.get("mesh")
    spmd = mesh is None and opts.get("spmd", False)
    pg = _orig_new_group(ranks=ranks, timeout=timeout, backend=backend,
                         pg_options=pg_options)
    if isinstance(pg, ProcessGroupXla) and ranks is not None:
        world = dist.group.WORLD
        if not isinstance(world, ProcessGroupXla):
            raise RuntimeError("xla backend requires the default ProcessGroup to be a "
                               "ProcessGroupXla")
        ranks = list(ranks)
        size = world.size()
        if ranks == list(range(size)):
            pg._mesh = [ranks]
        elif len(ranks) == 1:
            if ranks[0] not in range(size):
                raise ValueError("Given ranks is out of range: World size: %d, ranks: %s"
                                 % (size, ranks))
            pg._mesh = [[r] for r in range(size)]
        elif 1 < len(ranks) < size:
            pg._mesh = mesh or (_infer_mesh(ranks, size) if spmd else [ranks])
        else:
            logging.warning("Can't infer process group mesh from given ranks \"%s\". The "
                            "process group will use the entire world as its collective "
                            "comm group.", ranks)
    return pg


dist.new_group = new_xla_process_group
