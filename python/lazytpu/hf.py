"""lazytpu.hf: Hugging Face Transformers and Accelerate on the plain
``lazytpu`` device (the torch_xla way in is ``python -m lazytpu`` /
``lazytpu-run``, docs/frameworks.md).

One line before the ``TrainingArguments`` / ``Accelerator`` is made::

    import lazytpu.hf; lazytpu.hf.enable()

or one environment variable and no import at all::

    ACCELERATE_TORCH_DEVICE=lazytpu python train.py

What it does (nothing else is changed; a program that never names the
device is untouched):

- the device: ``ACCELERATE_TORCH_DEVICE=lazytpu`` (set by :func:`enable` when
  unset) is where Accelerate's ``PartialState`` and Trainer's
  ``TrainingArguments.device`` put the model and the batches;
- step boundaries: a step boundary (``mark_step``, cause
  ``optimizer_step``) after every ``optimizer.step()`` of an optimizer whose
  parameters live on lazytpu (PyTorch's global optimizer step hook, so
  Trainer, an Accelerate loop and a plain loop all get it), and after every
  evaluation / prediction batch of a ``Trainer`` (a ``TrainerCallback``
  added to Trainer's default callbacks). Without them a loop that never
  reads a value would trace one ever-growing graph;
- the metrics report: at the end of ``Trainer.train()`` the report is
  written to ``<output_dir>/lazytpu-metrics.txt`` and a one-line summary
  (compiles, cache hits, CPU fallbacks, host reads) is logged;
- bf16: ``TrainingArguments(bf16=True)`` accepts the device (transformers
  otherwise refuses any device but a GPU-like one or torch_xla's); Trainer
  then trains under Accelerate's ``torch.autocast("lazytpu", bfloat16)``.
"""
import os
import sys

import torch
from _lazytpu_device import ImportWatch, allow_bf16, _accelerate_names_lazytpu

from . import core
from . import metrics as _met

__all__ = ["enable", "enabled", "LazyTPUCallback", "summary", "generate"]

_DEVICE_ENV = "ACCELERATE_TORCH_DEVICE"
_state = {"enabled": False, "hook": None, "patched": False}


def enabled():
    """True once :func:`enable` ran in this process."""
    return _state["enabled"]


# True while ACCELERATE_TORCH_DEVICE names a lazytpu device
_device_env_is_lazytpu = _accelerate_names_lazytpu


def _on_device(optimizer):
    """True when the optimizer's first parameter is a lazytpu tensor."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            return core.is_lazytpu_tensor(p)
    return False


def _after_optimizer_step(optimizer, args, kwargs):
    if _on_device(optimizer):
        core._sync(core._C.SYNC_OPTIMIZER_STEP, False)
        core._run_step_closures()


def _add_callback(trainer_module):
    cbs = getattr(trainer_module, "DEFAULT_CALLBACKS", None)
    cls = _callback_class()
    if isinstance(cbs, list) and cls not in cbs:
        cbs.append(cls)


# what enable() changes in a transformers module, once it is imported
_AFTER_IMPORT = {"transformers.trainer": _add_callback,
                 "transformers.training_args": allow_bf16}


def _patch_transformers():
    """Makes the changes of ``_AFTER_IMPORT`` (LazyTPUCallback in Trainer's
    default callbacks, read by every Trainer when it is made; the bf16
    check of TrainingArguments): now in each module already imported, else
    as soon as it is."""
    if _state["patched"]:
        return
    _state["patched"] = True
    pending = {}
    for name, change in _AFTER_IMPORT.items():
        mod = sys.modules.get(name)
        if mod is not None:
            change(mod)
        else:
            pending[name] = change
    if pending:
        sys.meta_path.insert(0, ImportWatch(pending))


def enable(device="lazytpu"):
    """Turns the integration on for this process (idempotent): Trainer and
    Accelerate pick ``device`` (unless ACCELERATE_TORCH_DEVICE is already
    set), optimizer steps on the device end a step, Trainer's evaluation and
    prediction batches end a step, Trainer writes the metrics report at
    the end of training, and TrainingArguments(bf16=True) accepts the
    device. Call it before ``TrainingArguments(...)`` /
    ``Accelerator()`` (they read the device when made). Raises ValueError
    for a device that is not a lazytpu device."""
    dev = torch.device(device)
    if dev.type != "lazytpu":
        raise ValueError("lazytpu.hf.enable(device=%r): not a lazytpu device" % (device,))
    if not os.environ.get(_DEVICE_ENV):
        os.environ[_DEVICE_ENV] = str(dev)
    elif not _device_env_is_lazytpu():
        raise ValueError("lazytpu.hf.enable(): %s=%s already names another device"
                         % (_DEVICE_ENV, os.environ[_DEVICE_ENV]))
    if _state["hook"] is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _state["hook"] = register_optimizer_step_post_hook(_after_optimizer_step)
    _patch_transformers()
    _state["enabled"] = True


def summary():
    """One line: compiles, cache hits, CPU fallbacks and host reads so far."""
    def c(name):
        return _met.counter_value(name) or 0
    fallbacks = sum(c(n) for n in _met.executed_fallback_ops())
    return ("lazytpu: %d compiles, %d cache hits, %d steps, %d CPU fallback calls, "
            "%d host reads" % (c("UncachedCompile"), c("CachedCompile"), c("MarkStep")
                                + c("SyncCause::optimizer_step"), fallbacks,
                                c("SyncCause::value_read")))


_callback_cls = []


def _callback_class():
    """LazyTPUCallback, a ``transformers.TrainerCallback`` subclass, built on
    first use so that importing lazytpu.hf does not import transformers."""
    if _callback_cls:
        return _callback_cls[0]
    from transformers import TrainerCallback

    class LazyTPUCallback(TrainerCallback):
        """A step boundary after each evaluation / prediction batch and the
        metrics report when training ends, when the Trainer's device is a
        lazytpu device (it does nothing otherwise)."""

        def on_prediction_step(self, args, state, control, **kw):
            if args.device.type == "lazytpu":
                core.mark_step()

        def on_train_end(self, args, state, control, **kw):
            if args.device.type != "lazytpu":
                return
            core.mark_step()
            core.wait_device_ops()
            if state.is_world_process_zero and args.output_dir:
                os.makedirs(args.output_dir, exist_ok=True)
                path = os.path.join(args.output_dir, "lazytpu-metrics.txt")
                with open(path, "w") as f:
                    f.write(_met.metrics_report())
                sys.stderr.write("%s; report: %s\n" % (summary(), path))

    LazyTPUCallback.__module__ = __name__
    LazyTPUCallback.__qualname__ = "LazyTPUCallback"
    _callback_cls.append(LazyTPUCallback)
    return LazyTPUCallback


def __getattr__(name):
    # lazytpu.hf.LazyTPUCallback: add by hand with trainer.add_callback(...)
    if name == "LazyTPUCallback":
        return _callback_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ------------------------------------------------------------ generation ----

BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _bucket(n, buckets):
    for b in buckets:
        if b >= n:
            return b
    return n


@torch.no_grad()
def generate(model, input_ids, attention_mask=None, max_new_tokens=32, eos_token_id=None,
             pad_token_id=None, do_sample=False, temperature=1.0, buckets=BUCKETS,
             stop_check_every=8):
    """Decodes ``max_new_tokens`` tokens after ``input_ids`` (batch x prompt)
    with a causal LM of transformers on its lazytpu device, the TPU way: a
    bounded number of compiled graphs, whatever the prompt and output lengths.

    - the prompt is left-padded to a length bucket (``buckets``) and the
      static KV cache (``transformers.StaticCache``) holds a bucket of
      prompt + new tokens: one prefill graph per (batch, prompt bucket);
    - each token is one step (a step boundary per token) whose shapes never
      change: the token, its position and the attention mask are written into
      preallocated device buffers at a device-side position, so every decode
      step after the first replays one cached graph;
    - the host reads whether every sequence has ended only every
      ``stop_check_every`` tokens (0: never; the loop then always makes
      ``max_new_tokens``), and once at the end how many tokens to return.

    Greedy by default (the tokens equal ``model.generate(do_sample=False)``
    on the CPU); ``do_sample=True`` samples from softmax(logits / temperature)
    on the device (lazytpu's random stream, not the CPU's). After a sequence
    produced ``eos_token_id`` (default: the model's generation config) it gets
    ``pad_token_id``. Returns the prompt (unpadded) followed by the new
    tokens, on the device, like ``model.generate``: batch x (prompt +
    generated), where generated ends with the token that ended the last
    sequence to end (its EOS), as ``model.generate`` stops, or after
    ``max_new_tokens``."""
    from transformers import StaticCache
    dev = next(model.parameters()).device
    if dev.type != "lazytpu":
        raise ValueError("lazytpu.hf.generate: the model is on %s, not on a lazytpu "
                         "device (model.to('lazytpu') first)" % dev)
    if max_new_tokens < 1:
        raise ValueError("lazytpu.hf.generate: max_new_tokens=%d, need at least 1"
                         % max_new_tokens)
    gcfg = getattr(model, "generation_config", None)
    if eos_token_id is None and gcfg is not None:
        eos_token_id = gcfg.eos_token_id
    if pad_token_id is None:
        pad_token_id = getattr(gcfg, "pad_token_id", None)
    eos = [] if eos_token_id is None else (
        list(eos_token_id) if isinstance(eos_token_id, (list, tuple)) else [eos_token_id])
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    ids = input_ids.detach().cpu()
    if ids.dim() != 2:
        raise ValueError("lazytpu.hf.generate: input_ids of shape %s, expected "
                         "(batch, prompt length)" % (tuple(ids.shape),))
    mask = (torch.ones_like(ids) if attention_mask is None
            else attention_mask.detach().cpu().to(ids.dtype))
    B, L = ids.shape
    Lb = _bucket(L, buckets)
    T = _bucket(Lb + max_new_tokens, buckets)
    left = Lb - L
    ids_p = torch.cat([torch.full((B, left), pad_token_id, dtype=ids.dtype), ids], 1)
    mask_full = torch.zeros(B, T, dtype=ids.dtype)
    mask_full[:, left:Lb] = mask
    pos = (mask_full[:, :Lb].cumsum(-1) - 1).clamp(min=0)
    cache = StaticCache(config=model.config, max_cache_len=T)

    mask_d = mask_full.to(dev)
    out = model(input_ids=ids_p.to(dev), attention_mask=mask_d, position_ids=pos.to(dev),
                cache=cache, use_cache=True)
    core.mark_step()
    tokens = torch.full((B, max_new_tokens), pad_token_id, dtype=ids.dtype).to(dev)
    step = torch.zeros(1, dtype=torch.long).to(dev)          # index of the new token
    next_pos = pos[:, -1:].to(dev) + 1
    done = torch.zeros(B, dtype=torch.bool).to(dev)
    # per sequence: how many new tokens up to and with its EOS (max_new_tokens
    # while it has none); the output ends at the largest, where
    # model.generate stops
    ends = torch.full((B,), max_new_tokens, dtype=torch.long).to(dev)
    eos_d = torch.tensor(eos, dtype=ids.dtype).to(dev) if eos else None
    ones = torch.ones(B, 1, dtype=ids.dtype).to(dev)
    made = max_new_tokens
    for t in range(max_new_tokens):
        logits = out.logits[:, -1].float()
        if do_sample:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1).squeeze(1)
        else:
            nxt = torch.argmax(logits, dim=-1)
        if eos_d is not None:
            nxt = torch.where(done, torch.full_like(nxt, pad_token_id), nxt)
            ended = torch.isin(nxt, eos_d) & ~done
            ends = torch.where(ended, step + 1, ends)
            done = done | ended
        tokens.index_copy_(1, step, nxt[:, None])
        if t + 1 == max_new_tokens:
            break
        mask_d.index_copy_(1, step + Lb, ones)
        out = model(input_ids=nxt[:, None], attention_mask=mask_d, position_ids=next_pos,
                    cache=cache, use_cache=True)
        next_pos = next_pos + 1
        step = step + 1
        core.mark_step()
        if eos_d is not None and stop_check_every and (t + 1) % stop_check_every == 0 \
                and bool(done.all()):
            made = t + 1
            break
    core.mark_step()
    if eos_d is not None:
        # model.generate stops after the token that ended the last sequence
        # to end: one host read
        made = int(ends.max())
    return torch.cat([input_ids.to(dev), tokens[:, :made]], 1)
