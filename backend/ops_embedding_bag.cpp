/*
 * backend/ops_embedding_bag.cpp — embedding_bag (modes sum and mean) and
 * its dense backward, from table ops:
 *   offset2bag[j] = #{b : offsets[b] <= j} - 1 (a compare + sum, no sync),
 *   rows = weight[indices] (x per_sample_weights, 0 at padding_idx),
 *   out = scatter_add of rows into [B, D] by bag (mean: / bag size, an
 *         empty bag gives 0, as eager);
 *   backward: grad rows by bag, the same scaling, scatter_add into
 *         [num_weights, D] by index.
 * Mode max: out = scatter_reduce(amax) of the non-padding rows by bag (an
 *   empty bag gives 0), maximum_indices[b, d] = the index of the first
 *   position reaching the maximum (a scatter_reduce(amin) of positions), 0
 *   for an empty bag, as eager; backward: grad scattered to
 *   [maximum_indices[b, d], d] of the non-empty bags.
 * scale_grad_by_freq and sparse gradients run on the CPU fallback.
 */
#include "lt_aten.h"
#include "lt_register.h"

namespace lazytpu {
namespace {

enum { MODE_SUM = 0, MODE_MEAN = 1, MODE_MAX = 2 };

/* bag of each index position: [N] int64 */
Ref offset2bag(lt_tensor *offsets, int64_t N, int64_t B) {
  lt_attrs sl = attrs_of({0, 0, B, 1});
  Ref off = reshape(cast(trace(LT_OP_slice, {offsets}, &sl).get(), LT_I64).get(), {1, B});
  int core = lt_tensor_core(offsets);
  Ref start = scalar_typed(core, 0, LT_I64), step = scalar_typed(core, 1, LT_I64);
  lt_attrs ar = attrs_of({(int64_t)LT_I64, N});
  Ref j = reshape(trace(LT_OP_arange, {start.get(), step.get()}, &ar).get(), {N, 1});
  Ref le = cast(trace(LT_OP_le, {off.get(), j.get()}).get(), LT_I64);
  Ref cnt = reduce(LT_OP_sum, le.get(), {1}, false);
  return trace(LT_OP_sub, {cnt.get(), scalar_typed(core, 1, LT_I64).get()});
}

/* [N] weight of each index position: padding 0, per-sample weights */
Ref position_weights(lt_tensor *idx, int64_t padding_idx, lt_tensor *psw, lt_dtype dt) {
  int core = lt_tensor_core(idx);
  Ref w = full(core, dims_of(*lt_tensor_shape(idx)), 1, dt);
  if (padding_idx >= 0) {
    Ref pad = scalar_typed(core, (double)padding_idx, LT_I64);
    Ref keep = trace(LT_OP_ne, {idx, pad.get()});
    w = cast(keep.get(), dt);
  }
  if (psw) w = trace(LT_OP_mul, {w.get(), cast(psw, dt).get()});
  return w;
}

/* [rows, D] += src [N, D] at rows by[N] */
Ref scatter_rows(int core, int64_t rows, int64_t D, lt_tensor *by, lt_tensor *src, lt_dtype dt) {
  int64_t N = lt_tensor_shape(by)->dims[0];
  Ref base = zeros(core, {rows, D}, dt);
  Ref ie = expand(reshape(by, {N, 1}).get(), {N, D});
  lt_attrs a = attrs_of({0});
  return trace(LT_OP_scatter_add, {base.get(), ie.get(), src}, &a);
}

/* mode max (see the header): (out, offset2bag, bag_size, maximum_indices) */
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_max(
    lt_tensor *w, lt_tensor *idx, lt_tensor *bag, int64_t padding_idx, int64_t N, int64_t B,
    int64_t D) {
  int core = lt_tensor_core(w);
  lt_dtype dt = lt_tensor_dtype(w);
  lt_attrs a0 = attrs_of({0});
  Ref valid = position_weights(idx, padding_idx, nullptr, LT_I64);             /* [N] 0/1 */
  Ref bsize = trace(LT_OP_scatter_add, {zeros(core, {B}, LT_I64).get(), bag, valid.get()}, &a0);
  Ref maxi = zeros(core, {B, D}, LT_I64);
  Ref out = zeros(core, {B, D}, dt);
  if (N > 0 && B > 0) {
    Ref rows = trace(LT_OP_index_select, {w, idx}, &a0);                       /* [N, D] */
    Ref ok = cast(reshape(valid.get(), {N, 1}).get(), LT_BOOL);
    Ref ninf = scalar_typed(core, -INFINITY, dt);
    Ref rp = trace(LT_OP_where, {ok.get(), rows.get(), ninf.get()});
    Ref be = expand(reshape(bag, {N, 1}).get(), {N, D});
    lt_attrs amax = attrs_of({0, 2}), amin = attrs_of({0, 3});
    Ref m = trace(LT_OP_scatter_reduce, {full(core, {B, D}, -INFINITY, dt).get(), be.get(),
                                         rp.get()}, &amax);
    Ref nonempty = reshape(trace(LT_OP_gt, {bsize.get(), scalar_typed(core, 0, LT_I64).get()}).get(),
                           {B, 1});
    out = trace(LT_OP_where, {nonempty.get(), m.get(), zeros(core, {1}, dt).get()});
    /* first position of each bag reaching its maximum */
    Ref mb = trace(LT_OP_index_select, {m.get(), bag}, &a0);                   /* [N, D] */
    Ref hit = trace(LT_OP_logical_and, {trace(LT_OP_eq, {rp.get(), mb.get()}).get(), ok.get()});
    lt_attrs ar = attrs_of({(int64_t)LT_I64, N});
    Ref j = reshape(trace(LT_OP_arange, {scalar_typed(core, 0, LT_I64).get(),
                                         scalar_typed(core, 1, LT_I64).get()}, &ar).get(), {N, 1});
    Ref pos = trace(LT_OP_where, {hit.get(), j.get(), scalar_typed(core, (double)N, LT_I64).get()});
    Ref first = trace(LT_OP_scatter_reduce, {full(core, {B, D}, (double)N, LT_I64).get(), be.get(),
                                             pos.get()}, &amin);
    Ref has = trace(LT_OP_lt, {first.get(), scalar_typed(core, (double)N, LT_I64).get()});
    Ref fi = trace(LT_OP_where, {has.get(), first.get(), scalar_typed(core, 0, LT_I64).get()});
    Ref at_first = reshape(trace(LT_OP_index_select, {idx, reshape(fi.get(), {B * D}).get()}, &a0).get(),
                           {B, D});
    maxi = trace(LT_OP_where, {has.get(), at_first.get(), scalar_typed(core, 0, LT_I64).get()});
  }
  return std::make_tuple(wrap(std::move(out)), wrap(Ref::borrow(bag)), wrap(std::move(bsize)),
                         wrap(std::move(maxi)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lt_embedding_bag(
    const at::Tensor &weight, const at::Tensor &indices, const at::Tensor &offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const c10::optional<at::Tensor> &per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  if (mode != MODE_SUM && mode != MODE_MEAN && mode != MODE_MAX)
    throw_unsupported("embedding_bag mode");
  TORCH_CHECK(weight.dim() == 2, "embedding_bag: weight has to be a 2D Tensor, but got ",
              weight.dim(), "D");
  TORCH_CHECK(indices.dim() == 1 && offsets.dim() == 1, "embedding_bag: input and offsets "
              "have to be 1D (the shim gets them flattened), got ", indices.sizes(), " and ",
              offsets.sizes());
  bool hp = per_sample_weights && per_sample_weights->defined();
  int core = common_core({&weight, &indices, &offsets});
  Ref w = operand(weight, core), idx = cast(operand(indices, core).get(), LT_I64);
  Ref off = operand(offsets, core);
  Ref psw = hp ? operand(*per_sample_weights, core) : Ref();
  int64_t N = indices.size(0), D = weight.size(1);
  int64_t B = offsets.size(0) - (include_last_offset ? 1 : 0);
  TORCH_CHECK(B >= 0, "embedding_bag: include_last_offset needs at least one offset");
  lt_dtype dt = w.dtype();
  Ref bag = offset2bag(off.get(), N, B);
  lt_attrs a0 = attrs_of({0});
  if (mode == MODE_MAX) {
    TORCH_CHECK(!hp, "embedding_bag: per_sample_weights was not None. per_sample_weights is "
                "only supported for mode='sum' (got mode='max'). Please either set "
                "per_sample_weights=None or set mode='sum'.");
    return embedding_bag_max(w.get(), idx.get(), bag.get(), padding_idx, N, B, D);
  }
  Ref pw = position_weights(idx.get(), padding_idx, psw.get(), dt);
  Ref rows = trace(LT_OP_index_select, {w.get(), idx.get()}, &a0);
  rows = trace(LT_OP_mul, {rows.get(), reshape(pw.get(), {N, 1}).get()});
  Ref out = scatter_rows(core, B, D, bag.get(), rows.get(), dt);
  /* bag sizes: the non-padding positions of each bag */
  Ref valid = position_weights(idx.get(), padding_idx, nullptr, LT_I64);
  Ref bsize = trace(LT_OP_scatter_add, {zeros(core, {B}, LT_I64).get(), bag.get(), valid.get()},
                    &a0);
  if (mode == MODE_MEAN) {
    Ref one = scalar_typed(core, 1, LT_I64);
    Ref den = cast(trace(LT_OP_maximum, {bsize.get(), one.get()}).get(), dt);
    out = trace(LT_OP_div, {out.get(), reshape(den.get(), {B, 1}).get()});
  }
  Ref maxi = zeros(core, {B}, LT_I64);   /* only mode max has maximum indices */
  return std::make_tuple(wrap(std::move(out)), wrap(std::move(bag)), wrap(std::move(bsize)),
                         wrap(std::move(maxi)));
}

at::Tensor lt_embedding_bag_dense_backward(
    const at::Tensor &grad, const at::Tensor &indices, const at::Tensor &offset2bag_t,
    const at::Tensor &bag_size, const at::Tensor &maximum_indices, c10::SymInt num_weights,
    bool scale_grad_by_freq, int64_t mode, const c10::optional<at::Tensor> &per_sample_weights,
    int64_t padding_idx) {
  if (scale_grad_by_freq) throw_unsupported("embedding_bag backward: scale_grad_by_freq");
  if (mode == MODE_MAX) {
    /* grad_weight[maximum_indices[b, d], d] += grad[b, d] over non-empty bags */
    int core = common_core({&grad, &maximum_indices, &bag_size});
    Ref g = operand(grad, core), mi = cast(operand(maximum_indices, core).get(), LT_I64);
    Ref bs = operand(bag_size, core);
    int64_t B = grad.size(0), D = grad.size(1);
    lt_dtype dt = g.dtype();
    Ref ne = reshape(trace(LT_OP_gt, {bs.get(), scalar_typed(core, 0, LT_I64).get()}).get(), {B, 1});
    Ref gz = trace(LT_OP_where, {ne.get(), g.get(), zeros(core, {1}, dt).get()});
    lt_attrs a0 = attrs_of({0});
    return wrap(trace(LT_OP_scatter_add, {zeros(core, {num_weights.expect_int(), D}, dt).get(),
                                          mi.get(), gz.get()}, &a0));
  }
  bool hp = per_sample_weights && per_sample_weights->defined();
  int core = common_core({&grad, &indices, &offset2bag_t, &bag_size});
  Ref g = operand(grad, core), idx = cast(operand(indices, core).get(), LT_I64);
  Ref bag = operand(offset2bag_t, core);
  Ref psw = hp ? operand(*per_sample_weights, core) : Ref();
  int64_t N = indices.size(0), D = grad.size(1);
  lt_dtype dt = g.dtype();
  lt_attrs a0 = attrs_of({0});
  Ref rows = trace(LT_OP_index_select, {g.get(), bag.get()}, &a0);
  Ref pw = position_weights(idx.get(), padding_idx, psw.get(), dt);
  if (mode == MODE_MEAN) {
    Ref bs = operand(bag_size, core);
    Ref one = scalar_typed(core, 1, LT_I64);
    Ref den = cast(trace(LT_OP_maximum, {bs.get(), one.get()}).get(), dt);
    Ref per = trace(LT_OP_index_select, {den.get(), bag.get()}, &a0);
    pw = trace(LT_OP_div, {pw.get(), per.get()});
  }
  rows = trace(LT_OP_mul, {rows.get(), reshape(pw.get(), {N, 1}).get()});
  return wrap(scatter_rows(core, num_weights.expect_int(), D, idx.get(), rows.get(), dt));
}

at::Tensor lt_embedding_bag_backward(
    const at::Tensor &grad, const at::Tensor &indices, const at::Tensor &offsets,
    const at::Tensor &offset2bag_t, const at::Tensor &bag_size,
    const at::Tensor &maximum_indices, c10::SymInt num_weights, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const c10::optional<at::Tensor> &per_sample_weights,
    int64_t padding_idx) {
  if (sparse) throw_unsupported("embedding_bag: sparse gradients");
  return lt_embedding_bag_dense_backward(grad, indices, offset2bag_t, bag_size, maximum_indices,
                                         num_weights, scale_grad_by_freq, mode,
                                         per_sample_weights, padding_idx);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "_embedding_bag", TORCH_FN(lt_embedding_bag));
  reg(m, "_embedding_bag_forward_only", TORCH_FN(lt_embedding_bag));
  reg(m, "_embedding_bag_dense_backward", TORCH_FN(lt_embedding_bag_dense_backward));
  reg(m, "_embedding_bag_backward", TORCH_FN(lt_embedding_bag_backward));
}

}  // namespace lazytpu
