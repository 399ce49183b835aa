/*
 * backend/replay_ops.cpp — recorded programs (include/lazytpu.h, "recorded
 * graphs") as dispatcher ops, for python/lazytpu/compile.py (the
 * torch.compile backend):
 *   replay_sync_inputs(Tensor[] inputs) -> ()
 *   replay_record(Tensor[] inputs, Tensor[] outputs) -> int   a recording id
 *   replay_run(int id, Tensor[] inputs) -> Tensor[]           new outputs
 *   replay_free(int id) -> ()
 *   replay_info(int id) -> int[]                              [outputs, nodes]
 * Ids index a process-wide table of lt_replay references (guarded by a
 * mutex; a freed slot is reused). Errors become RuntimeError with the core's
 * message ("not replayable: ..." for graphs that must stay lazy).
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <torch/library.h>

#include <mutex>
#include <vector>

namespace lazytpu {
namespace {

std::mutex g_mu;
std::vector<lt_replay *> g_table;

std::vector<lt_tensor *> handles(at::TensorList ts, const char *what) {
  std::vector<lt_tensor *> hs;
  hs.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); i++) {
    TORCH_CHECK(ts[i].defined() && impl_of(ts[i]) != nullptr, "lazytpu: compiled graph: ",
                what, " ", i, " is not a lazytpu device tensor");
    hs.push_back(handle_of(ts[i]));
  }
  return hs;
}

lt_replay *lookup(int64_t id) {
  std::lock_guard<std::mutex> g(g_mu);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_table.size() && g_table[id],
              "lazytpu: no recorded graph ", id);
  return lt_replay_retain(g_table[id]);
}

void sync_inputs_op(at::TensorList inputs) {
  std::vector<lt_tensor *> in = handles(inputs, "input");
  check(lt_replay_sync_inputs(in.data(), (int)in.size()));
}

int64_t record_op(at::TensorList inputs, at::TensorList outputs) {
  std::vector<lt_tensor *> in = handles(inputs, "input");
  std::vector<lt_tensor *> out = handles(outputs, "output");
  lt_replay *r = nullptr;
  check(lt_replay_record(in.data(), (int)in.size(), out.data(), (int)out.size(), &r));
  std::lock_guard<std::mutex> g(g_mu);
  for (size_t i = 0; i < g_table.size(); i++)
    if (!g_table[i]) {
      g_table[i] = r;
      return (int64_t)i;
    }
  g_table.push_back(r);
  return (int64_t)g_table.size() - 1;
}

std::vector<at::Tensor> run_op(int64_t id, at::TensorList inputs) {
  lt_replay *r = lookup(id);
  std::vector<lt_tensor *> in = handles(inputs, "input");
  int n = lt_replay_n_outputs(r);
  std::vector<lt_tensor *> out((size_t)n, nullptr);
  lt_status st = lt_replay_run(r, in.data(), (int)in.size(), out.data());
  lt_replay_release(r);
  check(st);
  std::vector<at::Tensor> res;
  res.reserve((size_t)n);
  for (int i = 0; i < n; i++) res.push_back(wrap(Ref(out[i])));
  return res;
}

void free_op(int64_t id) {
  lt_replay *r = nullptr;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (id >= 0 && id < (int64_t)g_table.size()) {
      r = g_table[id];
      g_table[id] = nullptr;
    }
  }
  lt_replay_release(r);
}

std::vector<int64_t> info_op(int64_t id) {
  lt_replay *r = lookup(id);
  std::vector<int64_t> v{lt_replay_n_outputs(r), lt_replay_n_nodes(r)};
  lt_replay_release(r);
  return v;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazytpu, m) {
  m.def("replay_sync_inputs(Tensor[] inputs) -> ()");
  m.def("replay_record(Tensor[] inputs, Tensor[] outputs) -> int");
  m.def("replay_run(int id, Tensor[] inputs) -> Tensor[]");
  m.def("replay_free(int id) -> ()", TORCH_FN(free_op));
  m.def("replay_info(int id) -> int[]", TORCH_FN(info_op));
}

TORCH_LIBRARY_IMPL(lazytpu, PrivateUse1, m) {
  reg_own(m, "replay_sync_inputs", TORCH_FN(sync_inputs_op));
  reg_own(m, "replay_record", TORCH_FN(record_op));
  reg_own(m, "replay_run", TORCH_FN(run_op));
}

/* Graphs handed over by AOTAutograd run without autograd. */
TORCH_LIBRARY_IMPL(lazytpu, AutogradPrivateUse1, m) {
  reg_autograd_fallthrough(m, "replay_sync_inputs");
  reg_autograd_fallthrough(m, "replay_record");
  reg_autograd_fallthrough(m, "replay_run");
}

}  // namespace lazytpu
