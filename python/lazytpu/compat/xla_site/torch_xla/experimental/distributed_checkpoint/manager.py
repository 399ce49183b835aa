"""CheckpointManager: checkpoints taken every save_interval steps into
<path>/<step> (torch.distributed.checkpoint with the SPMD planners), the
newest max_to_keep kept, saved in the background (save_async), restored by
step; as torch_xla 2.9's (a process group is required; paths may be fsspec
URLs).

Preemption (chkpt_on_preemption=True): torch_xla's preemption sync manager
reports a SIGTERM as a sync point. Here the manager catches SIGTERM (when
created on the main thread): should_save() of the next step then returns
True (reached_preemption), so the loop checkpoints and can stop; a second
SIGTERM terminates the process as the default action does."""
import logging
import os
import pickle
import signal
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime

import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp

from .planners import SPMDLoadPlanner, SPMDSavePlanner, _map

_MANAGER_METADATA_FILE = ".manager_metadata"


@dataclass
class _CheckpointMetadata:
    step: int
    ts: datetime


def _fs(path):
    from fsspec.core import url_to_fs
    return url_to_fs(path)


class CheckpointManager:
    def __init__(self, path, save_interval, max_to_keep=0, max_pending_async=1,
                 num_of_threads=1, process_group=None, chkpt_on_preemption=True):
        assert dist.is_initialized(), "A process group is required."
        assert save_interval > 0, "save_interval must be positive"
        assert max_pending_async > 0, "max_pending_async must be positive"
        assert max_to_keep >= 0, "max_to_keep must be non-negative"
        self.base_path = os.path.join(path, "")
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep
        self.num_of_threads = num_of_threads
        self.chkpt_on_preemption = chkpt_on_preemption
        self.pg = process_group or dist.new_group()
        self._async_worker_pool = ThreadPoolExecutor(max_workers=1)
        self._async_sem = threading.Semaphore(max_pending_async)
        self._async_futures = []
        self._save_mutex = threading.Lock()
        self._tracked_chkpts = self._load_tracked_chkpts()
        self._preempted = False
        self._prev_handler = None
        if chkpt_on_preemption and threading.current_thread() is threading.main_thread():
            self._prev_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame):
        if self._preempted:           # a second SIGTERM: the default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self._preempted = True

    def __del__(self):
        try:
            if self._prev_handler is not None and \
                    signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._prev_handler)
        except Exception:   # interpreter shutdown, not the main thread
            pass

    def _load_tracked_chkpts(self):
        found, invalid = [], []
        fs, raw = _fs(self.base_path)
        if not fs.exists(raw):
            fs.mkdir(raw)
        else:
            for p in fs.ls(raw, detail=False):
                try:
                    with fs.open(os.path.join(p, _MANAGER_METADATA_FILE), "rb") as f:
                        found.append(pickle.load(f))
                except Exception:
                    invalid.append(p)
        if invalid:
            logging.warning("Ignoring invalid checkpoints: %s", invalid)
        return deque(sorted(found, key=lambda m: m.ts))

    def _get_path(self, step):
        return os.path.join(self.base_path, str(step))

    def _delete_chkpt_at_step(self, step):
        if dist.get_rank(self.pg) == 0:
            fs, raw = _fs(self._get_path(step))
            if fs.exists(raw):
                fs.rm(raw, recursive=True)

    def _release_oldest_checkpoints(self):
        if self.max_to_keep > 0:
            while len(self._tracked_chkpts) > self.max_to_keep:
                self._delete_chkpt_at_step(self._tracked_chkpts.popleft().step)

    def _wait_for_data(self):
        import lazytpu
        lazytpu.mark_step()
        lazytpu.wait_device_ops()

    def _save(self, step, state_dict):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
        with self._save_mutex:
            path = self._get_path(step)
            self._delete_chkpt_at_step(step)
            dist_cp.save(state_dict=state_dict,
                         storage_writer=FsspecWriter(path, thread_count=self.num_of_threads,
                                                     per_thread_copy_ahead=0),
                         planner=SPMDSavePlanner(), process_group=self.pg)
            meta = _CheckpointMetadata(step=step, ts=datetime.now())
            self._tracked_chkpts.append(meta)
            if dist.get_rank(self.pg) == 0:
                fs, raw = _fs(os.path.join(path, _MANAGER_METADATA_FILE))
                with fs.open(raw, "wb") as f:
                    pickle.dump(meta, f)
                self._release_oldest_checkpoints()

    def should_save(self, step):
        """True when step is a multiple of save_interval, or a preemption
        (SIGTERM) was seen."""
        preempted = self.chkpt_on_preemption and self.reached_preemption(step)
        if preempted:
            logging.warning("Preemption sync point reached at step %d. Triggering a "
                            "checkpoint.", step)
        return step % self.save_interval == 0 or preempted

    def save(self, step, state_dict, force=False):
        """Checkpoints state_dict now if should_save(step) or force; True if
        it did."""
        if self.should_save(step) or force:
            self._wait_for_data()
            self._save(step, state_dict)
            return True
        return False

    def save_async(self, step, state_dict, force=False):
        """As save, but the state dict's values are read to the CPU here and
        written by a background thread (at most max_pending_async pending:
        the call waits for a slot)."""
        if self.should_save(step) or force:
            self._wait_for_data()
            cpu = _map(state_dict, lambda path, t: t.detach().cpu())
            self._async_sem.acquire()
            fut = self._async_worker_pool.submit(self._save, step, cpu)
            fut.add_done_callback(lambda _: self._async_sem.release())
            self._async_futures.append(fut)
            return True
        return False

    def restore(self, step, state_dict):
        """Loads the checkpoint of `step` into state_dict in place (device
        tensors keep their sharding); call model.load_state_dict for the
        rest."""
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
        steps = set(m.step for m in self._tracked_chkpts)
        assert step in steps, ("Cannot restore from untracked step %s. Valid steps are: %s"
                               % (step, steps))
        dist_cp.load(state_dict=state_dict, storage_reader=FsspecReader(self._get_path(step)),
                     planner=SPMDLoadPlanner(), process_group=self.pg)

    def all_steps(self):
        """The tracked steps, ascending."""
        return sorted(m.step for m in self._tracked_chkpts)

    def join(self):
        """Waits for the pending save_async checkpoints."""
        wait(self._async_futures)

    def reached_preemption(self, step):
        """True once a SIGTERM reached this process."""
        assert self.chkpt_on_preemption, (
            "Preemption detection not enabled. Please set `chkpt_on_preemption`  when "
            "creating the CheckpointManager")
        return self._preempted
