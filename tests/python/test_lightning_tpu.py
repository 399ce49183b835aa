"""Lightning's own TPU path on lazytpu: Trainer(accelerator="tpu") in the
torch_xla compatibility mode.

tests/xla_compat/scripts/lightning_tpu.py is a plain Lightning script (no
lazytpu import). It runs unchanged under `lazytpu-run python ...` (8 cores:
Lightning's XLAStrategy starts the workers with xmp.spawn) and `python -m
lazytpu ...` (1 core: SingleDeviceXLAStrategy), through Lightning's
XLAAccelerator, XLAStrategy / SingleDeviceXLAStrategy, XLAPrecision and
XLACheckpointIO. Each run is compared with the same model trained by
Lightning on the CPU in this process with the same global batch.
"""
import glob
import importlib.util
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

L = pytest.importorskip("lightning", reason="lightning is not installed in this "
                        "environment (scripts/bootstrap.sh installs it)")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "tests", "xla_compat", "scripts", "lightning_tpu.py")
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "lazytpu-run")

_spec = importlib.util.spec_from_file_location("lightning_tpu_script", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def run(cmd, timeout=900):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    # compared with Lightning on the CPU: f32 products, not the TPU's default
    # one bf16 pass (the script itself stays unchanged)
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=REPO)
    assert p.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
        p.returncode, p.stdout[-6000:], p.stderr[-6000:])
    return p


def train(tmp_path, devices, launcher, precision="32-true", ckpt=False):
    """Runs the script in compatibility mode; returns its result and every
    ordinal's report."""
    out = tmp_path / "out.pt"
    cmd = [SCRIPT, "--devices", devices, "--precision", precision]
    if ckpt:
        cmd += ["--ckpt-dir", str(tmp_path / "ckpt")]
    cmd.append(str(out))
    if launcher == "lazytpu-run":
        cmd = [LAUNCHER, "python"] + cmd
    else:
        cmd = [sys.executable, "-m", "lazytpu"] + cmd
    run(cmd)
    result = torch.load(out, weights_only=False)
    ranks = [torch.load(f, weights_only=False)
             for f in sorted(glob.glob(str(tmp_path / "rank*.pt")))]
    return result, ranks


def cpu_fit(shuffled):
    """Lightning on the CPU with the global batch. On several cores Lightning
    shards the training loader with DistributedSampler(shuffle=True, seed=0);
    a one-replica DistributedSampler gives the same global batches here."""
    model = script.Net()
    ds = script.dataset()
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True) if shuffled else None
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(ds, batch_size=script.GLOBAL_BATCH, sampler=sampler),
                DataLoader(ds, batch_size=script.GLOBAL_BATCH))
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            {k: float(v) for k, v in trainer.callback_metrics.items()})


@pytest.fixture(scope="module")
def cpu_sharded():
    return cpu_fit(shuffled=True)


@pytest.fixture(scope="module")
def cpu_plain():
    return cpu_fit(shuffled=False)


def assert_same_weights(got, want, atol=2e-5):
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=atol, rtol=1e-4,
                                   msg=lambda m: k + ": " + m)


def assert_lightning_xla(result, strategy):
    assert result["accelerator"] == "lightning.pytorch.accelerators.xla.XLAAccelerator"
    assert result["strategy"] == strategy
    assert result["precision"] == "lightning.pytorch.plugins.precision.xla.XLAPrecision"


def assert_on_device_without_fallback(ranks, n):
    assert len(ranks) == n
    for r, rep in enumerate(ranks):
        assert rep["batch_device"] == "xla", "ordinal %d trained on %s" % (r, rep["batch_device"])
        # torch_xla 2.9 lists a value read (.item()) among the executed fallback
        # ops as aten::_local_scalar_dense, and so does the compatibility layer:
        # Lightning reads logged values on the host; any other op is a fallback
        ops = [o for o in rep["fallback_ops"] if o != "aten::_local_scalar_dense"]
        assert ops == [], "ordinal %d ran CPU fallbacks: %s" % (r, ops)


def test_eight_cores_match_cpu_and_checkpoint_loads_on_cpu(tmp_path, cpu_sharded):
    """accelerator="tpu", devices=8 under `lazytpu-run python script.py`:
    XLAStrategy spawns 8 workers (xmp.spawn), MpDeviceLoader feeds them,
    XLAPrecision's xm.optimizer_step all-reduces the gradients; the weights
    equal the CPU run with the global batch (8 x 4 vs 32), no core fell back
    to the CPU, and ModelCheckpoint's files (written by ordinal 0 from the
    device through XLACheckpointIO) hold CPU tensors that load on the CPU."""
    ref, ref_metrics = cpu_sharded
    result, ranks = train(tmp_path, "8", "lazytpu-run", ckpt=True)
    assert_lightning_xla(result, "lightning.pytorch.strategies.xla.XLAStrategy")
    assert result["num_devices"] == 8
    assert_on_device_without_fallback(ranks, 8)
    assert_same_weights(result["state_dict"], ref)
    # the validation loss is reduced over the 8 shards (sync_dist: xm.mesh_reduce)
    assert abs(result["metrics"]["val_loss"] - ref_metrics["val_loss"]) < 1e-5

    best = result["best_model_path"]
    last = str(tmp_path / "ckpt" / "last.ckpt")
    assert best and os.path.exists(best) and os.path.exists(last)
    for path in (best, last):
        ck = torch.load(path, map_location=None, weights_only=False)
        for k, v in ck["state_dict"].items():
            assert v.device.type == "cpu", "%s: %s saved on %s" % (path, k, v.device)
        for state in ck["optimizer_states"][0]["state"].values():
            assert state["momentum_buffer"].device.type == "cpu"
    cpu_model = script.Net.load_from_checkpoint(last, map_location="cpu")
    assert next(cpu_model.parameters()).device.type == "cpu"
    assert_same_weights(dict(cpu_model.state_dict()), ref)


@pytest.mark.parametrize("devices,core", [("1", 0), ("[3]", 3)])
def test_one_core_matches_cpu(tmp_path, cpu_plain, devices, core):
    """devices=1 and devices=[3] under `python -m lazytpu script.py`:
    SingleDeviceXLAStrategy on xla:0 / xla:3 in this process."""
    ref, ref_metrics = cpu_plain
    result, ranks = train(tmp_path, devices, "python -m lazytpu")
    assert_lightning_xla(result, "lightning.pytorch.strategies.single_xla.SingleDeviceXLAStrategy")
    assert result["root_device"] == "xla:%d" % core
    assert_on_device_without_fallback(ranks, 1)
    assert_same_weights(result["state_dict"], ref)
    assert abs(result["metrics"]["val_loss"] - ref_metrics["val_loss"]) < 1e-5


def test_bf16_true_one_core(tmp_path, cpu_plain):
    """precision="bf16-true": XLAPrecision sets XLA_USE_BF16=1 after torch_xla
    is imported; lazytpu decides the storage mode at the first device tensor
    (as torch_xla does), so float32 weights are stored as bf16: every trained
    weight is a bf16 value, reported as float32, near the float32 CPU run."""
    ref, ref_metrics = cpu_plain
    result, ranks = train(tmp_path, "1", "python -m lazytpu", precision="bf16-true")
    assert_lightning_xla(result, "lightning.pytorch.strategies.single_xla.SingleDeviceXLAStrategy")
    assert_on_device_without_fallback(ranks, 1)
    assert ranks[0]["param_dtype"] == "torch.float32"
    for k, w in result["state_dict"].items():
        assert w.dtype == torch.float32
        assert torch.equal(w, w.bfloat16().float()), "%s is not stored as bf16" % k
        torch.testing.assert_close(w, ref[k], atol=3e-2, rtol=3e-2)
    assert abs(result["metrics"]["val_loss"] - ref_metrics["val_loss"]) < 2e-2
