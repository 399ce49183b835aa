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


SAVE_LOAD = r"""
import sys, torch, transformers, safetensors.torch as st
import lazytpu, lazytpu.hf
from accelerate import Accelerator
lazytpu.hf.enable()
d = sys.argv[1]
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=96, n_positions=16)
model = transformers.GPT2LMHeadModel(cfg)
acc = Accelerator()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, opt = acc.prepare(model, opt)
assert acc.device.type == "lazytpu", acc.device
x = torch.randint(1, 96, (2, 16), generator=torch.Generator().manual_seed(1)).to(acc.device)
def step():
    acc.backward(model(input_ids=x, labels=x).loss); opt.step(); opt.zero_grad()
step()
acc.save_state(d + "/state")                   # model.safetensors + optimizer.bin
want = {k: v.cpu().clone() for k, v in model.state_dict().items()}
want_m = {k: {n: t.cpu().clone() for n, t in v.items()}     # step, exp_avg, exp_avg_sq
          for k, v in opt.state_dict()["state"].items()}
step(); step()                                 # move away from the checkpoint
acc.load_state(d + "/state")
for k, v in model.state_dict().items():
    assert torch.equal(v.cpu(), want[k]), k
got_m = opt.state_dict()["state"]
assert got_m.keys() == want_m.keys() and len(want_m) > 0
for k, v in got_m.items():
    assert v.keys() == want_m[k].keys(), (k, v.keys())
    for n, t in v.items():
        assert torch.equal(t.cpu(), want_m[k][n]), (k, n)
m = acc.unwrap_model(model)
assert m.lm_head.weight is m.transformer.wte.weight
st.save_model(m, d + "/m.safetensors")         # the tied head is stored once
names = set(st.load_file(d + "/m.safetensors").keys())
assert len(names & {"transformer.wte.weight", "lm_head.weight"}) == 1, sorted(names)
with torch.no_grad():
    m.transformer.wte.weight.zero_()
missing, unexpected = st.load_model(m, d + "/m.safetensors", device="cpu")
assert torch.equal(m.lm_head.weight.cpu(), want["lm_head.weight"]), "tied weight not restored"
# views of one storage: addresses inside the storage's range, as on the CPU
w = m.transformer.wte.weight
s = w.untyped_storage()
assert s.nbytes() == w.numel() * 4 and w.data_ptr() == s.data_ptr()
assert w[3:].data_ptr() == s.data_ptr() + 3 * 32 * 4
assert w.detach().data_ptr() == s.data_ptr() and w.cpu().data_ptr() != s.data_ptr()
# another storage: a range of its own; neither is a host address (no user
# space reaches 2**56 on x86-64 or arm64): reading through one faults
o = torch.ones(3, device=w.device).untyped_storage()
(a, n), (b, _) = sorted([(s.data_ptr(), s.nbytes()), (o.data_ptr(), o.nbytes())])
assert a + n <= b and a >= 1 << 56, (a, n, b)
print("ok")
"""


def test_accelerate_state_and_safetensors_round_trip(tmp_path):
    """Accelerator.save_state / load_state and safetensors' save_model /
    load_model with a tied GPT-2 on the device (they compare storages by
    data_ptr() and nbytes() to find tied weights; data_ptr() used to raise):
    the weights and the optimizer state come back equal, the tied head is
    stored once."""
    env = dict(os.environ)
    env.pop("LAZYTPU_XLA_COMPAT", None)
    env.pop("ACCELERATE_TORCH_DEVICE", None)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
        env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", SAVE_LOAD, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout.split()[-1:] == ["ok"], p.stdout[-2000:] + p.stderr[-4000:]


BF16_TRAINER = r"""
import sys, torch
dev, way = sys.argv[1].split("-")
if way == "enable":
    import lazytpu.hf
    lazytpu.hf.enable()
import transformers
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=96, n_positions=16,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = transformers.GPT2LMHeadModel(cfg)
ids = torch.randint(1, 96, (16, 16), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": r, "labels": r} for r in ids]
dtypes = set()
model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda m, i, o: dtypes.add(str(o.dtype)))
args = transformers.TrainingArguments(sys.argv[2], bf16=True, use_cpu=dev == "cpu", max_steps=4,
                                      per_device_train_batch_size=4, logging_steps=1,
                                      learning_rate=1e-2, save_strategy="no", report_to=[],
                                      optim="adamw_torch", seed=0)
trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
trainer.train()
print(args.device.type, ",".join(sorted(dtypes)),
      *[repr(h["loss"]) for h in trainer.state.log_history if "loss" in h])
"""


def test_trainer_bf16_plain_device(tmp_path):
    """TrainingArguments(bf16=True) on the device, after lazytpu.hf.enable()
    and with ACCELERATE_TORCH_DEVICE=lazytpu and no import (transformers
    refused every device but a GPU-like one or torch_xla's: "Your setup
    doesn't support bf16/gpu"): Trainer trains under bf16 autocast, as
    Trainer with bf16=True on the CPU, with the same losses up to bf16
    rounding."""
    runs = {}
    for run in ("cpu-plain", "lazytpu-enable", "lazytpu-env"):
        env = dict(os.environ)
        env.pop("LAZYTPU_XLA_COMPAT", None)
        env.pop("ACCELERATE_TORCH_DEVICE", None)
        if run == "lazytpu-env":
            env["ACCELERATE_TORCH_DEVICE"] = "lazytpu"
        env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
            env.get("PYTHONPATH", "")
        p = subprocess.run([sys.executable, "-c", BF16_TRAINER, run, str(tmp_path / run)],
                           env=env, capture_output=True, text=True, timeout=300,
                           cwd=str(tmp_path))
        assert p.returncode == 0, run + ":\n" + p.stdout[-2000:] + p.stderr[-4000:]
        words = p.stdout.split("\n")[-2].split()
        assert words[:2] == [run.split("-")[0], "torch.bfloat16"], (run, words)  # autocast
        runs[run] = [float(w) for w in words[2:]]
    cpu = runs.pop("cpu-plain")
    assert len(cpu) == 4
    for run, got in runs.items():
        assert len(got) == 4, (run, got)
        for i, (a, b) in enumerate(zip(cpu, got)):
            assert abs(a - b) <= 2e-3 * max(1.0, abs(a)), \
                "%s loss %d: cpu %r lazytpu %r" % (run, i, a, b)


def test_generate_ends_where_model_generate_ends(dev):
    """Every sequence ended before the first stop check: the output ends
    with the token that ended the last one (the earlier one padded up to
    it), as model.generate's; it used to run on to the stop check with
    columns of padding."""
    m = tiny_lm(eos=None)
    with torch.no_grad():            # sharper logits: varied greedy tokens
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    ids = torch.randint(6, 96, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        free = m.generate(ids, max_new_tokens=8, do_sample=False)
    # row 0 ends at its fourth new token at the latest, row 1 at its second
    m.generation_config.eos_token_id = [int(free[0, 7 + 3]), int(free[1, 7 + 1])]
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=0)
    assert ref.shape[1] < 7 + 8 and (ref[:, 7:] == 0).any(), ref
    out = lazytpu.hf.generate(m.to(dev), ids.to(dev), max_new_tokens=30, pad_token_id=0,
                              stop_check_every=8)
    assert torch.equal(out.cpu(), ref), (out.cpu(), ref)


def test_mixtral_experts_train_natively(dev):
    """A Mixtral (mixture of experts) trains as on the CPU with no CPU
    fallback: transformers' grouped experts count tokens per expert with an
    integer torch.histc and multiply with torch._grouped_mm on any device
    but the CPU (both used to fail: histc_cpu refuses integers, _grouped_mm's
    composite kernel read a data pointer)."""
    cfg = transformers.MixtralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=32, output_router_logits=True)
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    before = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    losses = {}
    for d in ("cpu", dev):
        torch.manual_seed(0)
        m = transformers.MixtralForCausalLM(cfg).to(d).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[str(d)] = []
        for _ in range(3):
            out = m(input_ids=ids.to(d), labels=ids.to(d))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            losses[str(d)].append(float(out.loss))
    cpu, got = losses["cpu"], losses[str(dev)]
    for a, b in zip(cpu, got):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (cpu, got)
    after = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    assert after == before, "fallbacks: %s -> %s" % (before, after)
