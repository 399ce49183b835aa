"""Lightning 2.x on lazytpu (lazytpu.lightning): Trainer(accelerator="lazytpu")
with 1 and 8 cores and Fabric, each compared with the same run on the CPU.

The real Lightning from PyPI (installed by scripts/bootstrap.sh); the module
is skipped, with the reason, only where it cannot be imported. The 8-core runs
start 8 worker processes (lazytpu-run), so models and data are tiny.
"""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

L = pytest.importorskip("lightning", reason="lightning is not installed in this "
                        "environment (scripts/bootstrap.sh installs it)")

import lazytpu  # noqa: E402
import lazytpu.lightning as ltl  # noqa: E402
import lazytpu.metrics as met  # noqa: E402

GLOBAL_BATCH = 32
N = 256          # samples: 8 global batches per epoch


class Net(L.LightningModule):
    """A small MLP classifier; records on which device it trained and what
    the core did (fallbacks, compiles) as logged values, which come back
    from the workers in callback_metrics."""

    def __init__(self, lr=0.1, log_step=False):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = nn.Linear(20, 32)
        self.l2 = nn.Linear(32, 4)
        self.lr = lr
        self.log_step = log_step

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, i):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=self.log_step, on_epoch=True,
                 prog_bar=self.log_step)
        self.log("on_device", float(x.device.type == "lazytpu"), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), sync_dist=True)

    def predict_step(self, batch, i):
        return self(batch[0])

    def on_train_epoch_end(self):
        if self.device.type == "lazytpu":
            self.log("fallback_ops", float(len(met.executed_fallback_ops())))
            self.log("uncached_compiles", float(met.counter_value("UncachedCompile") or 0))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def dataset():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 20, generator=g)
    y = torch.randint(0, 4, (N,), generator=g)
    return TensorDataset(x, y)


def train_loader(batch, cores):
    """What each core iterates. On several cores Lightning shards the loader
    with DistributedSampler(shuffle=True, seed=0) (it always shuffles
    training data when distributed): global batch k is block k of that
    sampler's permutation, which a one-replica DistributedSampler gives a
    single-device run."""
    ds = dataset()
    if cores > 1:
        return DataLoader(ds, batch_size=batch)
    return DataLoader(ds, batch_size=batch,
                      sampler=DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True))


def fit(accelerator, devices, batch, epochs=2, **trainer_kwargs):
    model = Net()
    kw = dict(max_epochs=epochs, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False)
    kw.update(trainer_kwargs)
    trainer = L.Trainer(accelerator=accelerator, devices=devices, **kw)
    trainer.fit(model, train_loader(batch, devices if isinstance(devices, int) else 1),
                DataLoader(dataset(), batch_size=batch))
    return model, trainer


def weights(model):
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def assert_same_weights(a, b, atol=2e-5):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-4, msg=lambda m: k + ": " + m)


@pytest.fixture(scope="module")
def cpu_run():
    model, trainer = fit("cpu", 1, GLOBAL_BATCH)
    return weights(model), dict(trainer.callback_metrics)


def test_one_core_matches_cpu(cpu_run):
    ref, ref_metrics = cpu_run
    before = set(met.executed_fallback_ops())
    model, trainer = fit("lazytpu", 1, GLOBAL_BATCH, epochs=3)
    assert isinstance(trainer.strategy, ltl.LazyTPUSingleStrategy)
    assert isinstance(trainer.accelerator, ltl.LazyTPUAccelerator)
    assert trainer.callback_metrics["on_device"].item() == 1.0
    assert set(met.executed_fallback_ops()) == before, "CPU fallbacks ran"
    # 2 epochs to compare: rerun with the CPU's epoch count
    model, trainer = fit("lazytpu", 1, GLOBAL_BATCH, epochs=2)
    assert_same_weights(weights(model), ref)
    torch.testing.assert_close(trainer.callback_metrics["val_loss"].cpu(),
                               ref_metrics["val_loss"], atol=1e-5, rtol=1e-4)


def test_steady_state_compiles_nothing():
    fit("lazytpu", 1, GLOBAL_BATCH, epochs=1)
    c0 = met.counter_value("UncachedCompile")
    fit("lazytpu", 1, GLOBAL_BATCH, epochs=2)
    assert met.counter_value("UncachedCompile") == c0


def test_eight_cores_match_cpu(cpu_run):
    ref, ref_metrics = cpu_run
    model, trainer = fit("lazytpu", 8, GLOBAL_BATCH // 8)
    assert isinstance(trainer.strategy, ltl.LazyTPUStrategy)
    m = trainer.callback_metrics
    assert m["on_device"].item() == 1.0
    assert m["fallback_ops"].item() == 0.0, "CPU fallbacks ran on core 0"
    assert_same_weights(weights(model), ref)
    # the validation loss is averaged over the 8 shards (sync_dist)
    torch.testing.assert_close(m["val_loss"].cpu(), ref_metrics["val_loss"], atol=1e-5,
                               rtol=1e-4)


def test_validate_and_predict_match_cpu():
    # Lightning evaluates under torch.inference_mode; the lazytpu strategies
    # switch its loops to no_grad (inference tensors bypass functionalization)
    loader = DataLoader(dataset(), batch_size=GLOBAL_BATCH)
    x, y = dataset().tensors
    ref = Net()
    with torch.no_grad():
        want_pred = ref(x)
        want_loss = F.cross_entropy(want_pred, y)
    trainer = L.Trainer(accelerator="lazytpu", devices=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    got = trainer.validate(Net(), loader, verbose=False)[0]["val_loss"]
    assert abs(got - want_loss.item()) < 1e-5
    pred = torch.cat(trainer.predict(Net(), loader))
    assert pred.device.type == "cpu" or pred.device.type == "lazytpu"
    torch.testing.assert_close(pred.cpu(), want_pred, atol=1e-5, rtol=1e-4)


def test_checkpoint_round_trip(tmp_path, cpu_run):
    ckpt_cb = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val_loss",
                                                  save_last=True)
    model, trainer = fit("lazytpu", 1, GLOBAL_BATCH, enable_checkpointing=True,
                         callbacks=[ckpt_cb])
    path = tmp_path / "final.ckpt"
    trainer.save_checkpoint(path)
    assert os.path.exists(ckpt_cb.best_model_path)
    for p in (path, ckpt_cb.best_model_path, ckpt_cb.last_model_path):
        ck = torch.load(p, map_location=None, weights_only=False)
        for k, v in ck["state_dict"].items():
            assert v.device.type == "cpu", "%s: %s saved on %s" % (p, k, v.device)
        for state in ck["optimizer_states"][0]["state"].values():
            assert state["momentum_buffer"].device.type == "cpu"
    # loads into a CPU module with the trained weights
    cpu_model = Net.load_from_checkpoint(path, map_location="cpu")
    assert next(cpu_model.parameters()).device.type == "cpu"
    assert_same_weights(weights(cpu_model), cpu_run[0])
    # and resumes training on the device from it
    more = Net()
    trainer = L.Trainer(accelerator="lazytpu", devices=1, max_epochs=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(more, train_loader(GLOBAL_BATCH, 1), ckpt_path=path)
    assert trainer.current_epoch == 3


def _host_reads(batch, log_step):
    """Reads of device values on the host (HostReads: whether or not the
    value was still pending) of one epoch's fit (no validation) with this
    batch size."""
    r0 = met.counter_value("HostReads") or 0
    trainer = L.Trainer(accelerator="lazytpu", devices=1, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        enable_progress_bar=log_step, limit_val_batches=0)
    trainer.fit(Net(log_step=log_step), train_loader(batch, 1))
    return (met.counter_value("HostReads") or 0) - r0


def test_logging_reads_host_only_when_asked():
    # a fit reads a few values at setup and at the epoch's end (loader
    # lengths, epoch aggregates), the same for 8 or 16 steps: epoch-level
    # logging adds no host read per step
    _host_reads(32, False)                                      # warm the cache
    assert _host_reads(16, False) == _host_reads(32, False)
    # a per-step progress-bar value is read on the host every step
    per_step = _host_reads(16, True) - _host_reads(32, True)
    assert per_step >= N // 32, per_step


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bf16(precision, cpu_run):
    model, trainer = fit("lazytpu", 1, GLOBAL_BATCH, precision=precision)
    if precision == "bf16-mixed":
        assert trainer.precision_plugin.device == "lazytpu"
    else:
        assert next(model.parameters()).dtype == torch.bfloat16
    w = weights(model)
    for k, v in cpu_run[0].items():
        torch.testing.assert_close(w[k].float(), v, atol=0.1, rtol=0.1)


# ---------------------------------------------------------------- Fabric ----

def _fabric_train(fabric, epochs=2):
    fabric.seed_everything(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(
        DataLoader(dataset(), batch_size=GLOBAL_BATCH // fabric.world_size))
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            fabric.backward(F.cross_entropy(model(x), y))
            opt.step()
    total = fabric.all_reduce(torch.tensor(float(fabric.global_rank)), reduce_op="sum")
    return ({k: v.detach().cpu() for k, v in model.state_dict().items()},
            float(total.cpu()), x.device.type, fabric.world_size)


def test_fabric_matches_cpu():
    ref = L.Fabric(accelerator="cpu", devices=1).launch(_fabric_train)[0]
    w, total, where, world = L.Fabric(accelerator="lazytpu", devices=1).launch(_fabric_train)
    assert where == "lazytpu" and world == 1
    assert_same_weights(w, ref)
    w, total, where, world = L.Fabric(accelerator="lazytpu", devices=2).launch(_fabric_train)
    assert where == "lazytpu" and world == 2 and total == 1.0
    assert_same_weights(w, ref)
