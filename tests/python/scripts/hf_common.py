"""What the Hugging Face test scripts share (hf_train.py: one process, CPU or
device; hf_xla_train.py: 8 cores, started the torch_xla way): the tiny
random-weight models built from configs (no hub access), the in-memory data
(the same samples for the same (n, seed)), Trainer's arguments, lazytpu's
counters, and the eval loss of a saved model reloaded on the CPU.
"""
import sys

import torch
import transformers

transformers.logging.set_verbosity_error()
SEQ, VOCAB = 16, 96


def build_model(kind):
    torch.manual_seed(0)
    if kind == "gpt2":
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
    """n samples of SEQ tokens (and a class label for BERT) from seed."""
    def __init__(self, n, seed, kind):
        g = torch.Generator().manual_seed(seed)
        self.kind = kind
        self.x = torch.randint(1, VOCAB, (n, SEQ), generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.kind == "gpt2":
            return {"input_ids": self.x[i], "labels": self.x[i]}
        return {"input_ids": self.x[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.y[i]}


def training_args(out_dir, batch, steps, optim=None, average_tokens=True):
    """Trainer's arguments of every Trainer run of the tests: per-device
    batch `batch`, `steps` optimizer steps, linear schedule with 2 warm-up
    steps, a loss logged per step, nothing saved during training.
    average_tokens=False turns off average_tokens_across_devices: with it on,
    transformers 5.x multiplies the loss by the number of processes for every
    model whose forward takes **kwargs, and BERT's classification loss (a
    plain batch mean) does not divide it back, so on 8 processes (a TPU's 8
    cores, or 8 GPUs) its loss and gradients are 8x the one-process ones."""
    return transformers.TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        max_steps=steps, logging_steps=1, report_to=[], save_strategy="no",
        learning_rate=1e-3, lr_scheduler_type="linear",
        warmup_steps=2, seed=0, dataloader_num_workers=0, disable_tqdm=True,
        average_tokens_across_devices=average_tokens, **({"optim": optim} if optim else {}))


def counters():
    """lazytpu's compile, sync and fallback counters, or None when the
    process never loaded lazytpu."""
    if "lazytpu" not in sys.modules:
        return None
    import lazytpu.metrics as met
    names = ["UncachedCompile", "CachedCompile", "SyncCause::optimizer_step"]
    out = {n: met.counter_value(n) or 0 for n in names}
    out["fallbacks"] = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    out["syncs"] = {n: met.counter_value(n) for n in met.counter_names()
                    if n.startswith("SyncCause::") or n == "MarkStep"}
    return out


def cpu_eval_loss(cls, path, data, batch):
    """The model saved at path, loaded on the CPU (as a fresh process would),
    evaluated on data in batches of `batch`: the mean of the batch losses."""
    m = cls.from_pretrained(path).eval()
    losses = []
    with torch.no_grad():
        for i in range(0, len(data), batch):
            b = {k: torch.stack([data[j][k] for j in range(i, min(i + batch, len(data)))])
                 for k in data[0]}
            losses.append(m(**b).loss)
    return torch.stack(losses).mean().item()
