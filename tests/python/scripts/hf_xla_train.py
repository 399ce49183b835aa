"""An Accelerate training loop or a Trainer run started the torch_xla way,
for tests/python/test_hf_xla.py: ``xmp.spawn(main)`` (one process per TPU core),
``accelerate.notebook_launcher(main, num_processes=8)`` as on a Kaggle /
Colab TPU, or ``accelerate launch --tpu`` (which imports this file and calls
``main``). The loop is hf_train.py's Accelerate loop, unchanged; ``--way
trainer`` (with ``--launch xmp``, as Hugging Face's xla_spawn.py starts a
Trainer script) is hf_train.py's Trainer run: the same tiny model, data and
arguments (hf_common.py).

    python -m lazytpu hf_xla_train.py --launch xmp --model gpt2 --steps 4 --out r.pt

Each core takes ``--batch`` samples per step (Accelerate shards the loader:
core k takes the k-th of each 8 consecutive batches), so one step sees the
same samples as hf_train.py with ``--batch 8*batch`` on the CPU; the gradients
are averaged over the cores by ``xm.optimizer_step``. Writes (process 0) the
global mean loss per step, the final parameters, the eval loss, the eval
loss of the saved model reloaded on the CPU, and process 0's counters.
"""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--launch", choices=["xmp", "notebook", "accelerate"], default="accelerate")
parser.add_argument("--model", choices=["gpt2", "bert"], default="gpt2")
parser.add_argument("--way", choices=["accelerate", "trainer"], default="accelerate")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--no-average-tokens", action="store_true",
                    help="TrainingArguments(average_tokens_across_devices=False)")
parser.add_argument("--out", required=True)
args = None   # parsed in main(): `accelerate launch` imports this file, then sets sys.argv


def parse_args():
    global args
    if args is None:
        args = parser.parse_args()
    return args


import torch  # noqa: E402
import transformers  # noqa: E402

from hf_common import Data, build_model, counters, cpu_eval_loss, training_args  # noqa: E402


def main_trainer():
    """hf_train.py's Trainer run on this process's core: Trainer shards the
    data over the cores (per-core batch --batch), logs the mean loss over the
    cores, averages the gradients in its optimizer step and saves from
    process 0."""
    import torch_xla.runtime as xr
    world = xr.world_size()
    glob = args.batch * world
    model = build_model(args.model)
    train, evald = Data(glob * args.steps, 1, args.model), Data(glob * 3, 2, args.model)
    out_dir = args.out + ".model"
    result = {"half": None, "world": world}

    class Record(transformers.TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if state.global_step == args.steps // 2:
                result["half"] = counters()

    targs = training_args(out_dir, args.batch, args.steps, "adamw_torch",
                          average_tokens=not args.no_average_tokens)
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=train,
                                   eval_dataset=evald, callbacks=[Record()])
    trainer.train()
    result["trained"] = counters()
    result["losses"] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    result["device"] = str(targs.device)
    result["eval_loss"] = trainer.evaluate()["eval_loss"]
    trainer.save_model(out_dir)
    if xr.global_ordinal() == 0:
        result["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
        result["cpu_eval_loss"] = cpu_eval_loss(type(model), out_dir, evald, glob)
        result["end"] = counters()
        torch.save(result, args.out)
        print("done", result["device"], world, result["losses"][-1], result["eval_loss"])


def main(index=None):
    parse_args()
    if args.way == "trainer":
        return main_trainer()
    import accelerate
    acc = accelerate.Accelerator()
    world = acc.num_processes
    model = build_model(args.model)
    glob = args.batch * world
    train, evald = Data(glob * args.steps, 1, args.model), Data(glob * 3, 2, args.model)
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
        result["cpu_eval_loss"] = cpu_eval_loss(type(acc.unwrap_model(model)), out_dir, evald,
                                                glob)
        result["end"] = counters()
        torch.save(result, args.out)
        print("done", result["device"], world, result["losses"][-1], result["eval_loss"])


if __name__ == "__main__" and parse_args().launch == "xmp":
    import torch_xla.distributed.xla_multiprocessing as xmp
    xmp.spawn(main)
elif __name__ == "__main__" and args.launch == "notebook":
    import accelerate
    accelerate.notebook_launcher(main, num_processes=8)
