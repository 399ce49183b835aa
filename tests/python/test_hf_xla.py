"""Hugging Face Transformers and Accelerate in torch_xla compatibility mode
(``python -m lazytpu script.py``: transformers and accelerate find
``torch_xla``, Trainer's device is ``xla:0``, ParallelMode.TPU, Accelerate's
DistributedType.XLA with its MpDeviceLoader and ``xm.optimizer_step``), the
unchanged script tests/python/scripts/hf_train.py compared with the same
script on the CPU: per-step losses, final weights, eval loss, the saved model
reloaded on the CPU, no CPU fallback, nothing compiled after the first half
of training, a step boundary per optimizer step.

Products run at f32 (LAZYTPU_MATMUL_PRECISION=f32): compatibility mode
otherwise starts f32 matmuls at the TPU's one-pass bf16 precision.

Trainer is given ``optim="adamw_torch"``, as a TPU user must: its default
since torch 2.8, fused AdamW, is refused by PyTorch on xla tensors (PyTorch
does not list xla among the fused devices), here as under torch_xla 2.9
(test_trainer_default_fused_adamw_refused).
"""
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed "
                    "(scripts/bootstrap.sh installs it)")
pytest.importorskip("accelerate", reason="accelerate is not installed "
                    "(scripts/bootstrap.sh installs it)")

from test_hf import STEPS, compare  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "hf_train.py")


def env_for(compat):
    env = dict(os.environ)
    for k in ("ACCELERATE_TORCH_DEVICE", "LAZYTPU_XLA_COMPAT", "XLA_USE_BF16"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
        env.get("PYTHONPATH", "")
    if compat:
        env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    return env


def run(tmp_path, model, way, compat, extra=(), expect_ok=True):
    """hf_train.py in a fresh process, on the CPU or under ``python -m
    lazytpu``; returns its result dict (or the CompletedProcess when
    expect_ok is False)."""
    out = str(tmp_path / ("%s-%s-%s.pt" % (model, way, "xla" if compat else "cpu")))
    pre = ["-m", "lazytpu"] if compat else []
    cmd = [sys.executable] + pre + [SCRIPT, "--model", model, "--way", way, "--steps",
                                    str(STEPS), "--out", out] + list(extra)
    p = subprocess.run(cmd, env=env_for(compat), capture_output=True, text=True, timeout=600,
                       cwd=str(tmp_path))
    if not expect_ok:
        return p
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout[-3000:],
                                                     p.stderr[-6000:])
    return torch.load(out, weights_only=False)


def check_steps(dev):
    """Nothing compiled in the second half of training; at least one step
    boundary (the loader's, Trainer's mark_step, an optimizer step) per
    optimizer step there."""
    half, trained = dev["half"], dev["trained"]
    assert trained["UncachedCompile"] == half["UncachedCompile"], (half, trained)

    def bounds(c):
        s = c["syncs"]
        return sum(s.get(k, 0) for k in ("SyncCause::loader_step", "SyncCause::mark_step",
                                         "SyncCause::optimizer_step"))
    assert bounds(trained) - bounds(half) >= STEPS - STEPS // 2, (half, trained)


@pytest.mark.parametrize("model", ["bert", "gpt2"])
def test_trainer_one_core(tmp_path, model):
    """An unchanged Trainer script on xla:0 (BERT sequence classification,
    GPT-2 causal LM with its tied head) against the CPU within 1e-4."""
    cpu = run(tmp_path, model, "trainer", False, ["--optim", "adamw_torch"])
    dev = run(tmp_path, model, "trainer", True, ["--optim", "adamw_torch"])
    assert dev["device"] == "xla:0", dev["device"]
    compare(cpu, dev, same_eval_formula=model != "gpt2", device_prefix="xla")
    check_steps(dev)


def test_accelerate_loop_one_core(tmp_path):
    """An unchanged Accelerate loop (Accelerator(), prepare, backward, step)
    on xla:0 against the CPU."""
    cpu = run(tmp_path, "gpt2", "accelerate", False)
    dev = run(tmp_path, "gpt2", "accelerate", True)
    compare(cpu, dev, device_prefix="xla")
    check_steps(dev)


def test_trainer_default_fused_adamw_refused(tmp_path):
    """Trainer's default optimizer (fused AdamW) on xla tensors: PyTorch's own
    RuntimeError, as with torch_xla 2.9 on a TPU."""
    p = run(tmp_path, "bert", "trainer", True, expect_ok=False)
    assert p.returncode != 0
    assert "RuntimeError: `fused=True` requires all the params" in p.stderr, p.stderr[-3000:]
    assert "xla" in p.stderr.splitlines()[-1]
