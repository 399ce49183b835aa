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

from hf_common import Data, build_model, counters, cpu_eval_loss, training_args  # noqa: E402

BATCH = args.batch
model = build_model(args.model)
train, evald = Data(BATCH * args.steps, 1, args.model), Data(BATCH * 3, 2, args.model)
out_dir = args.out + ".model"
result = {"losses": [], "half": None}

if args.way == "trainer":
    class Record(transformers.TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if state.global_step == args.steps // 2:
                result["half"] = counters()

    targs = training_args(out_dir, BATCH, args.steps, args.optim)
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

result["cpu_eval_loss"] = cpu_eval_loss(type(model), out_dir, evald, BATCH)
result["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
result["end"] = counters()
torch.save(result, args.out)
print("done", result["device"], result["losses"][-1], result["eval_loss"])
