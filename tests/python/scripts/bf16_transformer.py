"""A tiny transformer language model on synthetic tokens, plain PyTorch on
the lazytpu device (the bf16 lab runs it unchanged).

    python tests/python/scripts/bf16_transformer.py [--steps N]"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu

V, D, H, T = 64, 32, 4, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        mask = torch.ones(t, t, device=x.device).tril() == 0
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.Sequential(Block(), Block())
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    dev = lazytpu.device()
    g = torch.Generator().manual_seed(2)
    data = torch.randint(0, V, (a.steps, 8, T + 1), generator=g)
    model = LM().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for i in range(a.steps):
        batch = data[i].to(dev)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        lazytpu.mark_step()
    print("final loss %.4f" % loss.item())


if __name__ == "__main__":
    main()
