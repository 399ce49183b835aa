"""lazytpu.bf16: the bf16 lab. Runs an unchanged training script once per
precision mode and shows what bf16 does to it:

    python -m lazytpu.bf16 [--steps N] [--modes f32,bf16,autocast,mxu-default]
                           [--out DIR] [--step K] [--seed S] [--max-gap PCT]
                           script.py [args]

Modes: ``f32`` (the reference), ``bf16`` (f32 stored as bf16, as
XLA_USE_BF16), ``autocast`` (torch.autocast with bf16), ``mxu-default`` (f32
storage, f32 products in one bf16 pass, a TPU at XLA's DEFAULT precision).
DIR gets the loss curves (PNG, CSV), the gap to f32 per step, a per-module
precision table at step K, peak device memory and step time per mode, the
suggested ``lazytpu.amp.keep_f32`` list and summary.txt, whose last lines
are the verdicts ("VERDICT: bf16 within 0.84% of f32 loss after 20 steps").
See docs/bf16.md.
"""
from .lab import MODES, run

__all__ = ["MODES", "run"]
