"""lazytpu.utils: small helpers training scripts use (synthetic data,
progress lines, TensorBoard summaries); torch_xla's utils.utils and
test.test_utils map here."""
import datetime
import time

from . import metrics as _met
from .world import get_ordinal

__all__ = ["SampleGenerator", "now", "print_training_update", "print_test_update",
           "get_summary_writer", "write_to_summary", "close_summary_writer"]


class SampleGenerator:
    """An iterable that yields the same `data` `sample_count` times (a stand-in
    for a DataLoader in fake-data runs); every iter() starts afresh."""

    def __init__(self, data, sample_count):
        self._data = data
        self._sample_count = int(sample_count)

    def __len__(self):
        return self._sample_count

    def __iter__(self):
        for _ in range(self._sample_count):
            yield self._data


def now(format="%H:%M:%S"):
    """The wall-clock time as a string."""
    return datetime.datetime.now().strftime(format)


def _device_spec(device):
    return "%s/%d" % (device, get_ordinal())


def print_training_update(device, step, loss, rate, global_rate, epoch=None,
                          summary_writer=None):
    """One progress line: device/ordinal, epoch, step, loss, rates, time."""
    parts = ["Training", "Device=%s" % _device_spec(device)]
    if epoch is not None:
        parts.append("Epoch=%s" % epoch)
    parts += ["Step=%s" % step, "Loss=%.5f" % loss, "Rate=%.2f" % rate,
              "GlobalRate=%.2f" % global_rate, "Time=%s" % now()]
    print("| " + " ".join(parts), flush=True)
    if summary_writer is not None:
        write_to_summary(summary_writer, dict_to_write={
            "examples/sec": rate, "average_examples/sec": global_rate})


def print_test_update(device, accuracy, epoch=None, step=None):
    """One test-result line: device/ordinal, step, epoch, accuracy (left out
    when None), time."""
    parts = ["Test", "Device=%s" % _device_spec(device)]
    if step is not None:
        parts.append("Step=%s" % step)
    if epoch is not None:
        parts.append("Epoch=%s" % epoch)
    if accuracy is not None:
        parts.append("Accuracy=%.2f" % accuracy)
    parts.append("Time=%s" % now())
    print("| " + " ".join(parts), flush=True)


def get_summary_writer(logdir):
    """A TensorBoard SummaryWriter for logdir (None when logdir is empty).
    Needs the tensorboard package."""
    if not logdir:
        return None
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, dict_to_write={"TensorboardStartTimestamp": time.time()})
    return writer


def write_to_summary(summary_writer, global_step=None, dict_to_write=None,
                     write_xla_metrics=False):
    """Writes scalars (and, with write_xla_metrics, every counter and the
    metric accumulators) to a SummaryWriter; no-op for None."""
    if summary_writer is None:
        return
    for k, v in (dict_to_write or {}).items():
        summary_writer.add_scalar(k, v, global_step)
    if write_xla_metrics:
        fallback_calls = 0
        for name in _met.counter_names():
            v = _met.counter_value(name) or 0
            if name.startswith("aten::"):
                fallback_calls += v
            summary_writer.add_scalar(name, v, global_step)
        for name in _met.metric_names():
            d = _met.metric_data(name)
            if d:
                summary_writer.add_scalar(name, d[1], global_step)
        summary_writer.add_scalar("aten_ops_sum", fallback_calls, global_step)


def close_summary_writer(summary_writer):
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()
