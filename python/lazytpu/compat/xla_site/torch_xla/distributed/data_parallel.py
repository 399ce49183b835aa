"""torch_xla.distributed.data_parallel: DataParallel, torch_xla's older
thread-per-device replication (one model copy per device of the process, a
thread each, fed by a ParallelLoader). lazytpu replicates across processes
(xmp.spawn, one device each), so DataParallel runs on one device: the
process's own device in a launched world, or one device given by
device_ids; several devices in one process are refused (NotImplementedError:
their threads' optimizer steps would not all-reduce here). With no device
(device_ids=[]) the network runs as it is, on its own device, as in 2.9."""
import copy
import sys
import threading
import traceback

import torch

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class Context:
    """Per-device state that lives as long as the DataParallel object."""

    def __init__(self, device):
        self.device = device

    def getattr_or(self, name, defval):
        """Attribute `name`, set to defval (or defval()) when missing."""
        value = getattr(self, name, None)
        if value is None:
            value = defval() if callable(defval) else defval
            setattr(self, name, value)
        return value


class DataParallel:
    """DataParallel(network, device_ids=None, **loader_kwargs): network is a
    Module or a callable returning one; device_ids defaults to
    xm.get_xla_supported_devices()."""

    def __init__(self, network, device_ids=None, **kwargs):
        if device_ids is None:
            device_ids = xm.get_xla_supported_devices()
        device_ids = [str(d) for d in device_ids]
        if len(device_ids) > 1:
            raise NotImplementedError(
                "torch_xla.distributed.data_parallel.DataParallel over %d devices of one "
                "process (%s): thread-per-device replication is not part of lazytpu's "
                "torch_xla layer (a device is a process here); run the loop under "
                "xmp.spawn / torch_xla.launch, one device per process, or give one device"
                % (len(device_ids), ", ".join(device_ids)))
        module = network if isinstance(network, torch.nn.Module) else network()
        self._kwargs = kwargs
        self._native_run = not device_ids
        if self._native_run:
            devices = {str(p.device) for p in module.parameters()}
            if len(devices) > 1:
                raise RuntimeError("Model uses more than one device: {}".format(sorted(devices)))
            device_ids = [devices.pop() if devices else "cpu"]
            self._models = [module]
        else:
            self._models = [copy.deepcopy(module).to(device=torch.device(device_ids[0]))]
        self._device_ids = device_ids
        self._contexts = [Context(torch.device(device_ids[0]))]

    @property
    def devices(self):
        return self._device_ids

    @property
    def models(self):
        return self._models

    def __call__(self, loop_fn, loader, batchdim=0, **kwargs):
        """One epoch: loop_fn(model, device_loader, device, context) on the
        device's thread; returns [its result]. An exception in loop_fn is
        printed and re-raised here (2.9 ends the process with status 17,
        which with one device only loses the traceback)."""
        model, device, context = self._models[0], self._device_ids[0], self._contexts[0]
        if self._native_run:
            return [loop_fn(model, enumerate(loader), torch.device(device), context,
                            self._kwargs)]
        xm.wait_device_ops()
        para_loader = pl.ParallelLoader(loader, self._device_ids, batchdim=batchdim,
                                        **self._kwargs)
        result = {}

        def run():
            try:
                xm.set_replication(device, self._device_ids)
                result["value"] = loop_fn(model, para_loader.per_device_loader(device),
                                          torch.device(device), context, **kwargs)
            except BaseException as e:  # reported on the caller's thread
                print("Exception in model function for device={}: {}".format(device, e),
                      file=sys.stderr)
                traceback.print_exc(limit=16, file=sys.stderr)
                result["error"] = e

        thread = threading.Thread(target=run, name="torch_xla-data-parallel-%s" % device,
                                  daemon=True)
        try:
            thread.start()
            thread.join()
        finally:
            para_loader.close()
        if "error" in result:
            raise result["error"]
        return [result.get("value")]
