"""Parameter tying through model.to(device) / .cpu(): a weight shared by two
modules (a tied embedding and LM head) stays one Parameter on the device and
back, and training matches eager PyTorch on the CPU."""
import copy
import os
import subprocess
import sys
import textwrap
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_close

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class TinyLM(nn.Module):
    """Embedding, one block, LM head tied to the embedding."""

    def __init__(self, vocab=40, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, idx):
        h = self.embed(idx)
        h = h + torch.tanh(self.fc(self.ln(h)))
        return self.lm_head(h)


def make_model(seed=0):
    torch.manual_seed(seed)
    return TinyLM()


def batches(n, vocab=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (4, 9), generator=g) for _ in range(n)]


def lm_loss(model, idx):
    logits = model(idx[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))


def train(model, opt, data, dev):
    losses = []
    for idx in data:
        opt.zero_grad()
        loss = lm_loss(model, idx.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach().to("cpu"))
    return torch.stack(losses)


def assert_same_params(a, b, atol=1e-5, rtol=1e-5):
    na = [n for n, _ in a.named_parameters()]
    nb = [n for n, _ in b.named_parameters()]
    assert na == nb
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert_close(pa, pb, atol, rtol, n)


def test_to_device_keeps_the_tie(dev):
    cpu = make_model()
    m = copy.deepcopy(cpu)
    w = m.embed.weight
    m.to(dev)
    assert m.lm_head.weight is m.embed.weight
    assert m.embed.weight is w                       # the same Parameter object, as on CUDA
    assert w.device.type == dev.type
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in cpu.named_parameters()]
    assert len(list(m.parameters())) == len(list(cpu.parameters()))
    sd, sd_cpu = m.state_dict(), cpu.state_dict()
    assert list(sd) == list(sd_cpu)
    for k in sd:
        assert_close(sd[k], sd_cpu[k], 0, 0, k)


def test_training_after_to_matches_eager(dev):
    """Several AdamW steps: loss and parameters within 1e-5 of the CPU, and
    the shared weight gets both modules' gradient."""
    data = batches(6)
    cpu = make_model()
    m = copy.deepcopy(cpu).to(dev)
    ref = train(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2), data, "cpu")
    got = train(m, torch.optim.AdamW(m.parameters(), lr=1e-2), data, dev)
    assert_close(got, ref, 1e-5, 1e-5, "losses")
    assert m.lm_head.weight is m.embed.weight
    assert_same_params(m, cpu)


def test_optimizer_built_before_the_move_keeps_working(dev):
    """The Parameters keep their identity, so an optimizer made on the CPU
    model updates the device model (as with .cuda())."""
    data = batches(3)
    cpu = make_model()
    m = copy.deepcopy(cpu)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m.to(dev)
    ref = train(cpu, torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9), data, "cpu")
    got = train(m, opt, data, dev)
    assert_close(got, ref, 1e-5, 1e-5, "losses")
    assert_same_params(m, cpu)


@pytest.mark.parametrize("back", ["cpu()", "to('cpu')"])
def test_back_to_cpu_keeps_the_tie(dev, back):
    data = batches(2)
    cpu = make_model()
    m = copy.deepcopy(cpu).to(dev)
    train(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2), data, "cpu")
    train(m, torch.optim.AdamW(m.parameters(), lr=1e-2), data, dev)
    m = m.cpu() if back == "cpu()" else m.to("cpu")
    assert m.lm_head.weight is m.embed.weight
    assert m.embed.weight.device.type == "cpu"
    assert m.embed.weight.grad.device.type == "cpu"
    assert_same_params(m, cpu)
    assert_close(m.embed.weight.grad, cpu.embed.weight.grad, 1e-5, 1e-5, "grad")
    # and it trains on as a CPU model, tied
    train(cpu, torch.optim.SGD(cpu.parameters(), lr=0.1), data, "cpu")
    train(m, torch.optim.SGD(m.parameters(), lr=0.1), data, "cpu")
    assert_same_params(m, cpu)


def test_gradients_move_with_their_parameters(dev):
    cpu = make_model()
    m = copy.deepcopy(cpu)
    idx = batches(1)[0]
    lm_loss(cpu, idx).backward()
    lm_loss(m, idx).backward()
    p = m.fc.weight
    m.to(dev)
    assert m.fc.weight is p and p.grad.device.type == dev.type
    for (n, a), (_, b) in zip(m.named_parameters(), cpu.named_parameters()):
        assert_close(a.grad, b.grad, 0, 0, n)


def test_parameter_class_and_attributes_are_kept(dev):
    class TaggedParameter(nn.Parameter):
        pass

    m = make_model()
    m.fc.weight = TaggedParameter(m.fc.weight.detach().clone())
    m.fc.weight.tag = "keep me"
    m.embed.weight.no_decay = True
    m.to(dev)
    assert type(m.fc.weight) is TaggedParameter and m.fc.weight.tag == "keep me"
    assert m.lm_head.weight.no_decay is True
    m.cpu()
    assert type(m.fc.weight) is TaggedParameter and m.fc.weight.tag == "keep me"


def test_unswappable_parameter_is_tied_again(dev):
    """A weak reference to a parameter stops PyTorch's swap: the move then
    takes PyTorch's usual path, and the shared weight is tied again."""
    data = batches(3)
    cpu = make_model()
    m = copy.deepcopy(cpu)
    ref = weakref.ref(m.embed.weight)
    m.to(dev)
    assert m.lm_head.weight is m.embed.weight
    assert m.embed.weight.device.type == dev.type
    assert len(list(m.parameters())) == len(list(cpu.parameters()))
    want = train(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2), data, "cpu")
    got = train(m, torch.optim.AdamW(m.parameters(), lr=1e-2), data, dev)
    assert_close(got, want, 1e-5, 1e-5, "losses")
    assert_same_params(m, cpu)
    del ref


def test_modules_that_stay_on_the_host_convert_as_before():
    """CPU-only conversions keep PyTorch's behaviour: no swap (which would
    refuse a parameter with a weak reference), the flag stays off."""
    m = make_model()
    p = m.fc.weight
    ref = weakref.ref(p)
    m.to(torch.float64)
    m.to("cpu")
    m.cpu()
    assert m.fc.weight is p and p.dtype == torch.float64 and ref() is p
    assert torch.__future__.get_swap_module_params_on_conversion() is False


def test_gpt2_tied_head(dev):
    """Hugging Face GPT-2 (tied wte / lm_head): still tied on the device,
    three AdamW steps as on the CPU."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    cpu = transformers.GPT2LMHeadModel(cfg)
    m = copy.deepcopy(cpu).to(dev)
    assert m.lm_head.weight is m.transformer.wte.weight
    data = batches(3, vocab=64)

    def run(model, d):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        out = []
        for idx in data:
            opt.zero_grad()
            loss = model(input_ids=idx.to(d), labels=idx.to(d)).loss
            loss.backward()
            opt.step()
            out.append(loss.detach().to("cpu"))
        return torch.stack(out)

    assert_close(run(m, dev), run(cpu, "cpu"), 1e-5, 1e-5, "losses")
    assert_same_params(m, cpu)


def test_torch_xla_compat_mode_keeps_the_tie():
    """In torch_xla compatibility mode (python -m lazytpu), model.to(
    xm.xla_device()) keeps the tie and trains like the CPU."""
    script = textwrap.dedent("""
        import copy, torch, torch.nn as nn, torch.nn.functional as F
        import torch_xla.core.xla_model as xm
        torch.manual_seed(0)
        class TinyLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(40, 16)
                self.fc = nn.Linear(16, 16)
                self.lm_head = nn.Linear(16, 40, bias=False)
                self.lm_head.weight = self.embed.weight
            def forward(self, idx):
                h = self.embed(idx)
                return self.lm_head(h + torch.tanh(self.fc(h)))
        cpu = TinyLM()
        dev = xm.xla_device()
        m = copy.deepcopy(cpu).to(dev)
        assert m.lm_head.weight is m.embed.weight, "untied"
        assert m.embed.weight.device.type == "xla", m.embed.weight.device
        g = torch.Generator().manual_seed(1)
        data = [torch.randint(0, 40, (4, 9), generator=g) for _ in range(4)]
        def run(model, d):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            out = []
            for idx in data:
                idx = idx.to(d)
                opt.zero_grad()
                logits = model(idx[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 40), idx[:, 1:].reshape(-1))
                loss.backward()
                opt.step()
                xm.mark_step()
                out.append(loss.detach().cpu())
            return torch.stack(out)
        a, b = run(m, dev), run(cpu, "cpu")
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        m.cpu()
        assert m.lm_head.weight is m.embed.weight
        torch.testing.assert_close(m.embed.weight, cpu.embed.weight, atol=1e-5, rtol=1e-5)
        print("TIED-OK")
    """)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    # compared with eager CPU in f32: a TPU-faithful default matmul level would differ
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    p = subprocess.run([sys.executable, "-m", "lazytpu", "-c", script], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "TIED-OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
