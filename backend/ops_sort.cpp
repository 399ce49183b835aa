/*
 * backend/ops_sort.cpp — order statistics: sort / topk / kthvalue from the
 * table's argsort (stable, NaN above every number) and a gather of the
 * values, cummax / cummin from the table's cummax_indices:
 *   sort(x, dim, descending) and sort.stable -> (gather(x, i), i),
 *     i = argsort(x); argsort / msort decompose to these in aten;
 *   topk(x, k, dim, largest) -> the first k of the sort (largest:
 *     descending); always sorted, which sorted=False allows.
 *   kthvalue(x, k, dim) -> element k-1 of the ascending sort (and its
 *     index); NaN counts as the largest, as in eager;
 *   cummax / cummin(x, dim) -> (gather(x, i), i), i = cummax_indices
 *     (ties and NaN take the latest index, eager's rule).
 * Every order is stable, so ties come out by index, like eager's stable
 * CPU sort (eager's unstable sort, topk and kthvalue leave the order of
 * ties free).
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

std::tuple<at::Tensor, at::Tensor> lt_kthvalue(const at::Tensor &self, int64_t k, int64_t dim,
                                               bool keepdim) {
  int64_t d = sort_dim(self, dim);
  int64_t n = self.dim() ? self.size(d) : 1;
  TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", dim);
  lt_tensor *x = handle_of(self);
  if (self.dim() == 0) {
    Ref zero = full(lt_tensor_core(x), {}, 0, LT_I64);
    return std::make_tuple(wrap(fresh(Ref::borrow(x), {x})), wrap(std::move(zero)));
  }
  Ref i = argsort(x, d, false);
  lt_attrs s = attrs_of({d, k - 1, k, 1});
  Ref ik = trace(LT_OP_slice, {i.get()}, &s);   /* keepdim form */
  Ref v = take_along(x, ik.get(), d);
  if (!keepdim) {
    std::vector<int64_t> out = self.sizes().vec();
    out.erase(out.begin() + d);
    return std::make_tuple(wrap(reshape(v.get(), out)), wrap(reshape(ik.get(), out)));
  }
  return std::make_tuple(wrap(std::move(v)), wrap(std::move(ik)));
}

std::tuple<at::Tensor, at::Tensor> cum_extreme(const at::Tensor &self, int64_t dim, bool min) {
  int64_t d = sort_dim(self, dim);
  lt_tensor *x = handle_of(self);
  if (self.dim() == 0) {
    Ref zero = full(lt_tensor_core(x), {}, 0, LT_I64);
    return std::make_tuple(wrap(fresh(Ref::borrow(x), {x})), wrap(std::move(zero)));
  }
  lt_attrs a = attrs_of({d, min ? 1 : 0});
  Ref i = trace(LT_OP_cummax_indices, {x}, &a);
  Ref v = take_along(x, i.get(), d);
  return std::make_tuple(wrap(std::move(v)), wrap(std::move(i)));
}
std::tuple<at::Tensor, at::Tensor> lt_cummax(const at::Tensor &self, int64_t dim) {
  return cum_extreme(self, dim, false);
}
std::tuple<at::Tensor, at::Tensor> lt_cummin(const at::Tensor &self, int64_t dim) {
  return cum_extreme(self, dim, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "sort", TORCH_FN(lt_sort));
  reg(m, "sort.stable", TORCH_FN(lt_sort_stable));
  reg(m, "topk", TORCH_FN(lt_topk));
  reg(m, "kthvalue", TORCH_FN(lt_kthvalue));
  reg(m, "cummax", TORCH_FN(lt_cummax));
  reg(m, "cummin", TORCH_FN(lt_cummin));
}

}  // namespace lazytpu
