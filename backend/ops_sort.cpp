/*
 * backend/ops_sort.cpp — sort / topk from the table's argsort (stable,
 * NaN above every number) and a gather of the values:
 *   sort(x, dim, descending) and sort.stable -> (gather(x, i), i),
 *     i = argsort(x); argsort / msort decompose to these in aten;
 *   topk(x, k, dim, largest) -> the first k of the sort (largest:
 *     descending); always sorted, which sorted=False allows.
 * Every order is stable, so ties come out by index, like eager's stable
 * CPU sort (eager's unstable sort and topk leave the order of ties free).
 */
#include "lt_aten.h"
#include "lt_register.h"

namespace lazytpu {
namespace {

int64_t sort_dim(const at::Tensor &self, int64_t dim) {
  return c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
}

/* stable argsort of x along d (0 for a 0-dim x) */
Ref argsort(lt_tensor *x, int64_t d, bool descending) {
  lt_attrs a = attrs_of({d, descending ? 1 : 0});
  return trace(LT_OP_argsort, {x}, &a);
}

Ref take_along(lt_tensor *x, lt_tensor *idx, int64_t d) {
  lt_attrs a = attrs_of({d});
  return trace(LT_OP_gather, {x, idx}, &a);
}

std::tuple<at::Tensor, at::Tensor> lt_sort_stable(const at::Tensor &self,
                                                  c10::optional<bool> stable, int64_t dim,
                                                  bool descending) {
  int64_t d = sort_dim(self, dim);
  lt_tensor *x = handle_of(self);
  if (self.dim() == 0) {
    Ref zero = full(lt_tensor_core(x), {}, 0, LT_I64);
    return std::make_tuple(wrap(fresh(Ref::borrow(x), {x})), wrap(std::move(zero)));
  }
  Ref i = argsort(x, d, descending);
  Ref v = take_along(x, i.get(), d);
  return std::make_tuple(wrap(std::move(v)), wrap(std::move(i)));
}

std::tuple<at::Tensor, at::Tensor> lt_sort(const at::Tensor &self, int64_t dim,
                                           bool descending) {
  return lt_sort_stable(self, false, dim, descending);
}

std::tuple<at::Tensor, at::Tensor> lt_topk(const at::Tensor &self, c10::SymInt k_,
                                           int64_t dim, bool largest, bool sorted) {
  int64_t k = k_.expect_int();
  int64_t d = sort_dim(self, dim);
  int64_t n = self.dim() ? self.size(d) : 1;
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  lt_tensor *x = handle_of(self);
  if (self.dim() == 0) {
    Ref zero = full(lt_tensor_core(x), {}, 0, LT_I64);
    return std::make_tuple(wrap(fresh(Ref::borrow(x), {x})), wrap(std::move(zero)));
  }
  Ref i = argsort(x, d, largest);
  lt_attrs s = attrs_of({d, 0, k, 1});
  Ref ik = trace(LT_OP_slice, {i.get()}, &s);
  Ref v = take_along(x, ik.get(), d);
  return std::make_tuple(wrap(std::move(v)), wrap(std::move(ik)));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "sort", TORCH_FN(lt_sort));
  reg(m, "sort.stable", TORCH_FN(lt_sort_stable));
  reg(m, "topk", TORCH_FN(lt_topk));
}

}  // namespace lazytpu
