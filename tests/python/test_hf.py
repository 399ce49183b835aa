"""Hugging Face Transformers and Accelerate on the plain lazytpu device
(lazytpu.hf), compared with the same program on the CPU: a tiny random-weight
GPT-2 (tied embedding and LM head) and BERT built from configs, Trainer and an
Accelerate loop (tests/python/scripts/hf_train.py, one process per run, as a
user runs it), and generation the TPU way (lazytpu.hf.generate) against
``model.generate`` on the CPU.

The real transformers and accelerate from PyPI (scripts/bootstrap.sh installs
them next to the pinned torch); the module is skipped, with the reason, only
where they cannot be imported.
"""
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(scripts/bootstrap.sh installs it)")
pytest.importorskip("accelerate", reason="accelerate is not installed "
                    "(scripts/bootstrap.sh installs it)")

import lazytpu  # noqa: E402
import lazytpu.hf  # noqa: E402
import lazytpu.metrics as met  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "hf_train.py")
STEPS = 8


def run(tmp_path, model, way, device, extra=()):
    """Runs hf_train.py in a fresh process; returns its result dict."""
    out = str(tmp_path / ("%s-%s-%s.pt" % (model, way, device)))
    env = dict(os.environ)
    env.pop("ACCELERATE_TORCH_DEVICE", None)
    env.pop("LAZYTPU_XLA_COMPAT", None)
    if device == "lazytpu" and "--enable" not in extra:
        env["ACCELERATE_TORCH_DEVICE"] = "lazytpu"
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
        env.get("PYTHONPATH", "")
    cmd = [sys.executable, SCRIPT, "--model", model, "--way", way, "--steps", str(STEPS),
           "--out", out] + list(extra)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                       cwd=str(tmp_path))
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout[-3000:],
                                                     p.stderr[-6000:])
    return torch.load(out, weights_only=False)


def compare(cpu, dev, tol=1e-4, same_eval_formula=True, device_prefix="lazytpu"):
    assert dev["device"].startswith(device_prefix), dev["device"]
    assert cpu["device"] == "cpu", cpu["device"]
    assert len(cpu["losses"]) == len(dev["losses"]) > 0
    for i, (a, b) in enumerate(zip(cpu["losses"], dev["losses"])):
        assert abs(a - b) <= tol * max(1.0, abs(a)), "loss %d: cpu %r lazytpu %r" % (i, a, b)
    assert cpu["params"].keys() == dev["params"].keys()
    for name, p in cpu["params"].items():
        torch.testing.assert_close(dev["params"][name], p, atol=tol, rtol=tol,
                                   msg=lambda m: name + ": " + m)
    assert abs(cpu["eval_loss"] - dev["eval_loss"]) <= tol * max(1.0, abs(cpu["eval_loss"]))
    # the model saved from the device, loaded on the CPU, evaluates as the
    # CPU-trained one; and as on the device where both losses are the same
    # formula (an Accelerate loop: the model's mean loss; Trainer's GPT-2
    # eval_loss divides the summed loss by all label tokens, 64 per batch,
    # not the 60 the shifted loss has)
    assert abs(dev["cpu_eval_loss"] - cpu["cpu_eval_loss"]) <= tol * max(1.0, abs(cpu["eval_loss"]))
    if same_eval_formula:
        assert abs(dev["cpu_eval_loss"] - dev["eval_loss"]) <= tol * max(1.0, abs(dev["eval_loss"]))
    end, half, trained = dev["end"], dev["half"], dev["trained"]
    assert end["fallbacks"] == {}, "CPU fallbacks: %s" % end["fallbacks"]
    assert half is not None
    assert trained["UncachedCompile"] >= half["UncachedCompile"] > 0
    if device_prefix == "lazytpu":   # lazytpu.hf's boundary (compat: the loader's)
        assert trained["SyncCause::optimizer_step"] >= STEPS, trained


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_trainer_plain_device(tmp_path, model):
    """ACCELERATE_TORCH_DEVICE=lazytpu and an unchanged Trainer script: same
    losses, weights and eval loss as on the CPU, no fallback, a step per
    optimizer step, nothing new compiled after the first half."""
    cpu = run(tmp_path, model, "trainer", "cpu")
    dev = run(tmp_path, model, "trainer", "lazytpu")
    compare(cpu, dev, same_eval_formula=model != "gpt2")
    # steady state: the second half of training compiled at most the last
    # step's variants (the LR schedule's end), nothing per step
    trained, half = dev["trained"], dev["half"]
    assert trained["UncachedCompile"] - half["UncachedCompile"] <= 2, (half, trained)
    report = tmp_path / (model + "-trainer-lazytpu.pt.model") / "lazytpu-metrics.txt"
    assert "Counter: CachedCompile" in report.read_text()


FIRST_MOVE = r"""
import sys, torch, transformers
assert "lazytpu" not in sys.modules       # only PyTorch's autoload so far
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=96, n_positions=16,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
cpu = transformers.GPT2LMHeadModel(cfg)
dev = transformers.GPT2LMHeadModel(cfg)
dev.load_state_dict(cpu.state_dict())
getattr(dev, sys.argv[1])("lazytpu") if sys.argv[1] == "to" else dev.lazytpu()
tied = dev.lm_head.weight is dev.transformer.wte.weight
x = torch.randint(1, 96, (2, 16), generator=torch.Generator().manual_seed(1))
for m, d in ((cpu, "cpu"), (dev, "lazytpu")):
    m(input_ids=x.to(d), labels=x.to(d)).loss.backward()
diff = (cpu.transformer.wte.weight.grad - dev.transformer.wte.weight.grad.cpu()).abs().max()
print("tied", tied, "diff", float(diff))
"""


@pytest.mark.parametrize("how", ["to", "lazytpu"])
def test_first_move_keeps_tied_weights(tmp_path, how):
    """The first model.to("lazytpu") / model.lazytpu() of a process that never
    imported lazytpu (the device only named, as Trainer does with
    ACCELERATE_TORCH_DEVICE=lazytpu) keeps GPT-2's embedding and LM head one
    Parameter, so the head's gradient reaches the embedding as on the CPU.
    (It used to run PyTorch's own Module.to, which gave the head a Parameter
    of its own: Trainer's GPT-2 drifted from the CPU by 1e-3 in 3 steps.)"""
    env = dict(os.environ)
    env.pop("LAZYTPU_XLA_COMPAT", None)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
        env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", FIRST_MOVE, how], env=env, capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-4000:]
    words = p.stdout.split()
    assert words[:2] == ["tied", "True"], p.stdout
    assert float(words[3]) < 1e-6, p.stdout


def test_accelerate_loop_enable(tmp_path):
    """An Accelerate loop with lazytpu.hf.enable() (the one-line way)."""
    cpu = run(tmp_path, "gpt2", "accelerate", "cpu")
    dev = run(tmp_path, "gpt2", "accelerate", "lazytpu", extra=["--enable"])
    compare(cpu, dev)


def test_enable_rejects_other_devices(monkeypatch):
    with pytest.raises(ValueError, match="not a lazytpu device"):
        lazytpu.hf.enable("cpu")
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cuda:0")
    with pytest.raises(ValueError, match="another device"):
        lazytpu.hf.enable()


def tiny_lm(eos=5):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=96,
                                  n_positions=256, bos_token_id=0, eos_token_id=eos,
                                  pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("prompt_len", [7, 20])
def test_generate_bounded_graphs(dev, prompt_len):
    """50 greedy tokens: the same tokens as model.generate on the CPU, at
    most 8 compiled graphs, no CPU fallback."""
    m = tiny_lm(eos=None)
    ids = torch.randint(6, 96, (2, prompt_len), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=50, do_sample=False)
    md = m.to(dev)
    lazytpu.mark_step()
    c0 = met.counter_value("UncachedCompile") or 0
    f0 = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    out = lazytpu.hf.generate(md, ids.to(dev), max_new_tokens=50)
    assert out.device.type == "lazytpu"
    assert torch.equal(out.cpu(), ref)
    compiles = (met.counter_value("UncachedCompile") or 0) - c0
    assert 0 < compiles <= 8, compiles
    f1 = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    assert f1 == f0, "fallbacks: %s -> %s" % (f0, f1)


def test_generate_eos_stops_and_pads(dev):
    """A sequence that produced EOS gets padding after it, as on the CPU,
    and generation ends early when every sequence ended."""
    m = tiny_lm(eos=None)
    ids = torch.randint(6, 96, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        free = m.generate(ids, max_new_tokens=30, do_sample=False)
    eos = int(free[0, 7 + 3])          # row 0's fourth new token becomes EOS
    m.generation_config.eos_token_id = eos
    m.config.eos_token_id = eos
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=0)
    out = lazytpu.hf.generate(m.to(dev), ids.to(dev), max_new_tokens=30, pad_token_id=0,
                              stop_check_every=4).cpu()
    n = min(out.shape[1], ref.shape[1])
    assert torch.equal(out[:, :n], ref[:, :n])
    assert (out[0, 7 + 4:] == 0).all()


def test_generate_rejects_bad_input(dev):
    m = tiny_lm()
    with pytest.raises(ValueError, match="not on a lazytpu device"):
        lazytpu.hf.generate(m, torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        lazytpu.hf.generate(m.to(dev), torch.ones(1, 3, dtype=torch.long), max_new_tokens=0)
