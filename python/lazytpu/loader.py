"""lazytpu.loader: input pipelines that keep the simulated core busy
(torch_xla's ``ParallelLoader`` / ``MpDeviceLoader``).

    train_loader = torch.utils.data.DataLoader(ds, batch_size=64,
        sampler=DistributedSampler(ds, num_replicas=lazytpu.world_size(),
                                   rank=lazytpu.get_ordinal()))
    for x, y in lazytpu.loader.MpDeviceLoader(train_loader, lazytpu.device()):
        ...                    # x, y already on the device
        lazytpu.optimizer_step(opt)
        # no mark_step needed: the loader ends the step on the next batch

A background thread pulls batches from the wrapped loader (up to
``loader_prefetch_size`` ahead) and another uploads them to the device (up to
``device_prefetch_size`` ahead), so the host traces step N+1 while batches
for later steps are prepared. Each ``next()`` first ends the previous step
(a sync with cause "loader_step"; every ``batches_per_execution`` batches),
then hands out the next batch. The time a step waited for its batch goes to
metric ``LoaderWaitTime`` and ``LoaderWaits`` counts the waits longer than
1 ms: a report with large values there means the input pipeline is the
bottleneck, not the core.
"""
import atexit
import queue
import threading
import time
import weakref

import torch

from . import _C

__all__ = ["ParallelLoader", "PerDeviceLoader", "MpDeviceLoader"]

_END = object()


class _Failure:
    def __init__(self, exc):
        self.exc = exc


def _to_device(data, device):
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        return type(data)((k, _to_device(v, device)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_to_device(v, device) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_to_device(v, device) for v in data)
    return data


def _shard_batch(data, spec):
    """input_sharding= (a ShardingSpec, or a dict of them by batch key), and
    in SPMD mode the replicated layout of the rest: torch_xla's rules, in
    lazytpu.spmd.sharding.shard_batch."""
    from .spmd.runtime import is_spmd
    if spec is None and not is_spmd():
        return
    from .spmd.sharding import shard_batch
    shard_batch(data, spec)


def _end_step():
    """mark_step with cause loader_step, bounded pipelining (at most
    LAZYTPU_MAX_INFLIGHT steps queued per core, see
    lazytpu.world.limit_inflight), then the step closures."""
    from . import core, world
    _C.sync(-1, _C.SYNC_LOADER_STEP, 0, core._caller(3))
    world.limit_inflight()
    core._run_step_closures()


class PerDeviceLoader:
    """Iterator over one device's batches (from ParallelLoader)."""

    def __init__(self, parent, device):
        self._parent = parent
        self._device = device
        self._queue = parent._device_queues[device]
        self._n = 0
        self._done = False

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._parent)

    def next(self):
        return self.__next__()

    def __next__(self):
        p = self._parent
        if self._done:
            raise StopIteration
        if self._n > 0 and self._n % p._batches_per_execution == 0:
            _end_step()
        t0 = time.perf_counter_ns()
        item = self._queue.get()
        waited = time.perf_counter_ns() - t0
        _C.metric_add("LoaderWaitTime", _C.UNIT_NS, float(waited))
        if waited > 1000000:
            _C.counter_inc("LoaderWaits", 1)
        if item is _END:
            self._done = True
            if self._n % p._batches_per_execution != 0:
                _end_step()
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            p.close()
            raise item.exc
        self._n += 1
        return item


# Loaders whose threads may still run. At interpreter exit they are stopped
# and joined before Python tears down: a daemon thread caught inside a C++
# kernel (uploading a batch) when finalisation kills it aborts the process
# ("terminate called without an active exception").
_live = weakref.WeakSet()


@atexit.register
def _stop_all_loaders():
    for ld in list(_live):
        ld.close(join_timeout=5)


class ParallelLoader:
    """Wraps ``loader`` and feeds ``devices`` (batch k goes to device
    k % len(devices), like torch_xla); ``per_device_loader(device)`` gives
    each device's iterator. One pass over ``loader`` per ParallelLoader."""

    def __init__(self, loader, devices, batchdim=0, batches_per_execution=1,
                 loader_prefetch_size=8, device_prefetch_size=4,
                 host_to_device_transfer_threads=1, input_sharding=None):
        if not devices:
            raise ValueError("lazytpu.ParallelLoader: no devices")
        self._loader = loader
        self._devices = [torch.device(d) for d in devices]
        self._batchdim = batchdim
        self._batches_per_execution = max(1, int(batches_per_execution))
        self._host_queue = queue.Queue(maxsize=max(1, int(loader_prefetch_size)))
        self._device_queues = {d: queue.Queue(maxsize=max(1, int(device_prefetch_size)))
                               for d in self._devices}
        self._input_sharding = input_sharding
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._load_loop, name="lazytpu-loader", daemon=True),
            threading.Thread(target=self._upload_loop, name="lazytpu-upload", daemon=True),
        ]
        for t in self._threads:
            t.start()
        _live.add(self)

    def __len__(self):
        try:
            n = len(self._loader)
        except TypeError:
            return 0
        return n // len(self._devices)

    def per_device_loader(self, device):
        device = torch.device(device)
        if device not in self._device_queues:
            raise ValueError("lazytpu.ParallelLoader: device %s is not one of %s"
                             % (device, self._devices))
        return PerDeviceLoader(self, device)

    def close(self, join_timeout=0):
        """Stops the background threads (pending batches are dropped); with
        join_timeout > 0 also waits up to that long for them to end."""
        self._stop.set()
        for q in [self._host_queue] + list(self._device_queues.values()):
            try:
                while True:
                    q.get_nowait()
            except queue.Empty:
                pass
        for t in self._threads if join_timeout > 0 else ():
            if t is not threading.current_thread():
                t.join(join_timeout)
        _live.discard(self)

    def _put(self, q, item):
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _load_loop(self):
        try:
            for batch in self._loader:
                if not self._put(self._host_queue, batch):
                    return
            self._put(self._host_queue, _END)
        except BaseException as e:  # handed to the consumer
            self._put(self._host_queue, _Failure(e))

    def _upload_loop(self):
        k = 0
        nd = len(self._devices)
        while not self._stop.is_set():
            try:
                item = self._host_queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _END or isinstance(item, _Failure):
                for d in self._devices:
                    self._put(self._device_queues[d], item)
                return
            dev = self._devices[k % nd]
            k += 1
            try:
                batch = _to_device(item, dev)
                _shard_batch(batch, self._input_sharding)
            except BaseException as e:
                for d in self._devices:
                    self._put(self._device_queues[d], _Failure(e))
                return
            if not self._put(self._device_queues[dev], batch):
                return


class MpDeviceLoader:
    """``ParallelLoader(loader, [device]).per_device_loader(device)`` anew
    for every epoch (``iter()``): the loader to use under lazytpu.spawn."""

    def __init__(self, loader, device, **kwargs):
        self._loader = loader
        self._device = device
        self._kwargs = kwargs

    def __iter__(self):
        pl = ParallelLoader(self._loader, [self._device], **self._kwargs)
        return pl.per_device_loader(self._device)

    def __len__(self):
        return len(self._loader)
