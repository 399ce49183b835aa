"""lazytpu.keras: Keras 3 (torch backend) on lazytpu's simulated cores.

One core::

    KERAS_BACKEND=torch KERAS_TORCH_DEVICE=lazytpu python train.py

    import keras
    import lazytpu.keras                    # step boundaries, steps_per_execution
    model = keras.Sequential([...])
    model.compile(optimizer="adam", loss="...", steps_per_execution=8)
    model.fit(x, y, batch_size=128, epochs=3)

(``with keras.device("lazytpu"): ...`` instead of ``KERAS_TORCH_DEVICE``
works too: what counts is the device the model's variables live on.)

Eight cores, the TPUStrategy experience::

    with lazytpu.keras.strategy(8).scope():
        model = make_model()
        model.compile(optimizer="adam", loss="...")
    model.fit(x, y, batch_size=128 * 8, epochs=3)

What ``import lazytpu.keras`` changes (Keras 3 has no hook for a device's
step function, so it wraps three methods of the torch backend's trainer;
models whose variables are not on a lazytpu core are untouched):

- ``make_train_function`` / ``make_test_function`` /
  ``make_predict_function``: each step (``train_step``, ``test_step``,
  ``predict_step``, yours or Keras's) ends with a step boundary
  (``lazytpu.mark_step()``), so every step is one cached graph and
  steady-state epochs compile nothing. ``steps_per_execution=N`` (refused by
  Keras's torch backend on other devices) runs N steps per call: Keras reads
  the logs on the host once per call, i.e. once every N steps.
- a model records the :func:`strategy` active when it is made, and ``fit``
  of a model made under ``strategy(n).scope()`` with n > 1 trains on n cores: the model
  (architecture, compile configuration, weights and optimizer state, as a
  ``.keras`` archive) and the arrays go to n worker processes (lazytpu-run);
  each worker runs Keras's own ``fit`` with the same global batches (same
  seed, same shuffling) and trains on its 1/n slice of every global batch;
  the gradients are averaged over the cores inside the step's graph, and the
  metric updates are summed over the cores, so the history is that of the
  global batch. Ordinal 0's weights, optimizer state and history come back to
  the calling process's model. Requirements: array inputs (NumPy or CPU
  tensors), global batch sizes divisible by n (the remainder rows of a last
  smaller batch are dropped), serializable models (register custom layers
  with ``keras.saving.register_keras_serializable``), no callbacks.
"""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import threading  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import keras  # noqa: E402
from keras.src.backend.torch import core as _kcore  # noqa: E402
from keras.src.backend.torch.trainer import TorchTrainer  # noqa: E402

from . import _integration as _dev  # noqa: E402
from . import core  # noqa: E402

if keras.backend.backend() != "torch":
    raise ImportError("lazytpu.keras needs Keras's torch backend: set KERAS_BACKEND=torch "
                      "before importing keras (it is %r)" % keras.backend.backend())

__all__ = ["strategy", "Strategy", "on_lazytpu", "device"]

NAME = "lazytpu"


def device(n=0):
    """``keras.device("lazytpu:n")``: layers built inside live on core n."""
    return keras.device("%s:%d" % (NAME, n))


def on_lazytpu(model):
    """True when the model's variables (or, before it is built, Keras's
    current torch device) are on a lazytpu core."""
    for v in getattr(model, "variables", None) or ():
        value = getattr(v, "value", None)
        if isinstance(value, torch.Tensor):
            return value.device.type == NAME
    return str(_kcore.get_device()).startswith(NAME)


# ---------------------------------------------------------- step functions ----

def _shard(batch, shard):
    """Ordinal r's 1/n slice (dim 0) of every tensor in a global batch."""
    if shard is None:
        return batch
    rank, n = shard

    def cut(t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        per = t.shape[0] // n
        if per == 0:
            raise ValueError("lazytpu.keras strategy(%d): a batch of %d rows cannot be "
                             "split over %d cores" % (n, t.shape[0], n))
        return t[rank * per:(rank + 1) * per]
    return keras.tree.map_structure(cut, batch)


def _metric_sync(model):
    """Before/after pair that sums each step's metric updates over the
    cores (metric variables are totals and counts: the sum of every core's
    increments is the increment of the global batch)."""
    variables = list(model.metrics_variables)

    def before():
        return [v.value.clone() for v in variables]

    def after(old):
        deltas = [v.value - o for v, o in zip(variables, old)]
        by_dtype = {}
        for d in deltas:
            by_dtype.setdefault(d.dtype, []).append(d)
        for ds in by_dtype.values():
            _dev.all_reduce("sum", ds)
        for v, o, d in zip(variables, old, deltas):
            v.assign(o + d)
    return before, after


def _step_function(model, step, grad=True, shard=None):
    """fn(data) running ``step`` on each batch of ``data`` (a list of
    steps_per_execution batches), a step boundary after each."""
    sync = _metric_sync(model) if shard is not None and step != model.predict_step else None

    def one(batch):
        batch = _shard(batch, shard)
        if sync is not None:
            old = sync[0]()
        if grad:
            out = step(batch)
        else:
            with torch.no_grad():
                out = step(batch)
        if sync is not None:
            sync[1](old)
            out = model.get_metrics_result()
        _dev.mark_step()
        return out

    def run(data):
        out = None
        for batch in data:
            out = one(batch)
        return out

    def run_predict(data):
        # every batch's predictions of the call, concatenated (Keras appends
        # one output per call)
        outs = [one(batch) for batch in data]
        if len(outs) == 1:
            return outs[0]
        return keras.tree.map_structure(lambda *ts: torch.cat(ts, 0), *outs)
    return run_predict if step == model.predict_step else run


_orig_make = {}


def _wrap_make(kind, grad):
    original = getattr(TorchTrainer, "make_%s_function" % kind)
    _orig_make[kind] = original
    attr = "%s_function" % kind

    def make(self, force=False):
        if not on_lazytpu(self):
            return original(self, force)
        if getattr(self, attr) is not None and not force:
            return getattr(self, attr)
        step = getattr(self, "%s_step" % kind)
        fn = _step_function(self, step, grad=grad, shard=getattr(self, "_lazytpu_shard", None))
        setattr(self, attr, fn)
        return fn
    make.__wrapped__ = original
    make.__doc__ = original.__doc__
    setattr(TorchTrainer, "make_%s_function" % kind, make)


# --------------------------------------------------------------- strategy ----

_active = threading.local()


def _current():
    return getattr(_active, "strategy", None)


class _Scope:
    def __init__(self, strategy):
        self._strategy = strategy
        self._outer = None
        self._device = None

    def __enter__(self):
        self._outer = _current()
        _active.strategy = self._strategy
        self._device = device(0)
        self._device.__enter__()
        return self._strategy

    def __exit__(self, *exc):
        self._device.__exit__(*exc)
        _active.strategy = self._outer
        return False


class Strategy:
    """Data parallel training of a Keras model over ``num_cores`` lazytpu
    cores (one process each). Models made inside :meth:`scope` train on
    all cores in ``fit``; ``evaluate`` and ``predict`` run on core 0 of the
    calling process. ``seed`` seeds every worker alike (shuffling, dropout).
    After a fit, ``last_weight_checksums`` holds every core's sum of
    absolute weights (they are identical when data parallel training
    worked) and ``last_epoch_seconds`` core 0's wall time per epoch."""

    def __init__(self, num_cores=8, seed=1234, timeout=None):
        self.num_cores = int(num_cores)
        self.num_replicas_in_sync = self.num_cores
        self.seed = seed
        self.timeout = timeout
        self.last_weight_checksums = None
        self.last_epoch_seconds = None

    def scope(self):
        return _Scope(self)

    def fit(self, model, args, kwargs):
        import shutil
        import tempfile
        if kwargs.get("callbacks"):
            raise ValueError("lazytpu.keras strategy: fit(callbacks=...) is not supported on "
                             "several cores")
        tmp = tempfile.mkdtemp(prefix="lazytpu-keras-")
        try:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            arrays = {k: _host(v) for k, v in kwargs.items()}
            args = tuple(_host(a) for a in args)
            out = _dev.run_on_cores(_fit_worker, (path, args, arrays, self.seed, model.built),
                                    nprocs=self.num_cores, timeout=self.timeout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        weights, opt_vars, history, params, checksums, seconds = out
        model.set_weights(weights)
        if model.optimizer is not None and opt_vars is not None:
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            for v, a in zip(model.optimizer.variables, opt_vars):
                v.assign(a)
        self.last_weight_checksums = checksums
        self.last_epoch_seconds = seconds
        h = keras.callbacks.History()
        h.set_model(model)
        h.history = history
        h.params = params
        h.epoch = list(range(len(next(iter(history.values()), []))))
        model.history = h
        return h


def strategy(num_cores=8, **kwargs):
    """A :class:`Strategy` over ``num_cores`` cores (TPUStrategy-like)."""
    return Strategy(num_cores, **kwargs)


def _host(v):
    """Arrays (nested) as NumPy on the host, for the workers."""
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(_host(x) for x in v)
    if isinstance(v, dict):
        return {k: _host(x) for k, x in v.items()}
    return v


def _average_gradients(optimizer, n):
    """optimizer.apply(grads) with the gradients first averaged over the n
    cores (traced into the step's graph: Keras's train_step calls apply
    right after the backward pass)."""
    apply = optimizer.apply

    def apply_mean(grads, trainable_variables=None):
        by_dtype = {}
        for g in grads:
            if g is not None:
                by_dtype.setdefault(g.dtype, []).append(g)
        for gs in by_dtype.values():
            _dev.all_reduce("sum", gs, scale=1.0 / n)
        return apply(grads, trainable_variables)
    optimizer.apply = apply_mean


def _fit_worker(index, path, args, kwargs, seed, built):
    """One core's fit (in a lazytpu-run worker)."""
    n = _dev.world_size()
    keras.utils.set_random_seed(seed)
    with device(0):
        model = keras.saving.load_model(path)
    model._lazytpu_shard = (index, n)
    object.__setattr__(model, "_lazytpu_strategy", None)
    _average_gradients(model.optimizer, n)
    if index != 0:
        kwargs = dict(kwargs, verbose=0)
    timer = _EpochTimer()
    with device(0):
        history = model.fit(*args, callbacks=[timer], **kwargs)
    core.wait_device_ops()
    weights = model.get_weights()
    checksum = float(sum(np.abs(w).astype(np.float64).sum() for w in weights))
    sums = [float(b) for b in _dev.rendezvous("lazytpu.keras.checksum",
                                             repr(checksum).encode())]
    opt = model.optimizer
    opt_vars = [_host(v.value) for v in opt.variables] if opt is not None else None
    return (weights, opt_vars, dict(history.history), dict(history.params or {}), sums,
            timer.seconds)


class _EpochTimer(keras.callbacks.Callback):
    """Wall time of each epoch of a worker's fit (strategy.last_epoch_seconds)."""

    def __init__(self):
        super().__init__()
        self.seconds = []
        self._t0 = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        import time
        self._t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        import time
        self.seconds.append(time.perf_counter() - self._t0)


def _wrap_init_and_fit():
    init = TorchTrainer.__init__
    fit = TorchTrainer.fit

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        # a model made inside strategy(n).scope() trains on n cores
        object.__setattr__(self, "_lazytpu_strategy", _current())

    def fit_(self, *args, **kwargs):
        s = getattr(self, "_lazytpu_strategy", None)
        if s is not None and s.num_cores > 1 and not _dev.in_world():
            return s.fit(self, args, kwargs)
        return fit(self, *args, **kwargs)

    __init__.__wrapped__ = init
    fit_.__wrapped__ = fit
    fit_.__doc__ = fit.__doc__
    TorchTrainer.__init__ = __init__
    TorchTrainer.fit = fit_


def _install():
    if getattr(TorchTrainer, "_lazytpu_installed", False):
        return
    _wrap_make("train", grad=True)
    _wrap_make("test", grad=False)
    _wrap_make("predict", grad=False)
    _wrap_init_and_fit()
    TorchTrainer._lazytpu_installed = True


_install()
