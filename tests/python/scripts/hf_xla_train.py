"""An Accelerate training loop started the torch_xla way, for
tests/python/test_hf_xla.py: ``xmp.spawn(main)`` (one process per TPU core),
``accelerate.notebook_launcher(main, num_processes=8)`` as on a Kaggle /
Colab TPU, or ``accelerate launch --tpu`` (which imports this file and calls
``main``). The loop is hf_train.py's Accelerate loop, unchanged: the same
tiny model and data (hf_train.build_model / Data).

    python -m lazytpu hf_xla_train.py --launch xmp --model gpt2 --steps 4 --out r.pt

Each core takes ``--batch`` samples per step (Accelerate shards the loader:
core k takes the k-th of each 8 consecutive batches), so one step sees the
same samples as hf_train.py with ``--batch 8*batch`` on the CPU; the gradients
are averaged over the cores by ``xm.optimizer_step``. Writes (process 0) the
global mean loss per step, the final parameters, the eval loss, the eval
loss of the saved model reloaded on the CPU, and process 0's counters.
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--launch", choices=["xmp", "notebook", "accelerate"], default="accelerate")
parser.add_argument("--model", choices=["gpt2", "bert"], default="gpt2")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--out", required=True)
args = None   # parsed in main(): `accelerate launch` imports this file, then sets sys.argv


def parse_args():
    global args
    if args is None:
        args = parser.parse_args()
    return args


import torch  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
SEQ, VOCAB = 16, 96


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
    """hf_train.py's data: the same samples for the same (n, seed)."""
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
    import lazytpu.metrics as met
    out = {n: met.counter_value(n) or 0 for n in ["UncachedCompile", "CachedCompile"]}
    out["fallbacks"] = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
    out["syncs"] = {n: met.counter_value(n) for n in met.counter_names()
                    if n.startswith("SyncCause::") or n == "MarkStep"}
    return out


def main(index=None):
    parse_args()
    import accelerate
    acc = accelerate.Accelerator()
    world = acc.num_processes
    model = build_model()
    glob = args.batch * world
    train, evald = Data(glob * args.steps, 1), Data(glob * 3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch, shuffle=False)
    eloader = torch.utils.data.DataLoader(evald, batch_size=args.batch)
    model, opt, loader, eloader = acc.prepare(model, opt, loader, eloader)
    model.train()
    result = {"losses": [], "half": None, "world": world, "device": str(acc.device)}
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        result["losses"].append(acc.gather(loss.detach().reshape(1)).mean())
        if step + 1 == args.steps // 2:
            result["half"] = counters()
    result["losses"] = [float(v) for v in result["losses"]]
    result["trained"] = counters()
    model.eval()
    with torch.no_grad():
        el = [acc.gather_for_metrics(model(**b).loss.reshape(1)) for b in eloader]
    result["eval_loss"] = torch.cat(el).mean().item()
    out_dir = args.out + ".model"
    acc.wait_for_everyone()
    acc.unwrap_model(model).save_pretrained(out_dir, is_main_process=acc.is_main_process,
                                            save_function=acc.save)
    acc.wait_for_everyone()
    if acc.is_main_process:
        result["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
        m = type(acc.unwrap_model(model)).from_pretrained(out_dir).eval()
        with torch.no_grad():
            ls = [m(**{k: torch.stack([evald[j][k] for j in range(i, i + glob)])
                       for k in evald[0]}).loss for i in range(0, len(evald), glob)]
        result["cpu_eval_loss"] = torch.stack(ls).mean().item()
        result["end"] = counters()
        torch.save(result, args.out)
        print("done", result["device"], world, result["losses"][-1], result["eval_loss"])


if __name__ == "__main__" and parse_args().launch == "xmp":
    import torch_xla.distributed.xla_multiprocessing as xmp
    xmp.spawn(main)
elif __name__ == "__main__" and args.launch == "notebook":
    import accelerate
    accelerate.notebook_launcher(main, num_processes=8)
