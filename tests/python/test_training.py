"""Small training loops: 20 steps on lazytpu vs eager CPU must give the same
losses and parameters, run no CPU fallback, and compile each distinct step
graph once (steady steps hit the cache)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met
from conftest import fallback_counts

STEPS = 20


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.adaptive_avg_pool2d(x, 3)
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=50, emb=16, hidden=24, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, (h, c) = self.lstm(self.emb(x))
        return F.log_softmax(self.fc(out[:, -1]), dim=1)


def make_data(kind, n_batches=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n_batches):
        if kind == "mlp":
            x = torch.randn(16, 32, generator=g)
            y = torch.randint(0, 10, (16,), generator=g)
        elif kind == "cnn":
            x = torch.randn(8, 1, 12, 12, generator=g)
            y = torch.randint(0, 10, (8,), generator=g)
        else:
            x = torch.randint(0, 50, (8, 7), generator=g)
            y = torch.randint(0, 5, (8,), generator=g)
        data.append((x, y))
    return data


def train(model, opt, data, dev, steps=STEPS):
    losses, compiles = [], []
    model.train()
    for i in range(steps):
        x, y = data[i % len(data)]
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        if dev is not None:
            lazytpu.optimizer_step(opt)
            lazytpu.mark_step()
            compiles.append(met.counter_value("UncachedCompile") or 0)
        else:
            opt.step()
        losses.append(loss.item())
    return losses, compiles


OPTS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                 weight_decay=1e-3),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
}

CASES = [("mlp", MLP, "sgd_momentum"), ("mlp", MLP, "adam"), ("mlp", MLP, "adamw"),
         ("mlp", MLP, "sgd_nesterov_wd"), ("cnn", CNN, "sgd_momentum"),
         ("lstm", LSTMClassifier, "adam")]


@pytest.mark.parametrize("kind,cls,opt_name", CASES,
                         ids=["%s-%s" % (k, o) for k, _, o in CASES])
def test_train_matches_eager(kind, cls, opt_name, dev):
    torch.manual_seed(0)
    ref = cls()
    model = copy.deepcopy(ref).to(dev)
    opt_ref = OPTS[opt_name](ref.parameters())
    opt = OPTS[opt_name](model.parameters())
    data = make_data(kind)

    met.clear_all()
    before = fallback_counts()
    ref_losses, _ = train(ref, opt_ref, data, None)
    losses, compiles = train(model, opt, data, dev)

    tol = 2e-4 if kind != "lstm" else 5e-4
    for i, (a, b) in enumerate(zip(ref_losses, losses)):
        assert abs(a - b) <= tol * max(1.0, abs(a)), "step %d: eager %f lazytpu %f" % (i, a, b)
    for (n, p_ref), p in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), atol=tol, rtol=tol,
                                   msg=lambda m: "%s: %s" % (n, m))
    for (n, b_ref), b in zip(ref.named_buffers(), model.buffers()):  # batchnorm stats
        torch.testing.assert_close(b.cpu(), b_ref, atol=tol, rtol=tol,
                                   msg=lambda m: "buffer %s: %s" % (n, m))

    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
           if v - before.get(k, 0) > 0}
    assert not new, "CPU fallbacks during training: %s" % new
    # one compile per distinct step graph: the first steps differ (optimizer
    # state is created), then every step is a cache hit
    assert compiles[-1] <= 4, "UncachedCompile per step: %s" % compiles
    assert compiles[-1] == compiles[4], "steady steps recompiled: %s" % compiles
    assert (met.counter_value("CachedCompile") or 0) >= STEPS - 4


def test_eval_mode_and_no_grad(dev):
    torch.manual_seed(1)
    ref = CNN()
    model = copy.deepcopy(ref).to(dev)
    x = torch.randn(4, 1, 12, 12)
    # a training step updates the running stats, then eval uses them
    ref.train(), model.train()
    ref(x), model(x.to(dev))
    ref.eval(), model.eval()
    with torch.no_grad():
        out_ref = ref(x)
        out = model(x.to(dev)).cpu()
    torch.testing.assert_close(out, out_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(model.bn1.running_mean.cpu(), ref.bn1.running_mean)
    torch.testing.assert_close(model.bn1.running_var.cpu(), ref.bn1.running_var)
    assert model.bn1.num_batches_tracked.cpu().item() == 1


def test_dropout_model_trains(dev):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = make_data("mlp")
    before = fallback_counts()
    first = last = None
    for i in range(30):
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        lazytpu.optimizer_step(opt, barrier=True)
        v = loss.item()
        first = v if first is None else first
        last = v
    assert last < first
    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
           if v - before.get(k, 0) > 0}
    assert not new, new


def test_step_closure_and_lr_change_no_recompile(dev):
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9)
    data = make_data("mlp")
    seen = []
    counts = []
    for i in range(8):
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss = F.nll_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        lazytpu.optimizer_step(opt)
        lazytpu.add_step_closure(lambda l: seen.append(l.item()), (loss,))
        lazytpu.mark_step()
        sched.step()
        counts.append(met.counter_value("UncachedCompile"))
    assert len(seen) == 8
    assert counts[-1] == counts[2], "learning-rate changes recompiled: %s" % counts


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_no_tensor_leak_across_steps(opt_name, dev):
    # in-place updates (p.add_, buf.mul_, grad accumulation, zero_) must not
    # keep old values alive: the number of live device tensors is flat
    import gc
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = OPTS[opt_name](model.parameters())
    data = make_data("mlp")
    counts = []
    for i in range(16):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=False)
        F.nll_loss(model(x.to(dev)), y.to(dev)).backward()
        lazytpu.optimizer_step(opt)
        lazytpu.mark_step()
        gc.collect()
        counts.append(lazytpu.debug.live_tensors(0))
    assert counts[-1] <= counts[5] + 2, "live tensors grow: %s" % counts
