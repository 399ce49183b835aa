/*
 * backend/ops_linalg.cpp — matrices: eye, trace, cdist, and the
 * decompositions on the table's inv / eigh / svd (lazy/kernels/linalg.c):
 *   eye(n[, m])          arange(n)[:, None] == arange(m)[None, :], cast;
 *   trace(x)             the sum of diagonal(x) (integers sum to int64);
 *   diag_embed           a diagonal_scatter into zeros;
 *   _cdist_forward       norms of the pairwise differences (p = 0, 1, 2,
 *                        inf, other), or eager's matrix-product form
 *                        (_euclidean_dist) for p = 2 where eager takes it;
 *                        _cdist_backward by eager's per-p formulas;
 *   linalg_inv_ex        inv, packed [A^-1 | info] sliced apart; with
 *                        check_errors the info is read on the host (as eager
 *                        and torch_xla do: torch.linalg.inv pays one host read);
 *   _linalg_eigh         eigh, packed [values; vectors] sliced apart;
 *   _linalg_svd          svd, packed [U; S; Vh] sliced apart.
 * The decompositions take float32 / float64 (eager's LAPACK dtypes); other
 * dtypes go to the CPU fallback, which raises eager's error. Their
 * gradients are autograd's formulas, on native ops.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/_linalg_check_errors.h>

#include <cmath>
#include <limits>

namespace lazytpu {
namespace {

Ref slice_of(lt_tensor *x, int64_t dim, int64_t start, int64_t end) {
  lt_attrs a = attrs_of({dim, start, end, 1});
  return trace(LT_OP_slice, {x}, &a);
}
Ref select_of(lt_tensor *x, int64_t dim, int64_t index) {
  lt_attrs a = attrs_of({dim, index});
  return trace(LT_OP_select, {x}, &a);
}
Ref arange_n(int core, int64_t n) {
  Ref start = scalar_typed(core, 0, LT_I64), step = scalar_typed(core, 1, LT_I64);
  lt_attrs a = attrs_of({(int64_t)LT_I64, n});
  return trace(LT_OP_arange, {start.get(), step.get()}, &a);
}

/* ------------------------------------------------------------------ eye */

at::Tensor lt_eye_m(c10::SymInt n_, c10::SymInt m_, c10::optional<at::ScalarType> dtype,
                    c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                    c10::optional<bool> pin) {
  int64_t n = n_.expect_int(), m = m_.expect_int();
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  at::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  if (!has_lt_dtype(st) || at::isComplexType(st)) throw_unsupported("eye dtype");
  int core = core_of_device(device);
  Ref r = reshape(arange_n(core, n).get(), {n, 1});
  Ref c = reshape(arange_n(core, m).get(), {1, m});
  Ref e = trace(LT_OP_eq, {r.get(), c.get()});
  return wrap_functional(cast(e.get(), to_lt_dtype(st)));
}
at::Tensor lt_eye(c10::SymInt n, c10::optional<at::ScalarType> dtype,
                  c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                  c10::optional<bool> pin) {
  return lt_eye_m(n, n, dtype, layout, device, pin);
}

/* ----------------------------------------------------------- diag_embed */

/* zeros with x's last dim written on the (offset) diagonal of dims d1, d2:
 * the table's diagonal_scatter (eigh's and svd's gradients build diagonal
 * matrices this way) */
at::Tensor lt_diag_embed(const at::Tensor &self, int64_t offset, int64_t dim1, int64_t dim2) {
  int64_t nd = self.dim() + 1;
  int64_t d1 = c10::maybe_wrap_dim(dim1, nd), d2 = c10::maybe_wrap_dim(dim2, nd);
  TORCH_CHECK(d1 != d2, "diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  lt_tensor *x = handle_of(self);
  int64_t n = (self.dim() ? self.size(-1) : 1) + std::abs(offset);
  std::vector<int64_t> out(self.sizes().begin(), self.sizes().end());
  if (!out.empty()) out.pop_back();
  out.insert(out.begin() + std::min(d1, d2), n);
  out.insert(out.begin() + std::max(d1, d2), n);
  Ref base = zeros(lt_tensor_core(x), out, lt_tensor_dtype(x));
  Ref src = self.dim() ? Ref::borrow(x) : reshape(x, {1});
  lt_attrs a = attrs_of({offset, d1, d2});
  return wrap(trace(LT_OP_diagonal_scatter, {base.get(), src.get()}, &a));
}

/* ---------------------------------------------------------------- trace */

at::Tensor lt_trace(const at::Tensor &self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  lt_tensor *x = handle_of(self);
  lt_attrs a = attrs_of({0, 0, 1});
  Ref d = trace(LT_OP_diagonal, {x}, &a);
  return wrap(reduce(LT_OP_sum, d.get(), {}, false));
}

/* ---------------------------------------------------------------- cdist */

void check_cdist(const at::Tensor &x1, const at::Tensor &x2, double p) {
  TORCH_CHECK(at::isFloatingType(x1.scalar_type()), "cdist only supports floating-point "
              "dtypes, X1 got: ", x1.scalar_type());
  TORCH_CHECK(at::isFloatingType(x2.scalar_type()), "cdist only supports floating-point "
              "dtypes, X2 got: ", x2.scalar_type());
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. "
              "X1: ", x1.size(-1), " X2: ", x2.size(-1));
}

/* x1 [.., P, M], x2 [.., R, M] with their batch dims broadcast */
std::vector<int64_t> cdist_batch(const at::Tensor &x1, const at::Tensor &x2) {
  return at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
}
std::vector<int64_t> with_tail(std::vector<int64_t> b, int64_t r, int64_t c) {
  b.push_back(r);
  b.push_back(c);
  return b;
}

/* diff [.., P, R, M] = x1[.., :, None, :] - x2[.., None, :, :] */
Ref cdist_diff(lt_tensor *a, lt_tensor *b, const std::vector<int64_t> &batch, int64_t P,
               int64_t R, int64_t M) {
  std::vector<int64_t> b1 = batch, b2 = batch, full = batch;
  b1.insert(b1.end(), {P, 1, M});
  b2.insert(b2.end(), {1, R, M});
  full.insert(full.end(), {P, R, M});
  Ref xa = expand(reshape(expand(a, with_tail(batch, P, M)).get(), b1).get(), full);
  Ref xb = expand(reshape(expand(b, with_tail(batch, R, M)).get(), b2).get(), full);
  return trace(LT_OP_sub, {xa.get(), xb.get()});
}

/* eager's _euclidean_dist, without its in-place clamp_min_ / sqrt_ (which
 * would run on the fallback): [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T,
 * clamped at 0, square root */
at::Tensor lt_euclidean_dist(const at::Tensor &x1, const at::Tensor &x2) {
  at::Tensor n1 = x1.pow(2).sum(-1, true), n2 = x2.pow(2).sum(-1, true);
  at::Tensor a = at::cat({x1.mul(-2), n1, at::ones_like(n1)}, -1);
  at::Tensor b = at::cat({x2, at::ones_like(n2), n2}, -1);
  return a.matmul(b.mT()).clamp_min(0).sqrt();
}

bool cdist_uses_mm(double p, c10::optional<int64_t> mode, int64_t r1, int64_t r2) {
  int64_t md = mode.value_or(0);
  return p == 2 && (md == 1 || (md == 0 && (r1 > 25 || r2 > 25)));
}

at::Tensor lt_cdist_forward(const at::Tensor &x1, const at::Tensor &x2, double p,
                            c10::optional<int64_t> mode) {
  check_cdist(x1, x2, p);
  TORCH_CHECK(!mode || (*mode >= 0 && *mode <= 2), "possible modes: 0, 1, 2, but was: ", *mode);
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), "cdist: X1 and X2 must have the same "
              "dtype, got ", x1.scalar_type(), " and ", x2.scalar_type());
  int core = common_core({&x1, &x2});
  int64_t P = x1.size(-2), R = x2.size(-2), M = x1.size(-1);
  std::vector<int64_t> batch = cdist_batch(x1, x2);
  if (cdist_uses_mm(p, mode, P, R) && P > 0 && R > 0 && M > 0) {
    /* eager's form: |a|^2 + |b|^2 - 2 a.b, as its _euclidean_dist */
    at::Tensor a = x1.expand(with_tail(batch, P, M)), b = x2.expand(with_tail(batch, R, M));
    return lt_euclidean_dist(a, b);
  }
  Ref a = operand(x1, core), b = operand(x2, core);
  std::vector<int64_t> out = with_tail(batch, P, R);
  if (M == 0) return wrap(zeros(core, out, a.dtype()));
  Ref d = cdist_diff(a.get(), b.get(), batch, P, R, M);
  int64_t last = (int64_t)batch.size() + 2;
  Ref ad = trace(LT_OP_abs, {d.get()});
  if (p == 0) {
    Ref z = scalar_typed(core, 0, a.dtype());
    Ref nz = cast(trace(LT_OP_ne, {ad.get(), z.get()}).get(), a.dtype());
    return wrap(reduce(LT_OP_sum, nz.get(), {last}, false));
  }
  if (p == 1) return wrap(reduce(LT_OP_sum, ad.get(), {last}, false));
  if (std::isinf(p)) return wrap(reduce(LT_OP_amax, ad.get(), {last}, false));
  if (p == 2) {
    Ref sq = trace(LT_OP_mul, {ad.get(), ad.get()});
    return wrap(trace(LT_OP_sqrt, {reduce(LT_OP_sum, sq.get(), {last}, false).get()}));
  }
  Ref pw = trace(LT_OP_pow, {ad.get(), scalar(core, p).get()});
  Ref s = reduce(LT_OP_sum, pw.get(), {last}, false);
  return wrap(trace(LT_OP_pow, {s.get(), scalar(core, 1.0 / p).get()}));
}

/* eager's _cdist_backward: the gradient of x1 (of the broadcast batch shape),
 * sum over j of f(x1_i - x2_j, grad_ij, dist_ij) by p */
at::Tensor lt_cdist_backward(const at::Tensor &grad, const at::Tensor &x1, const at::Tensor &x2,
                             double p, const at::Tensor &cdist) {
  int core = common_core({&grad, &x1, &x2, &cdist});
  int64_t P = x1.size(-2), R = x2.size(-2), M = x1.size(-1);
  std::vector<int64_t> batch = cdist_batch(x1, x2);
  Ref a = operand(x1, core), b = operand(x2, core);
  lt_dtype dt = a.dtype();
  std::vector<int64_t> xshape = with_tail(batch, P, M);
  if (p == 0 || P == 0 || R == 0 || M == 0) return wrap(zeros(core, xshape, dt));
  Ref d = cdist_diff(a.get(), b.get(), batch, P, R, M);
  std::vector<int64_t> g3 = batch, full = batch;
  g3.insert(g3.end(), {P, R, 1});
  full.insert(full.end(), {P, R, M});
  Ref g = expand(reshape(operand(grad, core).get(), g3).get(), full);
  Ref dist = expand(reshape(operand(cdist, core).get(), g3).get(), full);
  Ref zero = scalar_typed(core, 0, dt);
  Ref sg = trace(LT_OP_sign, {d.get()});
  Ref ad = trace(LT_OP_abs, {d.get()});
  Ref dist0 = trace(LT_OP_eq, {dist.get(), zero.get()});
  Ref r;
  if (p == 1) {
    r = trace(LT_OP_mul, {g.get(), sg.get()});
  } else if (std::isinf(p)) {
    Ref at_max = cast(trace(LT_OP_eq, {ad.get(), dist.get()}).get(), dt);
    r = trace(LT_OP_mul, {trace(LT_OP_mul, {g.get(), sg.get()}).get(), at_max.get()});
  } else if (p == 2) {
    Ref q = trace(LT_OP_div, {trace(LT_OP_mul, {g.get(), d.get()}).get(), dist.get()});
    r = trace(LT_OP_where, {dist0.get(), zero.get(), q.get()});
  } else {
    /* p < 2: sign(d) |d|^(p-1) g / dist^(p-1); else d |d|^(p-2) g / dist^(p-1) */
    Ref num = p < 2 ? trace(LT_OP_mul, {sg.get(), trace(LT_OP_pow, {ad.get(),
                                                     scalar(core, p - 1).get()}).get()})
                    : trace(LT_OP_mul, {d.get(), trace(LT_OP_pow, {ad.get(),
                                                     scalar(core, p - 2).get()}).get()});
    Ref den = trace(LT_OP_pow, {dist.get(), scalar(core, p - 1).get()});
    Ref q = trace(LT_OP_div, {trace(LT_OP_mul, {num.get(), g.get()}).get(), den.get()});
    Ref skip = Ref::borrow(dist0.get());
    if (p < 1) {
      Ref d0 = trace(LT_OP_eq, {d.get(), zero.get()});
      skip = trace(LT_OP_logical_or, {skip.get(), d0.get()});
    }
    r = trace(LT_OP_where, {skip.get(), zero.get(), q.get()});
  }
  return wrap(reduce(LT_OP_sum, r.get(), {(int64_t)batch.size() + 1}, false));
}

/* ------------------------------------------------------- decompositions */

/* float32 / float64 matrices; anything else to the fallback (eager's error) */
void check_la(const at::Tensor &a, const char *name, bool square) {
  if (a.scalar_type() != at::kFloat && a.scalar_type() != at::kDouble)
    throw_unsupported(std::string(name) + " of a non-float32/64 tensor");
  TORCH_CHECK(a.dim() >= 2, name, ": The input tensor A must have at least 2 dimensions.");
  if (square)
    TORCH_CHECK(a.size(-1) == a.size(-2), name, ": A must be batches of square matrices, but "
                "they are ", a.size(-2), " by ", a.size(-1), " matrices");
}

at::Tensor empty_of(int core, lt_dtype dt) { return wrap(zeros(core, {0}, dt)); }

std::tuple<at::Tensor, at::Tensor> lt_linalg_inv_ex(const at::Tensor &A, bool check_errors) {
  check_la(A, "linalg.inv", true);
  lt_tensor *x = handle_of(A);
  int64_t n = A.size(-1), nd = A.dim();
  Ref t = trace(LT_OP_inv, {x});
  at::Tensor inv = wrap(slice_of(t.get(), nd - 1, 0, n));
  at::Tensor info;
  if (n > 0) {
    Ref i = select_of(select_of(t.get(), nd - 1, n).get(), nd - 2, 0);
    info = wrap(cast(i.get(), LT_I32));
  } else {
    std::vector<int64_t> b(A.sizes().begin(), A.sizes().end() - 2);
    info = wrap(zeros(lt_tensor_core(x), b, LT_I32));
  }
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return std::make_tuple(inv, info);
}

std::tuple<at::Tensor, at::Tensor> lt_linalg_eigh(const at::Tensor &A, c10::string_view uplo,
                                                  bool compute_v) {
  check_la(A, "linalg.eigh", true);
  TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u", "Expected UPLO argument "
              "to be 'L' or 'U', but got ", uplo);
  lt_tensor *x = handle_of(A);
  int64_t n = A.size(-1), nd = A.dim();
  lt_attrs a = attrs_of({(uplo == "U" || uplo == "u") ? 1 : 0});
  Ref t = trace(LT_OP_eigh, {x}, &a);
  at::Tensor w = wrap(select_of(t.get(), nd - 2, 0));
  at::Tensor v = compute_v ? wrap(slice_of(t.get(), nd - 2, 1, n + 1))
                           : empty_of(lt_tensor_core(x), lt_tensor_dtype(x));
  return std::make_tuple(w, v);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_linalg_svd(
    const at::Tensor &A, bool full_matrices, bool compute_uv,
    c10::optional<c10::string_view> driver) {
  check_la(A, "linalg.svd", false);
  TORCH_CHECK(!driver, "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA "
              "inputs with cuSOLVER backend.");
  lt_tensor *x = handle_of(A);
  int64_t m = A.size(-2), n = A.size(-1), nd = A.dim(), k = std::min(m, n);
  bool full = full_matrices && compute_uv;
  int64_t ucols = full ? m : k, vrows = full ? n : k;
  lt_attrs a = attrs_of({full ? 1 : 0});
  Ref t = trace(LT_OP_svd, {x}, &a);
  at::Tensor S = wrap(slice_of(select_of(t.get(), nd - 2, m).get(), nd - 2, 0, k));
  if (!compute_uv) {
    int core = lt_tensor_core(x);
    return std::make_tuple(empty_of(core, lt_tensor_dtype(x)), S, empty_of(core, lt_tensor_dtype(x)));
  }
  Ref ur = slice_of(t.get(), nd - 2, 0, m);
  at::Tensor U = wrap(slice_of(ur.get(), nd - 1, 0, ucols));
  Ref vr = slice_of(t.get(), nd - 2, m + 1, m + 1 + vrows);
  at::Tensor Vh = wrap(slice_of(vr.get(), nd - 1, 0, n));
  return std::make_tuple(U, S, Vh);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "eye", TORCH_FN(lt_eye));
  reg(m, "eye.m", TORCH_FN(lt_eye_m));
  reg(m, "trace", TORCH_FN(lt_trace));
  reg(m, "diag_embed", TORCH_FN(lt_diag_embed));
  reg(m, "_cdist_forward", TORCH_FN(lt_cdist_forward));
  reg(m, "_cdist_backward", TORCH_FN(lt_cdist_backward));
  reg(m, "_euclidean_dist", TORCH_FN(lt_euclidean_dist));
  reg(m, "linalg_inv_ex", TORCH_FN(lt_linalg_inv_ex));
  reg(m, "_linalg_eigh", TORCH_FN(lt_linalg_eigh));
  reg(m, "_linalg_svd", TORCH_FN(lt_linalg_svd));
}

}  // namespace lazytpu
