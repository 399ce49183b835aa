/*
 * backend/ops_ew.cpp — elementwise and mask kernels composed from table ops:
 *   bitwise_and/or/xor/not (bool and integer tensors; floats run on the CPU
 *     fallback, which raises eager's error),
 *   isinf/isposinf/isneginf/isfinite, nan_to_num (wheres on those tests),
 *   isin (the table's isin on both inputs cast to their result type; with a
 *     scalar on either side, an eq, and an any over the test elements),
 *   tril/triu (a mask of arange comparisons and where),
 *   masked_scatter (the k-th masked position takes source's k-th element:
 *     positions by a cumsum of the mask, then a gather),
 *   arange (the factory and its out= form; the length by eager's rule).
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ExpandUtils.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>

namespace lazytpu {
namespace {

bool is_bits(const at::Tensor &t) {
  return t.scalar_type() == at::kBool || c10::isIntegralType(t.scalar_type(), false);
}

at::Tensor bitwise(lt_op op, lt_op bool_op, const at::Tensor &self, const at::Tensor &other) {
  if (!is_bits(self) || !is_bits(other)) throw_unsupported("bitwise ops on floats");
  int core = common_core({&self, &other});
  Ref a = operand(self, core), b = operand(other, core);
  bool both_bool = a.dtype() == LT_BOOL && b.dtype() == LT_BOOL;
  return wrap_as(trace(both_bool ? bool_op : op, {a.get(), b.get()}), self);
}
at::Tensor bitwise_s(lt_op op, lt_op bool_op, const at::Tensor &self, const c10::Scalar &other) {
  if (!is_bits(self) || other.isFloatingPoint() || other.isComplex())
    throw_unsupported("bitwise ops on floats");
  lt_tensor *a = handle_of(self);
  Ref b = scalar(lt_tensor_core(a), other);
  bool both_bool = lt_tensor_dtype(a) == LT_BOOL && other.isBoolean();
  return wrap_as(trace(both_bool ? bool_op : op, {a, b.get()}), self);
}
at::Tensor lt_bitwise_and(const at::Tensor &s, const at::Tensor &o) {
  return bitwise(LT_OP_bit_and, LT_OP_logical_and, s, o);
}
at::Tensor lt_bitwise_or(const at::Tensor &s, const at::Tensor &o) {
  return bitwise(LT_OP_bit_or, LT_OP_logical_or, s, o);
}
at::Tensor lt_bitwise_xor(const at::Tensor &s, const at::Tensor &o) {
  return bitwise(LT_OP_bit_xor, LT_OP_logical_xor, s, o);
}
at::Tensor lt_bitwise_and_s(const at::Tensor &s, const c10::Scalar &o) {
  return bitwise_s(LT_OP_bit_and, LT_OP_logical_and, s, o);
}
at::Tensor lt_bitwise_or_s(const at::Tensor &s, const c10::Scalar &o) {
  return bitwise_s(LT_OP_bit_or, LT_OP_logical_or, s, o);
}
at::Tensor lt_bitwise_xor_s(const at::Tensor &s, const c10::Scalar &o) {
  return bitwise_s(LT_OP_bit_xor, LT_OP_logical_xor, s, o);
}
at::Tensor lt_bitwise_not(const at::Tensor &self) {
  if (!is_bits(self)) throw_unsupported("bitwise_not on floats");
  lt_tensor *a = handle_of(self);
  lt_op op = lt_tensor_dtype(a) == LT_BOOL ? LT_OP_logical_not : LT_OP_bit_not;
  return wrap_as(trace(op, {a}), self);
}

/* ------------------------------------------------------------ inf tests */

Ref abs_eq_inf(lt_tensor *x) {
  Ref a = trace(LT_OP_abs, {x});
  Ref inf = scalar(lt_tensor_core(x), INFINITY);
  return trace(LT_OP_eq, {a.get(), inf.get()});
}
at::Tensor all_false(lt_tensor *x, bool v) {
  return wrap(full(lt_tensor_core(x), dims_of(*lt_tensor_shape(x)), v ? 1 : 0, LT_BOOL));
}
at::Tensor lt_isinf(const at::Tensor &self) {
  lt_tensor *x = handle_of(self);
  if (!lt_dtype_is_float(lt_tensor_dtype(x))) return all_false(x, false);
  return wrap(abs_eq_inf(x));
}
at::Tensor signed_inf(const at::Tensor &self, double v) {
  lt_tensor *x = handle_of(self);
  if (!lt_dtype_is_float(lt_tensor_dtype(x))) return all_false(x, false);
  Ref inf = scalar(lt_tensor_core(x), v);
  return wrap(trace(LT_OP_eq, {x, inf.get()}));
}
at::Tensor lt_isposinf(const at::Tensor &self) { return signed_inf(self, INFINITY); }
at::Tensor lt_isneginf(const at::Tensor &self) { return signed_inf(self, -INFINITY); }
at::Tensor lt_isfinite(const at::Tensor &self) {
  lt_tensor *x = handle_of(self);
  if (!lt_dtype_is_float(lt_tensor_dtype(x))) return all_false(x, true);
  Ref notnan = trace(LT_OP_eq, {x, x});
  Ref inf = abs_eq_inf(x);
  Ref fin = trace(LT_OP_logical_not, {inf.get()});
  return wrap(trace(LT_OP_logical_and, {notnan.get(), fin.get()}));
}

/* nan -> nan (0), inf -> posinf (the dtype's max), -inf -> neginf (its
 * lowest), the replacements rounded to x's dtype as eager does; integers
 * and bools are copied */
template <class T>
void finite_limits(double *hi, double *lo) {
  *hi = (double)std::numeric_limits<T>::max();
  *lo = (double)std::numeric_limits<T>::lowest();
}
at::Tensor lt_nan_to_num(const at::Tensor &self, c10::optional<double> nan,
                         c10::optional<double> posinf, c10::optional<double> neginf) {
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  lt_dtype dt = lt_tensor_dtype(x);
  if (!lt_dtype_is_float(dt)) {
    if (lt_dtype_is_complex(dt)) throw_unsupported("nan_to_num of a complex tensor");
    return wrap(trace(LT_OP_copy, {x}));
  }
  double hi, lo;
  switch (self.scalar_type()) {
  case at::kDouble: finite_limits<double>(&hi, &lo); break;
  case at::kBFloat16: finite_limits<c10::BFloat16>(&hi, &lo); break;
  case at::kHalf: finite_limits<c10::Half>(&hi, &lo); break;
  default: finite_limits<float>(&hi, &lo); break;
  }
  Ref vn = scalar_typed(core, nan.value_or(0.0), dt);
  Ref vp = scalar_typed(core, posinf.value_or(hi), dt);
  Ref vm = scalar_typed(core, neginf.value_or(lo), dt);
  Ref pinf = scalar(core, INFINITY), minf = scalar(core, -INFINITY);
  Ref r = trace(LT_OP_where, {trace(LT_OP_eq, {x, minf.get()}).get(), vm.get(), x});
  r = trace(LT_OP_where, {trace(LT_OP_eq, {x, pinf.get()}).get(), vp.get(), r.get()});
  r = trace(LT_OP_where, {trace(LT_OP_isnan, {x}).get(), vn.get(), r.get()});
  return wrap(std::move(r));
}

/* ------------------------------------------------------------------ isin */

void check_isin_dtype(c10::ScalarType st) {
  TORCH_CHECK(st != at::kBool && !at::isComplexType(st) && !at::isQIntType(st),
              "Unsupported input type encountered for isin(): ", st);
}
/* the dtype of eager's wrapped-number tensor of s */
void check_isin_scalar(const c10::Scalar &s) {
  check_isin_dtype(s.isBoolean() ? at::kBool : s.isComplex() ? at::kComplexDouble : at::kLong);
}
at::Tensor isin_done(Ref r, bool invert) {
  if (invert) r = trace(LT_OP_logical_not, {r.get()});
  return wrap(std::move(r));
}
at::Tensor lt_isin_tt(const at::Tensor &elements, const at::Tensor &test, bool assume_unique,
                      bool invert) {
  check_isin_dtype(elements.scalar_type());
  check_isin_dtype(test.scalar_type());
  int core = common_core({&elements, &test});
  lt_dtype rt = to_lt_dtype(at::result_type(elements, test));
  Ref e = operand(elements, core), t = operand(test, core);
  Ref ec = cast(e.get(), rt), tc = cast(t.get(), rt);
  lt_attrs a = attrs_of({invert ? 1 : 0});
  return wrap(trace(LT_OP_isin, {ec.get(), tc.get()}, &a));
}
at::Tensor lt_isin_ts(const at::Tensor &elements, const c10::Scalar &test, bool assume_unique,
                      bool invert) {
  check_isin_dtype(elements.scalar_type());
  check_isin_scalar(test);
  lt_tensor *x = handle_of(elements);
  lt_dtype rt = to_lt_dtype(at::result_type(elements, test));
  Ref ec = cast(x, rt);
  Ref s = scalar(lt_tensor_core(x), test);
  return isin_done(trace(LT_OP_eq, {ec.get(), s.get()}), invert);
}
at::Tensor lt_isin_st(const c10::Scalar &element, const at::Tensor &test, bool assume_unique,
                      bool invert) {
  check_isin_dtype(test.scalar_type());
  check_isin_scalar(element);
  lt_tensor *t = handle_of(test);
  lt_dtype rt = to_lt_dtype(at::result_type(test, element));
  Ref tc = cast(t, rt);
  Ref s = scalar(lt_tensor_core(t), element);
  Ref hit = reduce(LT_OP_any, trace(LT_OP_eq, {tc.get(), s.get()}).get(), {}, false);
  return isin_done(std::move(hit), invert);
}

/* ----------------------------------------------------------- tril/triu */

/* arange(n) as i64 on core */
Ref arange_i64(int core, int64_t n) {
  Ref start = scalar_typed(core, 0, LT_I64), step = scalar_typed(core, 1, LT_I64);
  lt_attrs a = attrs_of({(int64_t)LT_I64, n});
  return trace(LT_OP_arange, {start.get(), step.get()}, &a);
}

/* keep where (col - row) <= k (tril) / >= k (triu), on the last two dims */
at::Tensor tri(const at::Tensor &self, int64_t k, bool lower) {
  TORCH_CHECK(self.dim() >= 2, lower ? "tril" : "triu", ": input tensor must have at least 2 "
              "dimensions");
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  int64_t R = self.size(-2), C = self.size(-1);
  Ref rows = reshape(arange_i64(core, R).get(), {R, 1});
  Ref cols = reshape(arange_i64(core, C).get(), {1, C});
  Ref diff = trace(LT_OP_sub, {cols.get(), rows.get()});
  Ref kk = scalar_typed(core, (double)k, LT_I64);
  Ref keep = trace(lower ? LT_OP_le : LT_OP_ge, {diff.get(), kk.get()});
  Ref zero = scalar_typed(core, 0, lt_tensor_dtype(x));
  return wrap(trace(LT_OP_where, {keep.get(), x, zero.get()}));
}
at::Tensor lt_tril(const at::Tensor &self, int64_t k) { return tri(self, k, true); }
at::Tensor lt_triu(const at::Tensor &self, int64_t k) { return tri(self, k, false); }

/* --------------------------------------------------------------- arange */

/* number of elements of arange(start, end, step), eager's checks and rule */
int64_t arange_len(const c10::Scalar &start, const c10::Scalar &end, const c10::Scalar &step,
                   bool is_float) {
  double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  TORCH_CHECK(st != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
  TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
              "upper bound and lower bound inconsistent with step sign");
  if (!is_float && start.isIntegral(true) && end.isIntegral(true) && step.isIntegral(true)) {
    int64_t a = start.toLong(), b = end.toLong(), c = step.toLong();
    return c > 0 ? (b - a + c - 1) / c : (a - b - c - 1) / -c;
  }
  return (int64_t)std::ceil((e - s) / st);
}

Ref arange_ref(int core, const c10::Scalar &start, const c10::Scalar &end,
               const c10::Scalar &step, at::ScalarType st) {
  bool fl = at::isFloatingType(st);
  int64_t n = arange_len(start, end, step, fl);
  lt_dtype sdt = fl ? LT_F64 : LT_I64;
  Ref a = scalar_typed(core, start.toDouble(), sdt), b = scalar_typed(core, step.toDouble(), sdt);
  if (!fl) {
    a = scalar_typed(core, (double)start.toLong(), LT_I64);
    b = scalar_typed(core, (double)step.toLong(), LT_I64);
  }
  lt_attrs at = attrs_of({(int64_t)to_lt_dtype(st), n});
  return trace(LT_OP_arange, {a.get(), b.get()}, &at);
}

at::ScalarType arange_dtype(const c10::Scalar &a, const c10::Scalar &b, const c10::Scalar &c,
                            c10::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  if (a.isFloatingPoint() || b.isFloatingPoint() || c.isFloatingPoint())
    return c10::get_default_dtype_as_scalartype();
  return at::kLong;
}

at::Tensor lt_arange_start_step(const c10::Scalar &start, const c10::Scalar &end,
                                const c10::Scalar &step, c10::optional<at::ScalarType> dtype,
                                c10::optional<at::Layout> layout,
                                c10::optional<at::Device> device, c10::optional<bool> pin) {
  at::ScalarType st = arange_dtype(start, end, step, dtype);
  if (!has_lt_dtype(st) || at::isComplexType(st) || st == at::kBool) throw_unsupported("arange dtype");
  return wrap_functional(arange_ref(core_of_device(device), start, end, step, st));
}
at::Tensor &lt_arange_start_out(const c10::Scalar &start, const c10::Scalar &end,
                                const c10::Scalar &step, at::Tensor &out) {
  at::ScalarType st = out.scalar_type();
  if (!has_lt_dtype(st) || at::isComplexType(st) || st == at::kBool) throw_unsupported("arange dtype");
  Ref r = arange_ref(lt_tensor_core(handle_of(out)), start, end, step, st);
  bool resized = out.numel() != lt_shape_numel(&r.shape()) || out.dim() != 1;
  assign_value(out, r.get());
  if (resized) impl_of(out)->refresh_metadata();
  return out;
}

/* -------------------------------------------------------- masked_scatter */

at::Tensor lt_masked_scatter(const at::Tensor &self, const at::Tensor &mask,
                             const at::Tensor &source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, "
              "but got mask with dtype ", mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "masked_scatter: expected self and "
              "source to have same dtypes but got ", self.scalar_type(), " and ",
              source.scalar_type());
  int core = common_core({&self, &mask, &source});
  Ref x = operand(self, core), m = operand(mask, core), src = operand(source, core);
  std::vector<int64_t> out = at::infer_size(self.sizes(), mask.sizes());
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  Ref xb = expand(x.get(), out);
  Ref mb = reshape(expand(m.get(), out).get(), {n});
  /* position k of a set mask element = number of set elements before it;
   * the source must hold at least that many (eager checks it on the data) */
  Ref cnt = cast(mb.get(), LT_I64);
  lt_attrs a0 = attrs_of({0});
  Ref incl = trace(LT_OP_cumsum, {cnt.get()}, &a0);
  Ref pos = trace(LT_OP_sub, {incl.get(), cnt.get()});
  int64_t ns = source.numel();
  Ref flat_src = reshape(src.get(), {ns});
  if (ns == 0) return wrap(fresh(reshape(xb.get(), out), {x.get()}));
  /* unset positions read element 0 (discarded by the where) */
  Ref zero = scalar_typed(core, 0, LT_I64);
  Ref safe = trace(LT_OP_where, {mb.get(), pos.get(), zero.get()});
  Ref picked = trace(LT_OP_index_select, {flat_src.get(), safe.get()}, &a0);
  Ref r = trace(LT_OP_where, {mb.get(), picked.get(), reshape(xb.get(), {n}).get()});
  return wrap(reshape(r.get(), out));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "bitwise_and.Tensor", TORCH_FN(lt_bitwise_and));
  reg(m, "bitwise_or.Tensor", TORCH_FN(lt_bitwise_or));
  reg(m, "bitwise_xor.Tensor", TORCH_FN(lt_bitwise_xor));
  reg(m, "bitwise_and.Scalar", TORCH_FN(lt_bitwise_and_s));
  reg(m, "bitwise_or.Scalar", TORCH_FN(lt_bitwise_or_s));
  reg(m, "bitwise_xor.Scalar", TORCH_FN(lt_bitwise_xor_s));
  reg(m, "bitwise_not", TORCH_FN(lt_bitwise_not));
  reg(m, "isinf", TORCH_FN(lt_isinf));
  reg(m, "isposinf", TORCH_FN(lt_isposinf));
  reg(m, "isneginf", TORCH_FN(lt_isneginf));
  reg(m, "isfinite", TORCH_FN(lt_isfinite));
  reg(m, "nan_to_num", TORCH_FN(lt_nan_to_num));
  reg(m, "isin.Tensor_Tensor", TORCH_FN(lt_isin_tt));
  reg(m, "isin.Tensor_Scalar", TORCH_FN(lt_isin_ts));
  reg(m, "isin.Scalar_Tensor", TORCH_FN(lt_isin_st));
  reg(m, "tril", TORCH_FN(lt_tril));
  reg(m, "triu", TORCH_FN(lt_triu));
  reg(m, "masked_scatter", TORCH_FN(lt_masked_scatter));
  reg(m, "arange.start_step", TORCH_FN(lt_arange_start_step));
  reg(m, "arange.start_out", TORCH_FN(lt_arange_start_out));
}

}  // namespace lazytpu
