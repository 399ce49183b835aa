/*
 * backend/custom_ops.cpp — lazytpu's own dispatcher ops, torch.ops.lazytpu.*:
 *   all_reduce(Tensor t, int reduce_type, float scale) -> Tensor
 *   all_gather(Tensor t, int dim) -> Tensor
 *   reduce_scatter(Tensor t, int reduce_type, int dim, float scale) -> Tensor
 *   broadcast(Tensor t, int root) -> Tensor
 * (collectives as IR ops of the step's graph; used by lazytpu.spawn),
 *   optimization_barrier(Tensor[] ts) -> Tensor[]   (lazytpu.barrier: one opt_barrier IR node
 *     per tensor: result k is ts[k]'s value, fenced by all of ts), and
 *   tensor_info(Tensor t) -> str   (lazytpu.debug.tensor_info)
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <torch/library.h>

#include <sstream>

namespace lazytpu {
namespace {

Ref collective(lt_op op, const at::Tensor &t, std::initializer_list<int64_t> ints, double scale) {
  lt_attrs a = attrs_of(ints);
  a.f[0] = scale;
  return trace(op, {handle_of(t)}, &a);
}

at::Tensor lt_all_reduce(const at::Tensor &t, int64_t reduce_type, double scale) {
  return wrap(collective(LT_OP_all_reduce, t, {reduce_type}, scale));
}
at::Tensor lt_all_gather(const at::Tensor &t, int64_t dim) {
  return wrap(collective(LT_OP_all_gather, t, {c10::maybe_wrap_dim(dim, std::max<int64_t>(t.dim(), 1))}, 1.0));
}
at::Tensor lt_reduce_scatter(const at::Tensor &t, int64_t reduce_type, int64_t dim, double scale) {
  return wrap(collective(LT_OP_reduce_scatter, t,
                         {reduce_type, c10::maybe_wrap_dim(dim, std::max<int64_t>(t.dim(), 1))}, scale));
}
at::Tensor lt_broadcast(const at::Tensor &t, int64_t root) {
  return wrap(collective(LT_OP_broadcast, t, {root}, 1.0));
}

/* Result k = opt_barrier(ts[k], every other ts[j]): each value is read only
 * once all of ts exist (XLA's tuple-wide barrier; n^2 edges in the IR). */
std::vector<at::Tensor> lt_optimization_barrier(at::TensorList ts) {
  std::vector<lt_tensor *> all;
  for (const at::Tensor &t : ts) all.push_back(handle_of(t));
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < all.size(); k++) {
    std::vector<lt_tensor *> in{all[k]};
    for (size_t j = 0; j < all.size(); j++)
      if (j != k) in.push_back(all[j]);
    out.push_back(wrap(trace_n(LT_OP_opt_barrier, in, nullptr)));
  }
  return out;
}

std::string lt_tensor_info(const at::Tensor &t) {
  lt_tensor *h = handle_of(t);
  char buf[128];
  std::ostringstream os;
  os << "core=" << lt_tensor_core(h) << ";shape=" << lt_shape_str(lt_tensor_shape(h), buf, sizeof buf)
     << ";dtype=" << lt_dtype_name(lt_tensor_dtype(h))
     << ";storage_dtype=" << lt_dtype_name(lt_tensor_storage_dtype(h))
     << ";pending=" << lt_tensor_is_pending(h);
  return os.str();
}

}  // namespace

TORCH_LIBRARY(lazytpu, m) {
  m.def("all_reduce(Tensor t, int reduce_type, float scale) -> Tensor");
  m.def("all_gather(Tensor t, int dim) -> Tensor");
  m.def("reduce_scatter(Tensor t, int reduce_type, int dim, float scale) -> Tensor");
  m.def("broadcast(Tensor t, int root) -> Tensor");
  m.def("tensor_info(Tensor t) -> str");
  m.def("optimization_barrier(Tensor[] ts) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(lazytpu, PrivateUse1, m) {
  reg_own(m, "all_reduce", TORCH_FN(lt_all_reduce));
  reg_own(m, "all_gather", TORCH_FN(lt_all_gather));
  reg_own(m, "reduce_scatter", TORCH_FN(lt_reduce_scatter));
  reg_own(m, "broadcast", TORCH_FN(lt_broadcast));
  reg_own(m, "tensor_info", TORCH_FN(lt_tensor_info));
  reg_own(m, "optimization_barrier", TORCH_FN(lt_optimization_barrier));
}



/* No autograd formulas: these run on gradients / plain values. */
TORCH_LIBRARY_IMPL(lazytpu, AutogradPrivateUse1, m) {
  for (const char *n : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "tensor_info",
                        "optimization_barrier"})
    reg_autograd_fallthrough(m, n);
}
}  // namespace lazytpu
