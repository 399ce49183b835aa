"""A model zoo: common architectures train 5 steps on the device with ZERO CPU
fallbacks and match eager PyTorch (losses every step, parameters after;
ResNet-18 one step at a time from eager's parameters, see its test).

Models: a transformer encoder (scaled_dot_product_attention, LayerNorm, GELU,
AdamW, clip_grad_norm_, an LR schedule), a small UNet (GroupNorm, SiLU,
ConvTranspose2d, upsampling, padding, cat), ResNet-18 (examples/resnet18.py),
a bidirectional GRU, a ViT-style patch embedding, a uint8 image pipeline
(uint8 batches converted and normalised on the device), and a 3-D conv net
(Conv3d with stride and groups, ConvTranspose3d with output_padding, a skip).
"""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

from conftest import fallback_counts

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from resnet18 import ResNet18  # noqa: E402

STEPS = 5


# ---------------------------------------------------------------- models

class Encoder(nn.Module):
    """Token embedding + 2 pre-norm encoder layers with explicit SDPA."""

    def __init__(self, vocab=40, d=32, heads=4, classes=5, causal=True):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 12, d) * 0.02)
        self.heads, self.causal = heads, causal
        self.blocks = nn.ModuleList()
        for _ in range(2):
            self.blocks.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                ln2=nn.LayerNorm(d), fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d))))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tok, pad_mask):
        b, t = tok.shape
        x = self.emb(tok) + self.pos[:, :t]
        # attention mask: causal and key padding, as an additive float mask
        keep = pad_mask[:, None, None, :]                     # [b, 1, 1, t]
        if self.causal:
            keep = keep & torch.ones(t, t, dtype=torch.bool, device=tok.device).tril()
        mask = torch.zeros(keep.shape, device=tok.device).masked_fill(~keep, float("-inf"))
        for blk in self.blocks:
            h = blk["ln1"](x)
            q, k, v = blk["qkv"](h).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + blk["proj"](a.transpose(1, 2).reshape(b, t, -1))
            x = x + blk["fc2"](F.gelu(blk["fc1"](blk["ln2"](x))))
        return F.log_softmax(self.head(self.ln(x)[:, 0]), dim=-1)


class TorchEncoder(nn.Module):
    """nn.TransformerEncoder (its own multi-head attention, dropout 0)."""

    def __init__(self, vocab=40, d=32, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tok, pad_mask):
        x = self.enc(self.emb(tok), src_key_padding_mask=~pad_mask)
        return F.log_softmax(self.head(x.mean(1)), dim=-1)


class UNet(nn.Module):
    """Two levels: GroupNorm + SiLU convs, a strided-conv down path, up with
    ConvTranspose2d and with upsampling, pad, skip cat."""

    def __init__(self, cin=3, c=16, classes=4):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU())
        self.enc1 = block(cin, c)
        self.down1 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.enc2 = block(2 * c, 2 * c)
        self.down2 = nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1)
        self.mid = block(4 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c)
        self.red1 = nn.Conv2d(2 * c, c, 1)
        self.dec1 = block(2 * c, c)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)                                  # [b, c, 15, 15]
        e2 = self.enc2(self.down1(e1))                     # [b, 2c, 8, 8]
        m = self.mid(self.down2(e2))                       # [b, 4c, 4, 4]
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))    # [b, 2c, 8, 8]
        u = F.interpolate(self.red1(d2), scale_factor=2, mode="bilinear", align_corners=False)
        u = F.pad(u, (0, -1, 0, -1))                       # 16 -> 15
        u2 = F.interpolate(self.red1(d2), size=(15, 15), mode="nearest")
        d1 = self.dec1(torch.cat([u + u2, e1], 1))
        d1 = F.pad(d1, (1, 1, 1, 1), mode="reflect")[:, :, 1:-1, 1:-1]
        return F.log_softmax(self.out(d1), dim=1)


class BiGRU(nn.Module):
    def __init__(self, vocab=30, emb=16, hidden=24, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        out, h = self.gru(self.emb(x))
        return F.log_softmax(self.fc(out[:, -1] + torch.cat([h[-2], h[-1]], -1)), dim=-1)


class PatchViT(nn.Module):
    """ViT-style: conv patch embedding, cls token, position embedding,
    nn.MultiheadAttention blocks, LayerNorm, GELU."""

    def __init__(self, img=16, patch=4, d=32, classes=5):
        super().__init__()
        n = (img // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)            # [b, n, d]
        x = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], 1) + self.pos
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.ln2(x))
        return F.log_softmax(self.head(x[:, 0]), dim=-1)


class ImageNet(nn.Module):
    """Takes uint8 images [b, h, w, c]: converts, normalises, permutes on the
    device, then a small CNN."""

    def __init__(self, classes=5):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, classes)

    def forward(self, img):
        x = img.permute(0, 3, 1, 2).float().div(255)
        x = (x - self.mean) / self.std
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return F.log_softmax(self.fc(x.mean((2, 3))), dim=-1)


class VolumeNet(nn.Module):
    """A 3-D encoder / decoder with a skip: Conv3d (strided, grouped),
    ConvTranspose3d (output_padding), cat, then a classifier."""

    def __init__(self, classes=5):
        super().__init__()
        self.enc1 = nn.Conv3d(2, 6, 3, padding=1)
        self.enc2 = nn.Conv3d(6, 8, 3, stride=2, padding=1, groups=2)
        self.up = nn.ConvTranspose3d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.fc = nn.Linear(12, classes)

    def forward(self, x):
        h1 = F.silu(self.enc1(x))
        u = self.up(F.relu(self.enc2(h1)))
        x = torch.cat([h1, u], 1)
        return F.log_softmax(self.fc(x.mean((2, 3, 4))), dim=-1)


# ------------------------------------------------------------------ data

def data_for(kind, n=3):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        if kind in ("encoder", "torch_encoder"):
            tok = torch.randint(0, 40, (4, 12), generator=g)
            lens = torch.tensor([12, 9, 7, 12])
            pad = torch.arange(12)[None, :] < lens[:, None]
            out.append(((tok, pad), torch.randint(0, 5, (4,), generator=g)))
        elif kind == "unet":
            x = torch.randn(2, 3, 15, 15, generator=g)
            out.append(((x,), torch.randint(0, 4, (2, 15, 15), generator=g)))
        elif kind == "resnet":
            x = torch.randn(4, 3, 48, 48, generator=g)
            out.append(((x,), torch.randint(0, 10, (4,), generator=g)))
        elif kind == "gru":
            out.append(((torch.randint(0, 30, (4, 9), generator=g),),
                        torch.randint(0, 5, (4,), generator=g)))
        elif kind == "vit":
            out.append(((torch.randn(4, 3, 16, 16, generator=g),),
                        torch.randint(0, 5, (4,), generator=g)))
        elif kind == "volume":
            out.append(((torch.randn(2, 2, 8, 8, 8, generator=g),),
                        torch.randint(0, 5, (2,), generator=g)))
        else:
            img = torch.randint(0, 256, (4, 12, 12, 3), dtype=torch.uint8, generator=g)
            out.append(((img,), torch.randint(0, 5, (4,), generator=g)))
    return out


def make(kind):
    torch.manual_seed(0)
    if kind == "encoder":
        m = Encoder()
    elif kind == "torch_encoder":
        m = TorchEncoder()
    elif kind == "unet":
        m = UNet()
    elif kind == "resnet":
        m = nn.Sequential(ResNet18(num_classes=10), nn.LogSoftmax(1))
    elif kind == "gru":
        m = BiGRU()
    elif kind == "vit":
        m = PatchViT()
    elif kind == "volume":
        m = VolumeNet()
    else:
        m = ImageNet()
    if kind in ("encoder", "torch_encoder", "vit"):
        opt = lambda p: torch.optim.AdamW(p, lr=2e-3, weight_decay=0.05)  # noqa: E731
        sched = lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s))  # noqa
    elif kind == "resnet":
        opt = lambda p: torch.optim.SGD(p, lr=0.005)  # noqa: E731
        sched = None
    else:
        opt = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa: E731
        sched = None
    return m, opt, sched


def run(model, opt, sched, data, dev, clip):
    losses = []
    model.train()
    for i in range(STEPS):
        args, y = data[i % len(data)]
        if dev is not None:
            args, y = tuple(a.to(dev) for a in args), y.to(dev)
        opt.zero_grad()
        loss = F.nll_loss(model(*args), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        if dev is not None:
            lazytpu.optimizer_step(opt)
            lazytpu.mark_step()
        else:
            opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


KINDS = ["encoder", "torch_encoder", "unet", "gru", "vit", "uint8_images", "volume"]
TOL = {"unet": 1e-3}


@pytest.mark.parametrize("kind", KINDS)
def test_zoo_trains_without_fallback(kind, dev):
    ref, mk_opt, mk_sched = make(kind)
    model = copy.deepcopy(ref).to(dev)
    opt_ref, opt = mk_opt(ref.parameters()), mk_opt(model.parameters())
    s_ref = mk_sched(opt_ref) if mk_sched else None
    s_dev = mk_sched(opt) if mk_sched else None
    data = data_for(kind)
    clip = kind in ("encoder", "torch_encoder", "vit")
    ref_losses = run(ref, opt_ref, s_ref, data, None, clip)
    before = fallback_counts()
    losses = run(model, opt, s_dev, data, dev, clip)
    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
           if v - before.get(k, 0) > 0}
    assert not new, "CPU fallbacks while training %s: %s" % (kind, new)
    tol = TOL.get(kind, 5e-4)
    for i, (a, b) in enumerate(zip(ref_losses, losses)):
        assert abs(a - b) <= tol * max(1.0, abs(a)), "%s step %d: eager %f lazytpu %f" % (
            kind, i, a, b)
    for (n, p_ref), p in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), atol=tol, rtol=tol,
                                   msg=lambda m: "%s %s: %s" % (kind, n, m))


# ResNet-18 is checked one step at a time from eager's parameters, not along
# a 5-step trajectory. Its gradient is piecewise: a ReLU input or a max-pool
# window within float32 rounding of a tie (1e-6 here) picks a different branch
# in any two float32 computations. Measured on this model (48x48, batch 4, 12
# data seeds x 5 steps): a step's gradient matches eager's to ~4e-6 (norm of
# the difference over the norm), except ~13% of steps where one branch flips
# and it differs by 2e-3..1e-2; eager float32 against float64 flips as often.
# Training on from there, batch norm over the last 4 x 2 x 2 values amplifies
# such a step into percent-level loss differences two steps later, so a
# trajectory comparison passes or fails by luck. Each step's loss and running
# statistics are continuous in the parameters and must match tightly; the
# gradient must match to 1e-4 in at least 3 of 5 steps (a kernel error shows in
# every step) and stay within 5e-2 in the others (one flipped branch).
def test_resnet18_steps_match_eager(dev):
    ref, mk_opt, _ = make("resnet")
    model = copy.deepcopy(ref).to(dev)
    opt_ref, opt = mk_opt(ref.parameters()), mk_opt(model.parameters())
    data = data_for("resnet")
    before = fallback_counts()
    errs = []
    for i in range(STEPS):
        model.load_state_dict(ref.state_dict())
        (x,), y = data[i % len(data)]
        opt_ref.zero_grad()
        opt.zero_grad()
        loss_ref = F.nll_loss(ref(x), y)
        loss_ref.backward()
        loss = F.nll_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        lazytpu.optimizer_step(opt)
        lazytpu.mark_step()
        assert abs(loss.item() - loss_ref.item()) <= 2e-5 * abs(loss_ref.item()), (
            "step %d: eager loss %f lazytpu %f" % (i, loss_ref.item(), loss.item()))
        g_ref = torch.cat([p.grad.flatten() for p in ref.parameters()])
        g = torch.cat([p.grad.cpu().flatten() for p in model.parameters()])
        errs.append(((g - g_ref).norm() / g_ref.norm()).item())
        opt_ref.step()
        for (n, b_ref), b in zip(ref.named_buffers(), model.buffers()):
            torch.testing.assert_close(b.cpu(), b_ref, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: "step %d %s: %s" % (i, n, m))
        for (n, p_ref), p in zip(ref.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), atol=1e-5, rtol=1e-4,
                                       msg=lambda m: "step %d %s: %s" % (i, n, m))
    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
           if v - before.get(k, 0) > 0}
    assert not new, "CPU fallbacks while training resnet: %s" % new
    msg = "relative gradient error per step: %s" % ["%.1e" % e for e in errs]
    assert max(errs) <= 5e-2, msg
    assert sum(e <= 1e-4 for e in errs) >= 3, msg
