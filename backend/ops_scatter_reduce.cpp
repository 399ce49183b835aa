/*
 * backend/ops_scatter_reduce.cpp — the reducing scatters, on the table's
 * scatter_reduce op (sum, prod, amax, amin over base's values, in index
 * order):
 *   scatter_reduce(self, dim, index, src, reduce, include_self):
 *     include_self=False first resets the scattered positions (scatter of
 *     0 for sum / mean, 1 for prod, of src itself for amax / amin: a max
 *     over a set containing one of its own elements is unchanged);
 *     mean = the sum divided by the count of values that took part (a
 *     scatter_add of ones; floor division for integers, as eager);
 *   index_reduce(self, dim, index, source, reduce, include_self): the index
 *     vector broadcast along `dim` of source, then scatter_reduce;
 *   scatter(self, dim, index, src|value, reduce="add"|"multiply");
 *   histc of an integer tensor (the CPU refuses those; CUDA's semantics:
 *     bin = (x - min) * bins / (max - min) in integers, x == max in the last
 *     bin, values outside [min, max] not counted, the counts in the input's
 *     dtype) as a scatter_add of ones; floating inputs keep the CPU's
 *     kernel (the counted fallback). MoE routers (transformers' grouped
 *     experts) count tokens per expert so.
 * Their gradients are autograd's formulas over native ops (gather,
 * scatter_add, index_select, where, ...), so training stays on the device.
 */
#include "lt_aten.h"
#include "lt_guard.h"
#include "lt_register.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/ops/histc_ops.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

namespace lazytpu {
namespace {

enum { R_SUM = 0, R_PROD = 1, R_AMAX = 2, R_AMIN = 3, R_MEAN = 4 };

int reduce_code(c10::string_view r, const char *op, bool index_reduce) {
  if (r == "prod") return R_PROD;
  if (r == "mean") return R_MEAN;
  if (r == "amax") return R_AMAX;
  if (r == "amin") return R_AMIN;
  if (r == "sum" && !index_reduce) return R_SUM;
  if (index_reduce)
    TORCH_CHECK(false, op, "(): Expected reduce to be one of prod, mean, amax or amin but got ", r,
                ".");
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", r);
  return R_SUM;
}

/* x (base) with the reduction of src at index along d; idx is int64 of the
 * rank of x, no larger than src. */
Ref scatter_reduce_ref(Ref x, Ref idx, Ref src, int64_t d, int code, bool include_self) {
  int core = lt_tensor_core(x.get());
  lt_dtype dt = x.dtype();
  std::vector<int64_t> id = dims_of(idx.shape());
  lt_attrs ad = attrs_of({d});
  if (!include_self) {
    Ref reset = code == R_AMAX || code == R_AMIN ? Ref::borrow(src.get())
                                                 : full(core, id, code == R_PROD ? 1 : 0, dt);
    x = trace(LT_OP_scatter, {x.get(), idx.get(), reset.get()}, &ad);
  }
  int k = code == R_MEAN ? R_SUM : code;
  lt_attrs a = attrs_of({d, k});
  Ref y = trace(LT_OP_scatter_reduce, {x.get(), idx.get(), src.get()}, &a);
  if (code != R_MEAN) return y;
  std::vector<int64_t> xd = dims_of(x.shape());
  Ref cnt = trace(LT_OP_scatter_add, {full(core, xd, include_self ? 1 : 0, dt).get(), idx.get(),
                                      full(core, id, 1, dt).get()}, &ad);
  Ref zero = scalar_typed(core, 0, dt), one = scalar_typed(core, 1, dt);
  cnt = trace(LT_OP_where, {trace(LT_OP_eq, {cnt.get(), zero.get()}).get(), one.get(), cnt.get()});
  if (lt_dtype_is_float(dt)) return trace(LT_OP_div, {y.get(), cnt.get()});
  return trace(LT_OP_floor_divide, {y.get(), cnt.get()});
}

void check_long_index(const at::Tensor &index, const char *op) {
  if (index.scalar_type() != at::kLong) throw_unsupported(op);   /* eager's own error */
}

at::Tensor lt_scatter_reduce(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                             const at::Tensor &src, c10::string_view reduce, bool include_self) {
  check_long_index(index, "scatter_reduce: index dtype");
  int code = reduce_code(reduce, "scatter_reduce", false);
  TORCH_CHECK(self.scalar_type() == src.scalar_type(), "scatter_reduce(): Expected self.dtype "
              "to be equal to src.dtype");
  int core = common_core({&self, &index, &src});
  Ref x = operand(self, core), i = operand(index, core), s = operand(src, core);
  int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (index.numel() == 0) return wrap(fresh(std::move(x), {handle_of(self)}));
  return wrap_as(scatter_reduce_ref(std::move(x), std::move(i), std::move(s), d, code,
                                    include_self), self);
}

at::Tensor lt_index_reduce(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                           const at::Tensor &source, c10::string_view reduce, bool include_self) {
  int code = reduce_code(reduce, "index_reduce", true);
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
                    "index_reduce_(): Expected dtype int32/int64 for index but got: ",
                    index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "index_reduce_(): self (",
              self.scalar_type(), ") and source (", source.scalar_type(),
              ") must have the same scalar type");
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_reduce_(): Index is supposed to be a vector");
  int core = common_core({&self, &index, &source});
  Ref x = operand(self, core), i = operand(index, core), s = operand(source, core);
  int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (x.ndim() == 0) x = reshape(x.get(), {1});
  if (s.ndim() == 0) s = reshape(s.get(), {1});
  TORCH_CHECK(s.ndim() == x.ndim(), "index_reduce_(): Source and destination tensors must "
              "have the same number of dimensions, got ", source.dim(), " and ", self.dim());
  std::vector<int64_t> sd = dims_of(s.shape()), xd = dims_of(x.shape());
  int64_t ni = index.numel();
  TORCH_CHECK_INDEX(sd[d] == ni, "index_reduce_(): Number of indices (", ni, ") should be "
                    "equal to source.size(dim) (", sd[d], ")");
  for (size_t k = 0; k < sd.size(); k++)
    TORCH_CHECK((int64_t)k == d || sd[k] == xd[k], "index_reduce_(): Source/destination tensor "
                "must have same slice shapes. Destination slice shape: ", self.sizes(),
                " and source slice shape: ", source.sizes());
  if (ni == 0) return wrap(reshape(x.get(), self.sizes().vec()));
  std::vector<int64_t> ishape(sd.size(), 1);
  ishape[d] = ni;
  Ref ie = expand(reshape(cast(i.get(), LT_I64).get(), ishape).get(), sd);
  Ref r = scatter_reduce_ref(std::move(x), std::move(ie), std::move(s), d, code, include_self);
  return wrap_as(reshape(r.get(), self.sizes().vec()), self);
}

/* scatter(..., reduce="add" | "multiply"): src limited to the index's shape */
at::Tensor scatter_with(const at::Tensor &self, int64_t dim, const at::Tensor &index, Ref s,
                        c10::string_view reduce) {
  if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)
    throw_unsupported("scatter: index dtype");   /* eager's own error */
  TORCH_CHECK(reduce == "add" || reduce == "multiply", "reduce argument must be either add or "
              "multiply.");
  int core = common_core({&self, &index});
  Ref x = operand(self, core), i = cast(operand(index, core).get(), LT_I64);
  int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (index.numel() == 0) return wrap(fresh(std::move(x), {handle_of(self)}));
  std::vector<int64_t> id = index.sizes().vec(), sd = dims_of(s.shape());
  for (size_t k = 0; k < id.size() && k < sd.size(); k++)
    if (sd[k] != id[k]) {
      lt_attrs a = attrs_of({(int64_t)k, 0, id[k], 1});
      s = trace(LT_OP_slice, {s.get()}, &a);
    }
  s = cast(s.get(), x.dtype());
  return wrap_as(scatter_reduce_ref(std::move(x), std::move(i), std::move(s), d,
                                    reduce == "add" ? R_SUM : R_PROD, true), self);
}
at::Tensor lt_scatter_reduce_src(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                                 const at::Tensor &src, c10::string_view reduce) {
  TORCH_CHECK(self.scalar_type() == src.scalar_type(), "scatter(): Expected self.dtype to be "
              "equal to src.dtype");
  int core = common_core({&self, &index, &src});
  return scatter_with(self, dim, index, operand(src, core), reduce);
}
at::Tensor lt_scatter_value_reduce(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                                   const c10::Scalar &value, c10::string_view reduce) {
  int core = common_core({&self, &index});
  return scatter_with(self, dim, index,
                      full(core, index.sizes().vec(), value.toDouble(),
                           to_lt_dtype(self.scalar_type())), reduce);
}

at::Tensor lt_histc(const at::Tensor &self, int64_t bins, const c10::Scalar &min,
                    const c10::Scalar &max) {
  if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/false))
    return at::native::call_fallback_fn<&cpu_fallback_boxed, at::_ops::histc>::call(self, bins,
                                                                                   min, max);
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for bins");
  int64_t lo = min.toLong(), hi = max.toLong();
  if (lo == hi && self.numel() > 0) {   /* the data's range: a host read, as on CUDA */
    lo = self.min().item<int64_t>();
    hi = self.max().item<int64_t>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "torch.histc(): max must be larger than min (got min ", lo, ", max ",
              hi, ") for ", self.scalar_type(), " input of shape ", self.sizes());
  at::Tensor x = self.reshape({-1}).to(at::kLong);
  at::Tensor valid = at::logical_and(x.ge(lo), x.le(hi));
  at::Tensor bin = (x.sub(lo).mul(bins)).div(hi - lo, "trunc").clamp_max(bins - 1);
  bin = at::where(valid, bin, at::zeros_like(bin));
  at::Tensor ones = valid.to(self.scalar_type());
  return at::zeros({bins}, self.options()).scatter_add(0, bin, ones);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "histc", TORCH_FN(lt_histc));
  reg(m, "scatter_reduce.two", TORCH_FN(lt_scatter_reduce));
  reg(m, "index_reduce", TORCH_FN(lt_index_reduce));
  reg(m, "scatter.reduce", TORCH_FN(lt_scatter_reduce_src));
  reg(m, "scatter.value_reduce", TORCH_FN(lt_scatter_value_reduce));
}

}  // namespace lazytpu
