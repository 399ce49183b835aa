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


XLA_SCRIPT = os.path.join(HERE, "scripts", "hf_xla_train.py")
CORE_STEPS = 4


def compare_eight_cores(cpu, out):
    """The 8-core run's result (written to out by process 0) against the CPU
    run with the global batch (given --steps CORE_STEPS: run()'s STEPS does
    not apply): per-step losses, weights, eval loss and the saved model's
    eval loss on the CPU within 1e-4, no CPU fallback. Returns the result."""
    dev = torch.load(out, weights_only=False)
    assert dev["world"] == 8 and dev["device"] == "xla:0", (dev["world"], dev["device"])
    assert len(cpu["losses"]) == len(dev["losses"]) == CORE_STEPS
    for i, (a, b) in enumerate(zip(cpu["losses"], dev["losses"])):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), "loss %d: cpu %r 8 cores %r" % (i, a, b)
    for name, w in cpu["params"].items():
        torch.testing.assert_close(dev["params"][name], w, atol=1e-4, rtol=1e-4,
                                   msg=lambda m: name + ": " + m)
    assert abs(dev["eval_loss"] - cpu["eval_loss"]) <= 1e-4 * abs(cpu["eval_loss"])
    assert abs(dev["cpu_eval_loss"] - cpu["cpu_eval_loss"]) <= 1e-4 * abs(cpu["eval_loss"])
    assert dev["end"]["fallbacks"] == {}, dev["end"]["fallbacks"]
    return dev


@pytest.mark.parametrize("launch", ["xmp", "notebook", "accelerate"])
def test_accelerate_loop_eight_cores(tmp_path, launch):
    """The Accelerate loop on 8 cores, started as torch_xla users start it:
    ``xmp.spawn(main)``; ``notebook_launcher(main, num_processes=8)`` in a
    Kaggle TPU notebook (KAGGLE_* and PJRT_DEVICE=TPU set: the only case in
    which accelerate 1.15's notebook_launcher uses xmp.spawn); ``accelerate
    launch --tpu`` under ``lazytpu-run`` (accelerate imports the script and
    calls main through xmp.spawn).

    The math equals hf_train.py's Accelerate loop on the CPU with the global
    batch: each core takes 1 sample per step, Accelerate shards the
    unshuffled loader so core k takes sample 8t+k at step t, the CPU takes
    samples 8t..8t+7 as one batch of 8; every sample of GPT-2 has the same
    number of tokens, so the mean over cores of the per-core mean losses is
    the CPU's mean loss, and ``xm.optimizer_step`` averages the gradients as
    the CPU's batch mean does. Eval: 24 samples, gathered per sample."""
    cpu = run(tmp_path, "gpt2", "accelerate", False,
              ["--batch", "8", "--steps", str(CORE_STEPS)])
    out = str(tmp_path / ("gpt2-%s-8.pt" % launch))
    script = [XLA_SCRIPT, "--launch", launch, "--model", "gpt2", "--steps", str(CORE_STEPS),
              "--batch", "1", "--out", out]
    env = env_for(True)
    if launch == "accelerate":
        bindir = os.path.dirname(sys.executable)
        cmd = [os.path.join(bindir, "lazytpu-run"), os.path.join(bindir, "accelerate"),
               "launch", "--tpu", "--num_processes", "8", "--main_training_function",
               "main"] + script
    else:
        cmd = [sys.executable, "-m", "lazytpu"] + script
    if launch == "notebook":
        env.update(KAGGLE_KERNEL_RUN_TYPE="Interactive", PJRT_DEVICE="TPU")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                       cwd=str(tmp_path))
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout[-3000:],
                                                     p.stderr[-6000:])
    dev = compare_eight_cores(cpu, out)
    half, trained = dev["half"], dev["trained"]
    assert trained["UncachedCompile"] == half["UncachedCompile"] > 0, (half, trained)
    b = [sum(c["syncs"].get(k, 0) for k in ("SyncCause::loader_step", "SyncCause::mark_step",
                                             "SyncCause::optimizer_step"))
         for c in (half, trained)]
    assert b[1] - b[0] >= CORE_STEPS // 2, (half, trained)


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_trainer_eight_cores(tmp_path, model):
    """An unchanged Trainer script on 8 cores, started as Hugging Face's
    xla_spawn.py starts one on a TPU (``xmp.spawn`` of a function that builds
    and runs the Trainer): per-core batch 1 against the CPU's Trainer with
    the global batch of 8 and the same arguments. Trainer's sampler draws one
    permutation on every core and gives core k every 8th batch of it, so a
    step sees the CPU step's samples; its loss log is the mean over the cores
    and its optimizer step averages the gradients (gradient clipping of the
    reduced gradients included): losses, weights and the eval loss within
    1e-4, the saved model evaluates on the CPU as the CPU-trained one.
    BERT runs with average_tokens_across_devices=False: transformers' default
    scales BERT's loss by the process count on 8 processes (hf_common.py),
    on a TPU as here, which no one-process run reproduces."""
    cpu = run(tmp_path, model, "trainer", False,
              ["--batch", "8", "--steps", str(CORE_STEPS), "--optim", "adamw_torch"])
    out = str(tmp_path / ("%s-trainer-8.pt" % model))
    cmd = [sys.executable, "-m", "lazytpu", XLA_SCRIPT, "--launch", "xmp", "--way", "trainer",
           "--model", model, "--steps", str(CORE_STEPS), "--batch", "1", "--out", out]
    if model == "bert":
        cmd.append("--no-average-tokens")
    p = subprocess.run(cmd, env=env_for(True), capture_output=True, text=True, timeout=900,
                       cwd=str(tmp_path))
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout[-3000:],
                                                     p.stderr[-6000:])
    dev = compare_eight_cores(cpu, out)
    assert dev["trained"]["UncachedCompile"] >= dev["half"]["UncachedCompile"] > 0
