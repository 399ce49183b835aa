"""A Hugging Face training run as a user writes it, for tests/python/test_hf.py:
a tiny random-weight GPT-2 (causal LM) or BERT (sequence classification)
built from a config (no hub access), data made in memory, trained with
``Trainer`` or with an ``accelerate.Accelerator`` loop; then evaluated,
saved, and the saved model loaded back on the CPU and evaluated there.

    python hf_train.py --model gpt2 --way trainer --steps 8 --out result.pt

The device is whatever the environment says (ACCELERATE_TORCH_DEVICE, or
nothing: the CPU); ``--enable`` calls ``lazytpu.hf.enable()`` first (the
one-line way). Writes a dict to --out with torch.save: the per-step losses,
the final parameters (CPU copies, by name), the eval loss on the device, the
eval loss of the saved model reloaded on the CPU, and lazytpu's counters
when the run used the device (compiles after the first half of the steps
and at the end, CPU fallbacks).
"""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["gpt2", "bert"], required=True)
parser.add_argument("--way", choices=["trainer", "accelerate"], required=True)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--enable", action="store_true")
parser.add_argument("--optim", default=None, help="TrainingArguments.optim (default: "
                    "Trainer's, fused AdamW, which PyTorch refuses on xla tensors)")
parser.add_argument("--out", required=True)
args = parser.parse_args()

if args.enable:
    import lazytpu.hf
    lazytpu.hf.enable()

import torch  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
SEQ, VOCAB, BATCH = 16, 96, args.batch


def build_model():
    torch.manual_seed(0)
    if args.model == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB,
                                      n_positions=SEQ, bos_token_id=0, eos_token_id=0,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
                                  intermediate_size=64, vocab_size=VOCAB,
                                  max_position_embeddings=SEQ, num_labels=3,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(cfg)


class Data(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, VOCAB, (n, SEQ), generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if args.model == "gpt2":
            return {"input_ids": self.x[i], "labels": self.x[i]}
        return {"input_ids": self.x[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.y[i]}


def counters():
    if "lazytpu" not in sys.modules:
        return None
    import lazytpu.metrics as met
    names = ["UncachedCompile", "CachedCompile", "SyncCause::optimizer_step"]
    out = {n: met.counter_value(n) or 0 for n in names}
    out["fallbacks"] = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    out["syncs"] = {n: met.counter_value(n) for n in met.counter_names()
                    if n.startswith("SyncCause::") or n == "MarkStep"}
    return out


def cpu_eval_loss(path, data):
    """The saved model loaded on the CPU (a fresh process would do the same)."""
    cls = type(model)
    m = cls.from_pretrained(path).eval()
    losses = []
    with torch.no_grad():
        for i in range(0, len(data), BATCH):
            batch = {k: torch.stack([data[j][k] for j in range(i, min(i + BATCH, len(data)))])
                     for k in data[0]}
            losses.append(m(**batch).loss)
    return torch.stack(losses).mean().item()


model = build_model()
train, evald = Data(BATCH * args.steps, 1), Data(BATCH * 3, 2)
out_dir = args.out + ".model"
result = {"losses": [], "half": None}

if args.way == "trainer":
    class Record(transformers.TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if state.global_step == args.steps // 2:
                result["half"] = counters()

    targs = transformers.TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
        max_steps=args.steps, logging_steps=1, report_to=[], save_strategy="no",
        learning_rate=1e-3, lr_scheduler_type="linear",
        warmup_steps=2, seed=0, dataloader_num_workers=0, disable_tqdm=True,
        **({"optim": args.optim} if args.optim else {}))
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=train,
                                   eval_dataset=evald, callbacks=[Record()])
    t0 = time.perf_counter()
    trainer.train()
    result["train_seconds"] = time.perf_counter() - t0
    result["trained"] = counters()
    result["losses"] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    result["device"] = str(targs.device)
    result["eval_loss"] = trainer.evaluate()["eval_loss"]
    trainer.save_model(out_dir)
else:
    import accelerate
    acc = accelerate.Accelerator()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=False)
    eloader = torch.utils.data.DataLoader(evald, batch_size=BATCH)
    model, opt, loader, eloader = acc.prepare(model, opt, loader, eloader)
    model.train()
    t0 = time.perf_counter()
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        result["losses"].append(loss.detach())
        if step + 1 == args.steps // 2:
            result["half"] = counters()
    result["losses"] = [float(v) for v in result["losses"]]
    result["train_seconds"] = time.perf_counter() - t0
    result["trained"] = counters()
    result["device"] = str(acc.device)
    model.eval()
    with torch.no_grad():
        el = [acc.gather_for_metrics(model(**b).loss.reshape(1)) for b in eloader]
    result["eval_loss"] = torch.cat(el).mean().item()
    acc.unwrap_model(model).save_pretrained(out_dir)

result["cpu_eval_loss"] = cpu_eval_loss(out_dir, evald)
result["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
result["end"] = counters()
torch.save(result, args.out)
print("done", result["device"], result["losses"][-1], result["eval_loss"])
