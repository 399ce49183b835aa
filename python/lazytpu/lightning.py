"""lazytpu.lightning: Lightning 2.x (``lightning.pytorch`` and
``lightning.fabric``) on lazytpu's simulated cores.

    import lightning as L
    import lazytpu.lightning                     # registers accelerator + strategies

    trainer = L.Trainer(accelerator="lazytpu", devices=8)   # or devices=1, [3]
    trainer.fit(model, train_loader, val_loader)

    fabric = L.Fabric(accelerator="lazytpu", devices=8)
    fabric.launch(train)                          # train(fabric) on 8 cores

What ``import lazytpu.lightning`` registers (Lightning offers no entry point
for accelerators or strategies, so this import is the one line a script
adds; an Accelerator or Strategy instance works without the names too):

- accelerator ``"lazytpu"`` (:class:`LazyTPUAccelerator`) in Lightning's and
  Fabric's accelerator registries;
- strategies ``"lazytpu_single"`` (one core, in this process) and
  ``"lazytpu"`` (data parallel, one process per core) in both strategy
  registries. Lightning picks its own strategy for an accelerator it does not
  know ("ddp" for several devices, a CPU SingleDeviceStrategy for one), and
  has no hook for that choice: this module wraps the two connectors'
  ``_choose_strategy`` so that ``accelerator="lazytpu"`` with
  ``strategy="auto"`` picks ``lazytpu_single`` for one device and
  ``lazytpu`` for more. Other accelerators are untouched.

How a step runs: the batch is copied to the core; ``training_step`` and the
backward pass are traced; the gradient all-reduce (mean over the cores) is
traced into the same graph inside the optimizer closure, then
``optimizer.step()``, then a step boundary (``mark_step``: the cached graph
runs asynchronously). Validation, test and predict steps each end with a step
boundary as well. ``self.log(...)`` keeps values on the device; Lightning
reads them on the host only where the user asks for host values (per-step
progress-bar entries, logger writes every ``log_every_n_steps``), and each
such read shows in the metrics report as ``SyncCause::value_read`` /
``TransferFromDeviceTime``.

Several cores: without a launcher, ``fit``/``validate``/``test``/``predict``
(and ``fabric.launch(fn)``) start one worker per core through lazytpu-run,
like Lightning's ``ddp_spawn`` (the trainer, module and data loaders are
pickled; guard the script with ``if __name__ == "__main__":``); ordinal 0's
final weights, ``callback_metrics`` and results come back to the calling
process. Under ``lazytpu-run -n N python script.py`` every process already
is a core: nothing is spawned.

Precision: ``"32-true"``, ``"bf16-true"`` (weights in bf16) and
``"bf16-mixed"`` (``torch.autocast("lazytpu", dtype=torch.bfloat16)``).
Checkpoints (``trainer.save_checkpoint``, ``ModelCheckpoint``,
``fabric.save``) are written with every device tensor copied to the CPU
(:class:`LazyTPUCheckpointIO`), so they load anywhere with ``torch.load``.
"""
import os

import torch
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as _FABRIC_ACCELERATORS
from lightning.fabric.connector import _Connector
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.plugins.precision import MixedPrecision as _FabricMixedPrecision
from lightning.fabric.strategies import STRATEGY_REGISTRY as _FABRIC_STRATEGIES
from lightning.fabric.strategies import ParallelStrategy as _FabricParallelStrategy
from lightning.fabric.strategies import SingleDeviceStrategy as _FabricSingleDeviceStrategy
from lightning.fabric.strategies.launchers.multiprocessing import (
    _MultiProcessingLauncher as _FabricMultiProcessingLauncher,
    _GlobalStateSnapshot as _FabricGlobalStateSnapshot,
)
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.fabric.utilities.distributed import ReduceOp
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.io.wrapper import _WrappingCheckpointIO
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import ParallelStrategy, SingleDeviceStrategy, StrategyRegistry
from lightning.pytorch.strategies.launchers.multiprocessing import (
    _GlobalStateSnapshot,
    _MultiProcessingLauncher,
)
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from . import _C, core, metrics
from . import _integration as _dev

__all__ = ["LazyTPUAccelerator", "LazyTPUSingleStrategy", "LazyTPUStrategy",
           "LazyTPUEnvironment", "LazyTPUCheckpointIO", "FabricLazyTPUSingleStrategy",
           "FabricLazyTPUStrategy"]

NAME = "lazytpu"


# ------------------------------------------------------------ accelerator ----

class LazyTPUAccelerator(Accelerator):
    """Lightning's accelerator for lazytpu cores (``accelerator="lazytpu"``).
    ``devices``: a count (``8``), a list of core indices (``[3]``), ``-1`` or
    ``"auto"`` (every core of this process, ``LAZYTPU_NUM_CORES``)."""

    def setup_device(self, device):
        if device.type != NAME:
            raise ValueError("LazyTPUAccelerator: device %s is not a lazytpu core" % device)

    def teardown(self):
        pass

    @staticmethod
    def parse_devices(devices):
        n = core.device_count()
        if devices in ("auto", -1, "-1", None):
            return list(range(n))
        if isinstance(devices, str):
            devices = devices.strip()
            if "," in devices:
                devices = [int(d) for d in devices.split(",") if d.strip()]
            else:
                devices = int(devices)
        if isinstance(devices, int):
            if devices < 1:
                raise ValueError("accelerator='lazytpu': devices=%d must be >= 1" % devices)
            return list(range(devices))
        devices = [int(d) for d in devices]
        # a count above this process's cores is fine: one worker per core
        # runs them, each seeing its core as lazytpu:0
        for d in devices:
            if d < 0 or (len(devices) == 1 and d >= n):
                raise ValueError("accelerator='lazytpu': core %d does not exist (this "
                                 "process has %d: 0..%d)" % (d, n, n - 1))
        return devices

    @staticmethod
    def get_parallel_devices(devices):
        return [torch.device(NAME, d) for d in devices]

    @staticmethod
    def auto_device_count():
        return core.device_count()

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def name():
        return NAME

    def get_device_stats(self, device):
        """lazytpu's step counters (compiles, steps, host reads)."""
        names = ("MarkStep", "CachedCompile", "UncachedCompile", "SyncCause::value_read")
        return {n: metrics.counter_value(n) or 0 for n in names}

    @classmethod
    def register_accelerators(cls, registry):
        registry.register(NAME, cls, description="lazytpu simulated cores", override=True)


# ---------------------------------------------------------- environment ----

class LazyTPUEnvironment(ClusterEnvironment):
    """Ranks of a lazytpu world: the launcher's LAZYTPU_ORDINAL /
    LAZYTPU_WORLD_SIZE (one process per core, one node per host)."""

    def __init__(self, num_processes=1):
        self._num_processes = num_processes

    @property
    def creates_processes_externally(self):
        return _dev.in_world()

    @property
    def main_address(self):
        return "127.0.0.1"

    @property
    def main_port(self):
        return 0

    @staticmethod
    def detect():
        return _C.option_state("LAZYTPU_WORLD_SIZE") == 1

    def world_size(self):
        return _dev.world_size() if _dev.in_world() else self._num_processes

    def set_world_size(self, size):
        self._num_processes = size

    def global_rank(self):
        return _dev.ordinal()

    def set_global_rank(self, rank):
        pass

    def local_rank(self):
        return core.get_local_ordinal()

    def node_rank(self):
        return _C.option("LAZYTPU_HOST_INDEX")


# ----------------------------------------------------------- checkpoints ----

class LazyTPUCheckpointIO(TorchCheckpointIO):
    """torch.save of the checkpoint with every device tensor copied to the
    CPU first (after a step boundary, so the copies read computed values):
    the file loads on any machine, with or without lazytpu."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        _dev.mark_step()
        super().save_checkpoint(move_data_to_device(checkpoint, torch.device("cpu")), path,
                                storage_options=storage_options)


def _checkpoint_io(strategy):
    io = strategy._checkpoint_io
    if io is None:
        io = strategy._checkpoint_io = LazyTPUCheckpointIO()
    elif isinstance(io, _WrappingCheckpointIO) and io.checkpoint_io is None:
        io.checkpoint_io = LazyTPUCheckpointIO()
    return io


# ---------------------------------------------------------------- helpers ----

def _lazytpu_mixed(plugin, cls):
    """Lightning makes MixedPrecision(device="cuda") for any accelerator but
    cpu/mps; on lazytpu autocast must target the lazytpu device (bf16 only)."""
    if isinstance(plugin, cls) and plugin.device != NAME:
        if plugin.precision != "bf16-mixed":
            raise ValueError("accelerator='lazytpu': precision=%r is not supported (float16 "
                             "does not live on the device); use 'bf16-mixed', 'bf16-true' "
                             "or '32-true'" % plugin.precision)
        return cls(precision="bf16-mixed", device=NAME)
    return plugin


def _reduce(tensor, reduce_op, device, world):
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.tensor(tensor, device=device)
    if world <= 1:
        return tensor
    op = reduce_op
    if isinstance(op, ReduceOp):
        op = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min",
              ReduceOp.PRODUCT: "mul"}.get(op)
        if op is None:
            raise ValueError("lazytpu strategy: reduce_op %s is not supported" % reduce_op)
    op = (op or "mean").lower()
    original = tensor.device
    t = tensor.to(device) if original != device else tensor
    if t.dtype in (torch.float16, torch.uint8, torch.int8, torch.int16):
        t = t.float()
    if op in ("mean", "avg"):
        if not t.is_floating_point():
            t = t.float()
        out = _dev.all_reduce("sum", t, scale=1.0 / world)
    elif op in ("sum", "max", "min", "mul"):
        out = _dev.all_reduce(op, t)
    else:
        raise ValueError("lazytpu strategy: reduce_op %r is not supported" % reduce_op)
    return out.to(original) if original != device else out


def _all_gather(tensor, device, world):
    """[world, *tensor.shape] (a scalar becomes [world])."""
    if world <= 1:
        return tensor.unsqueeze(0) if tensor.dim() == 0 else tensor
    original = tensor.device
    t = tensor.to(device) if original != device else tensor
    t = t.unsqueeze(0)
    out = _dev.all_gather(t, dim=0)
    return out.to(original) if original != device else out


def _gradient_closure(optimizer, closure):
    """closure() (forward + backward), then the gradient mean over the
    world: the all-reduce lands in the same traced step as the backward."""
    def run():
        result = closure()
        _dev.reduce_gradients(optimizer)
        return result
    return run


# ----------------------------------------------- Lightning (Trainer) ----

class _LazyTPUSteps:
    """What both Trainer strategies add: step boundaries, the checkpoint IO,
    bf16 autocast on the right device."""

    @property
    def checkpoint_io(self):
        return _checkpoint_io(self)

    @checkpoint_io.setter
    def checkpoint_io(self, io):
        self._checkpoint_io = io

    @property
    def precision_plugin(self):
        return super().precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, plugin):
        self._precision_plugin = _lazytpu_mixed(plugin, MixedPrecision)

    def setup(self, trainer):
        # evaluation under torch.no_grad, not torch.inference_mode: inference
        # tensors bypass functionalization, which lazytpu's device tensors
        # need (Lightning makes the same choice for its XLA accelerator)
        for loop in (trainer.validate_loop, trainer.test_loop, trainer.predict_loop,
                     trainer.fit_loop.epoch_loop.val_loop):
            loop.inference_mode = False
        super().setup(trainer)

    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        out = super().optimizer_step(optimizer, _gradient_closure(optimizer, closure), model,
                                     **kwargs)
        _dev.mark_step()
        return out

    def validation_step(self, *args, **kwargs):
        out = super().validation_step(*args, **kwargs)
        _dev.mark_step()
        return out

    def test_step(self, *args, **kwargs):
        out = super().test_step(*args, **kwargs)
        _dev.mark_step()
        return out

    def predict_step(self, *args, **kwargs):
        out = super().predict_step(*args, **kwargs)
        _dev.mark_step()
        return out

    def teardown(self):
        # every queued program finished before the module moves to the CPU
        core.wait_device_ops()
        super().teardown()


class LazyTPUSingleStrategy(_LazyTPUSteps, SingleDeviceStrategy):
    """One lazytpu core, in this process (``strategy="lazytpu_single"``)."""

    strategy_name = "lazytpu_single"

    def __init__(self, device=None, accelerator=None, checkpoint_io=None,
                 precision_plugin=None):
        super().__init__(device=device if device is not None else torch.device(NAME, 0),
                         accelerator=accelerator, checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)

    @classmethod
    def register_strategies(cls, registry):
        registry.register(cls.strategy_name, cls, description="one lazytpu core",
                          override=True)


class _LazyTPULauncher(_MultiProcessingLauncher):
    """Runs the Trainer's entry point on every core through lazytpu-run
    (Lightning's spawn launcher with lazytpu's workers: ordinal 0's weights,
    state and callback metrics come back to this process)."""

    def __init__(self, strategy):
        super().__init__(strategy, start_method="spawn")

    @property
    def is_interactive_compatible(self):
        return False

    def launch(self, function, *args, trainer=None, **kwargs):
        if self._already_fit and trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            raise NotImplementedError(
                "Trainer(strategy='lazytpu'): fit() twice on the same Trainer is not supported "
                "(as with Lightning's spawn strategies): make a new Trainer and pass "
                "fit(ckpt_path=...)")
        output = _dev.run_on_cores(self._wrapping_function,
                                   (trainer, function, args, kwargs, None,
                                    _GlobalStateSnapshot.capture()),
                                   nprocs=self._strategy.num_processes)
        if trainer is None:
            return output
        self._already_fit |= trainer.state.fn == TrainerFn.FITTING
        self._recover_results_in_main_process(output, trainer)
        return output.trainer_results

    def _wrapping_function(self, process_idx, trainer, function, args, kwargs, return_queue,
                           global_states=None):
        if global_states is not None:
            global_states.restore()
        results = function(*args, **kwargs)
        if trainer is not None:
            results = self._collect_rank_zero_results(trainer, results)
        return move_data_to_device(results, "cpu")


class LazyTPUStrategy(_LazyTPUSteps, ParallelStrategy):
    """Data parallel over lazytpu cores, one process per core
    (``strategy="lazytpu"``): gradients averaged in the step's graph,
    ordinal 0's parameters broadcast at setup, DistributedSampler shards."""

    strategy_name = "lazytpu"

    def __init__(self, accelerator=None, parallel_devices=None, checkpoint_io=None,
                 precision_plugin=None, sync_module_states=True, **_):
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=LazyTPUEnvironment(), checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self._sync_module_states = sync_module_states

    @property
    def num_processes(self):
        return len(self.parallel_devices) if self.parallel_devices else 1

    @property
    def root_device(self):
        return core.device()

    @property
    def is_distributed(self):
        # read by Lightning's connector: shard the data loaders with a
        # DistributedSampler
        return True

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self):
        if self.cluster_environment is not None:
            self.cluster_environment.set_world_size(self.num_processes)
        rank_zero_only.rank = self.global_rank

    def _configure_launcher(self):
        if _dev.in_world():
            if _dev.world_size() != self.num_processes:
                raise ValueError("Trainer(accelerator='lazytpu', devices=%d) under a launcher "
                                 "with %d processes: use devices=%d"
                                 % (self.num_processes, _dev.world_size(), _dev.world_size()))
            self._launcher = None
        else:
            self._launcher = _LazyTPULauncher(self)

    def setup_environment(self):
        rank_zero_only.rank = self.global_rank
        super().setup_environment()

    def setup(self, trainer):
        super().setup(trainer)
        if self._sync_module_states and self.world_size > 1:
            _dev.broadcast_parameters(self.model)
            _dev.mark_step()

    def model_to_device(self):
        self.model.to(self.root_device)

    def barrier(self, name=None, *args, **kwargs):
        if self.world_size > 1 and _dev.in_world():
            _dev.rendezvous("lightning:" + (name or "barrier"))

    def broadcast(self, obj, src=0):
        if self.world_size <= 1 or not _dev.in_world():
            return obj
        return _dev.broadcast_object(obj, src)

    def reduce(self, tensor, group=None, reduce_op="mean"):
        return _reduce(tensor, reduce_op, self.root_device,
                       self.world_size if _dev.in_world() else 1)

    def all_gather(self, tensor, group=None, sync_grads=False):
        if sync_grads:
            raise NotImplementedError("lazytpu strategy: all_gather(sync_grads=True)")
        return _all_gather(tensor, self.root_device, self.world_size if _dev.in_world() else 1)

    def reduce_boolean_decision(self, decision, all=True):
        if self.world_size <= 1 or not _dev.in_world():
            return decision
        votes = _dev.rendezvous("lightning:decision", b"1" if decision else b"0")
        yes = sum(v == b"1" for v in votes)
        return yes == len(votes) if all else yes > 0

    @classmethod
    def register_strategies(cls, registry):
        registry.register(cls.strategy_name, cls,
                          description="data parallel over lazytpu cores (one process each)",
                          override=True)


# ------------------------------------------------------------- Fabric ----

class _FabricSteps:
    @property
    def checkpoint_io(self):
        return _checkpoint_io(self)

    @checkpoint_io.setter
    def checkpoint_io(self, io):
        self._checkpoint_io = io

    @property
    def precision(self):
        return super().precision

    @precision.setter
    def precision(self, plugin):
        self._precision = _lazytpu_mixed(plugin, _FabricMixedPrecision)

    def optimizer_step(self, optimizer, **kwargs):
        _dev.reduce_gradients(optimizer)
        out = super().optimizer_step(optimizer, **kwargs)
        _dev.mark_step()
        return out

    def module_to_device(self, module):
        # Moving to lazytpu makes new Parameter objects (a device tensor
        # cannot take a CPU tensor's place), while the optimizer the user made
        # before fabric.setup() still holds the CPU ones: remember which is
        # which, setup_module_and_optimizers points the optimizers at the new
        # ones (Fabric does the same for its XLA strategy only).
        before = dict(module.named_parameters())
        module.to(self.root_device)
        after = dict(module.named_parameters())
        moved = getattr(self, "_moved_params", {})
        moved.update({p: after[n] for n, p in before.items() if n in after and after[n] is not p})
        self._moved_params = moved

    def setup_module_and_optimizers(self, module, optimizers, scheduler=None):
        moved = getattr(self, "_moved_params", {})
        for opt in optimizers:
            for group in opt.param_groups:
                group["params"] = [moved.get(p, p) for p in group["params"]]
        self._moved_params = {}
        return super().setup_module_and_optimizers(module, optimizers, scheduler)


class FabricLazyTPUSingleStrategy(_FabricSteps, _FabricSingleDeviceStrategy):
    """Fabric on one lazytpu core."""

    def __init__(self, device=None, accelerator=None, checkpoint_io=None, precision=None):
        super().__init__(device=device if device is not None else torch.device(NAME, 0),
                         accelerator=accelerator, checkpoint_io=checkpoint_io,
                         precision=precision)

    @classmethod
    def register_strategies(cls, registry):
        registry.register("lazytpu_single", cls, description="one lazytpu core", override=True)


class _FabricLazyTPULauncher(_FabricMultiProcessingLauncher):
    def __init__(self, strategy):
        super().__init__(strategy, start_method="spawn")

    @property
    def is_interactive_compatible(self):
        return False

    def launch(self, function, *args, **kwargs):
        return _dev.run_on_cores(self._run, (function, args, kwargs,
                                             _FabricGlobalStateSnapshot.capture()),
                                 nprocs=self._strategy.num_processes)

    def _run(self, process_idx, function, args, kwargs, global_states):
        global_states.restore()
        return move_data_to_device(function(*args, **kwargs), "cpu")


class FabricLazyTPUStrategy(_FabricSteps, _FabricParallelStrategy):
    """Fabric data parallel over lazytpu cores, one process per core."""

    def __init__(self, accelerator=None, parallel_devices=None, checkpoint_io=None,
                 precision=None, **_):
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=LazyTPUEnvironment(), checkpoint_io=checkpoint_io,
                         precision=precision)

    @property
    def num_processes(self):
        return len(self.parallel_devices) if self.parallel_devices else 1

    @property
    def root_device(self):
        return core.device()

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def _configure_launcher(self):
        self._launcher = None if _dev.in_world() else _FabricLazyTPULauncher(self)

    def set_world_ranks(self):
        if self.cluster_environment is not None:
            self.cluster_environment.set_world_size(self.num_processes)
        rank_zero_only.rank = self.global_rank

    def setup_environment(self):
        rank_zero_only.rank = self.global_rank
        super().setup_environment()

    def setup_module(self, module):
        if self.world_size > 1 and _dev.in_world():
            _dev.broadcast_parameters(module)
            _dev.mark_step()
        return module

    def all_reduce(self, tensor, group=None, reduce_op="mean"):
        return _reduce(tensor, reduce_op, self.root_device,
                       self.world_size if _dev.in_world() else 1)

    def all_gather(self, tensor, group=None, sync_grads=False):
        if sync_grads:
            raise NotImplementedError("lazytpu strategy: all_gather(sync_grads=True)")
        return _all_gather(tensor, self.root_device, self.world_size if _dev.in_world() else 1)

    def barrier(self, name=None, *args, **kwargs):
        if self.world_size > 1 and _dev.in_world():
            _dev.rendezvous("fabric:" + (name or "barrier"))

    def broadcast(self, obj, src=0):
        if self.world_size <= 1 or not _dev.in_world():
            return obj
        return _dev.broadcast_object(obj, src)

    def reduce_boolean_decision(self, decision, all=True):
        if self.world_size <= 1 or not _dev.in_world():
            return decision
        votes = _dev.rendezvous("fabric:decision", b"1" if decision else b"0")
        yes = sum(v == b"1" for v in votes)
        return yes == len(votes) if all else yes > 0

    @classmethod
    def register_strategies(cls, registry):
        registry.register("lazytpu", cls, description="data parallel over lazytpu cores",
                          override=True)


# ------------------------------------------------------------ registration ----

def _is_lazytpu(flag):
    return flag == NAME or isinstance(flag, LazyTPUAccelerator)


def _choose_for_lazytpu(original, single, multi):
    def _choose_strategy(self):
        if _is_lazytpu(self._accelerator_flag):
            if len(self._parallel_devices) > 1 or _dev.in_world():
                return multi
            return single(device=self._parallel_devices[0])
        return original(self)
    _choose_strategy.__wrapped__ = original
    return _choose_strategy


def register():
    """Puts the accelerator and strategies in Lightning's and Fabric's
    registries and makes ``accelerator="lazytpu"`` choose them
    (idempotent; done at import)."""
    LazyTPUAccelerator.register_accelerators(AcceleratorRegistry)
    LazyTPUAccelerator.register_accelerators(_FABRIC_ACCELERATORS)
    LazyTPUSingleStrategy.register_strategies(StrategyRegistry)
    LazyTPUStrategy.register_strategies(StrategyRegistry)
    FabricLazyTPUSingleStrategy.register_strategies(_FABRIC_STRATEGIES)
    FabricLazyTPUStrategy.register_strategies(_FABRIC_STRATEGIES)
    for cls, single in ((_AcceleratorConnector, LazyTPUSingleStrategy),
                        (_Connector, FabricLazyTPUSingleStrategy)):
        original = getattr(cls._choose_strategy, "__wrapped__", cls._choose_strategy)
        cls._choose_strategy = _choose_for_lazytpu(original, single, "lazytpu")


register()
