/*
 * backend/debug_ops.cpp — tensor-level diagnosis helpers as dispatcher ops
 * (module.cpp has no torch headers, so Python reaches device tensors here):
 *   graph_text(Tensor[] ts) -> str   lt_graph_text: the pending graph as text
 *   graph_dot(Tensor[] ts) -> str    lt_graph_dot: the same graph in DOT
 * Used by lazytpu.debug.graph_text / graph_dot. Nothing is executed; a tensor
 * whose value is already data shows up as a parameter.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <torch/library.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace lazytpu {
namespace {

typedef char *(*graph_fn)(lt_tensor *const *, int);

/* Runs fn over the tensors' handles; the malloc'd text becomes a string.
 * Throws (RuntimeError in Python) on an empty list, a tensor that is not a
 * device tensor, or an error of the core. */
std::string graph_of(at::TensorList ts, graph_fn fn, const char *what) {
  TORCH_CHECK(!ts.empty(), "lazytpu.debug.", what, ": give at least one device tensor");
  std::vector<lt_tensor *> hs;
  hs.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); i++) {
    TORCH_CHECK(ts[i].defined() && impl_of(ts[i]) != nullptr, "lazytpu.debug.", what,
                ": tensor ", i, " is not a lazytpu device tensor (device ",
                ts[i].defined() ? ts[i].device().str() : std::string("undefined"), ")");
    hs.push_back(handle_of(ts[i]));
  }
  char *s = fn(hs.data(), (int)hs.size());
  if (!s) {
    const char *m = lt_last_error();
    TORCH_CHECK(false, "lazytpu.debug.", what, ": ", (m && *m) ? m : "failed");
  }
  std::string out(s);
  free(s);
  return out;
}

std::string lt_graph_text_op(at::TensorList ts) { return graph_of(ts, lt_graph_text, "graph_text"); }
std::string lt_graph_dot_op(at::TensorList ts) { return graph_of(ts, lt_graph_dot, "graph_dot"); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazytpu, m) {
  m.def("graph_text(Tensor[] ts) -> str");
  m.def("graph_dot(Tensor[] ts) -> str");
}

TORCH_LIBRARY_IMPL(lazytpu, PrivateUse1, m) {
  reg_own(m, "graph_text", TORCH_FN(lt_graph_text_op));
  reg_own(m, "graph_dot", TORCH_FN(lt_graph_dot_op));
}

/* Inspection only: no autograd. */
TORCH_LIBRARY_IMPL(lazytpu, AutogradPrivateUse1, m) {
  reg_autograd_fallthrough(m, "graph_text");
  reg_autograd_fallthrough(m, "graph_dot");
}

}  // namespace lazytpu
