/*
 * backend/ops_resample.cpp — upsampling (nearest, nearest-exact, linear /
 * bilinear) and the reflect / replicate pads, with their backwards.
 *
 * All of them are separable: along each resampled dim, output element j
 * reads input elements i0[j] (and i1[j]) with weights w0[j] (and w1[j]).
 * The index and weight vectors depend only on sizes and options, so they
 * are computed here on the host with eager's own float arithmetic
 * (area_pixel_compute_source_index and friends) and uploaded; the forward
 * is index_select + weighted add along the dim, the backward is the
 * transpose: scatter_add of the weighted gradient into zeros.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <cmath>

namespace lazytpu {
namespace {

/* One resampled dim: out[j] = w0[j] * in[i0[j]] + w1[j] * in[i1[j]]. */
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;   /* empty: one tap of weight 1 (nearest, pads) */
};

Ref upload_i64(int core, const std::vector<int64_t> &v) {
  lt_shape s = to_shape({(int64_t)v.size()});
  lt_tensor *t = nullptr;
  check(lt_tensor_from_host(core, v.data(), LT_I64, &s, &t));
  return Ref(t);
}

/* v as a tensor broadcasting along `dim` of an nd-dim tensor, dtype dt */
Ref upload_weights(int core, const std::vector<float> &v, int64_t dim, int nd, lt_dtype dt) {
  lt_shape s = to_shape({(int64_t)v.size()});
  lt_tensor *t = nullptr;
  check(lt_tensor_from_host(core, v.data(), LT_F32, &s, &t));
  std::vector<int64_t> shape(nd, 1);
  shape[dim] = (int64_t)v.size();
  Ref r = reshape(t, shape);
  lt_tensor_release(t);
  return cast(r.get(), dt);
}

Ref take(lt_tensor *x, int64_t dim, const std::vector<int64_t> &idx) {
  Ref i = upload_i64(lt_tensor_core(x), idx);
  lt_attrs a = attrs_of({dim});
  return trace(LT_OP_index_select, {x, i.get()}, &a);
}

/* forward along dim */
Ref resample(lt_tensor *x, int64_t dim, const Taps &t) {
  Ref a = take(x, dim, t.i0);
  if (t.w0.empty()) return a;
  int core = lt_tensor_core(x), nd = lt_tensor_shape(x)->ndim;
  lt_dtype dt = lt_tensor_dtype(x);
  Ref b = take(x, dim, t.i1);
  Ref wa = upload_weights(core, t.w0, dim, nd, dt), wb = upload_weights(core, t.w1, dim, nd, dt);
  return trace(LT_OP_add, {trace(LT_OP_mul, {a.get(), wa.get()}).get(),
                           trace(LT_OP_mul, {b.get(), wb.get()}).get()});
}

/* g (output-sized along dim) scattered back into `in_size` along dim */
Ref scatter_back(lt_tensor *g, int64_t dim, int64_t in_size, const std::vector<int64_t> &idx,
                 Ref base) {
  int core = lt_tensor_core(g);
  std::vector<int64_t> gd = dims_of(*lt_tensor_shape(g));
  std::vector<int64_t> ishape(gd.size(), 1);
  ishape[dim] = (int64_t)idx.size();
  Ref i = upload_i64(core, idx);
  Ref ie = expand(reshape(i.get(), ishape).get(), gd);
  lt_attrs a = attrs_of({dim});
  return trace(LT_OP_scatter_add, {base.get(), ie.get(), g}, &a);
}

Ref resample_backward(lt_tensor *g, int64_t dim, int64_t in_size, const Taps &t) {
  int core = lt_tensor_core(g), nd = lt_tensor_shape(g)->ndim;
  lt_dtype dt = lt_tensor_dtype(g);
  std::vector<int64_t> zd = dims_of(*lt_tensor_shape(g));
  zd[dim] = in_size;
  Ref base = zeros(core, zd, dt);
  if (t.w0.empty()) return scatter_back(g, dim, in_size, t.i0, std::move(base));
  Ref wa = upload_weights(core, t.w0, dim, nd, dt), wb = upload_weights(core, t.w1, dim, nd, dt);
  Ref ga = trace(LT_OP_mul, {g, wa.get()}), gb = trace(LT_OP_mul, {g, wb.get()});
  Ref r = scatter_back(ga.get(), dim, in_size, t.i0, std::move(base));
  return scatter_back(gb.get(), dim, in_size, t.i1, std::move(r));
}

/* ------------------------------------------------------------ the taps */

/* eager's compute_scales_value / area_pixel_compute_scale (float math) */
float scale_value(c10::optional<double> s, int64_t in, int64_t out) {
  return (s && *s > 0) ? (float)(1.0 / *s) : (float)in / (float)out;
}

Taps nearest_taps(int64_t in, int64_t out, c10::optional<double> s, bool exact) {
  Taps t;
  float scale = scale_value(s, in, out);
  for (int64_t j = 0; j < out; j++) {
    int64_t i;
    if (exact) {
      i = std::min((int64_t)std::floor((j + 0.5) * (double)scale), in - 1);
    } else if (out == in) {
      i = j;
    } else if (out == 2 * in) {
      i = j >> 1;
    } else {
      i = std::min((int64_t)std::floor((float)j * scale), in - 1);
    }
    t.i0.push_back(i);
  }
  return t;
}

Taps linear_taps(int64_t in, int64_t out, bool align, c10::optional<double> s) {
  Taps t;
  float scale = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.f)
                      : scale_value(s, in, out);
  for (int64_t j = 0; j < out; j++) {
    float src = align ? scale * (float)j : scale * ((float)j + 0.5f) - 0.5f;
    if (!align && src < 0) src = 0;
    int64_t i0 = std::min((int64_t)std::floor(src), in - 1);
    float l1 = std::min(std::max(src - (float)i0, 0.f), 1.f);
    int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.w0.push_back(1.f - l1);
    t.w1.push_back(l1);
  }
  return t;
}

/* pads (a before, b after) of a dim of size n: reflect or replicate */
Taps pad_taps(int64_t n, int64_t a, int64_t b, bool reflect, const char *op) {
  int64_t out = n + a + b;
  TORCH_CHECK(out >= 0, op, ": input size ", n, " with padding (", a, ", ", b,
              ") gives a negative output size");
  if (reflect)
    TORCH_CHECK(a < n && b < n, "Argument #4: Padding size should be less than the "
                "corresponding input dimension, but got: padding (", a, ", ", b,
                ") at dimension of input of size ", n);
  Taps t;
  for (int64_t j = 0; j < out; j++) {
    int64_t i = j - a;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::min(std::max<int64_t>(i, 0), n - 1);
    }
    t.i0.push_back(i);
  }
  return t;
}

/* ------------------------------------------------------------- upsample */

/* Resamples the last k dims of x (k = sizes.size()). mode 0 nearest,
 * 1 nearest-exact, 2 linear. */
at::Tensor upsample(const at::Tensor &self, std::vector<int64_t> sizes, int mode, bool align,
                    std::vector<c10::optional<double>> scales) {
  int64_t k = (int64_t)sizes.size(), nd = self.dim();
  TORCH_CHECK(nd == k + 2, "upsample: expected a ", k + 2, "-D input, got ", self.sizes());
  for (int64_t d = 0; d < k; d++)
    TORCH_CHECK(self.size(nd - k + d) > 0 && sizes[d] > 0, "upsample: input and output "
                "sizes should be greater than 0, but got input ", self.sizes(), " output ",
                c10::IntArrayRef(sizes));
  lt_tensor *x = handle_of(self);
  if (mode == 2 && !lt_dtype_is_float(lt_tensor_dtype(x))) throw_unsupported("linear upsample of ints");
  Ref r = Ref::borrow(x);
  for (int64_t d = 0; d < k; d++) {
    int64_t dim = nd - k + d, in = self.size(dim);
    Taps t = mode == 2 ? linear_taps(in, sizes[d], align, scales[d])
                       : nearest_taps(in, sizes[d], scales[d], mode == 1);
    r = resample(r.get(), dim, t);
  }
  return wrap(fresh(std::move(r), {x}));
}

at::Tensor upsample_backward(const at::Tensor &grad, std::vector<int64_t> out_sizes,
                             std::vector<int64_t> in_sizes, int mode, bool align,
                             std::vector<c10::optional<double>> scales) {
  int64_t k = (int64_t)out_sizes.size(), nd = (int64_t)in_sizes.size();
  TORCH_CHECK(grad.dim() == nd, "upsample backward: grad of ", grad.dim(), " dims for input ",
              c10::IntArrayRef(in_sizes));
  lt_tensor *g = handle_of(grad);
  Ref r = Ref::borrow(g);
  for (int64_t d = k - 1; d >= 0; d--) {
    int64_t dim = nd - k + d, in = in_sizes[dim];
    Taps t = mode == 2 ? linear_taps(in, out_sizes[d], align, scales[d])
                       : nearest_taps(in, out_sizes[d], scales[d], mode == 1);
    r = resample_backward(r.get(), dim, in, t);
  }
  return wrap(fresh(std::move(r), {g}));
}

at::Tensor lt_up_nearest1d(const at::Tensor &self, c10::SymIntArrayRef os,
                           c10::optional<double> s) {
  return upsample(self, sym_to_ints(os), 0, false, {s});
}
at::Tensor lt_up_nearest2d(const at::Tensor &self, c10::SymIntArrayRef os,
                           c10::optional<double> sh, c10::optional<double> sw) {
  return upsample(self, sym_to_ints(os), 0, false, {sh, sw});
}
at::Tensor lt_up_nearest_exact2d(const at::Tensor &self, c10::SymIntArrayRef os,
                                 c10::optional<double> sh, c10::optional<double> sw) {
  return upsample(self, sym_to_ints(os), 1, false, {sh, sw});
}
at::Tensor lt_up_linear1d(const at::Tensor &self, c10::SymIntArrayRef os, bool align,
                          c10::optional<double> s) {
  return upsample(self, sym_to_ints(os), 2, align, {s});
}
at::Tensor lt_up_bilinear2d(const at::Tensor &self, c10::SymIntArrayRef os, bool align,
                            c10::optional<double> sh, c10::optional<double> sw) {
  return upsample(self, sym_to_ints(os), 2, align, {sh, sw});
}
at::Tensor lt_up_nearest1d_bwd(const at::Tensor &g, c10::SymIntArrayRef os,
                               c10::SymIntArrayRef is, c10::optional<double> s) {
  return upsample_backward(g, sym_to_ints(os), sym_to_ints(is), 0, false, {s});
}
at::Tensor lt_up_nearest2d_bwd(const at::Tensor &g, c10::SymIntArrayRef os,
                               c10::SymIntArrayRef is, c10::optional<double> sh,
                               c10::optional<double> sw) {
  return upsample_backward(g, sym_to_ints(os), sym_to_ints(is), 0, false, {sh, sw});
}
at::Tensor lt_up_nearest_exact2d_bwd(const at::Tensor &g, c10::SymIntArrayRef os,
                                     c10::SymIntArrayRef is, c10::optional<double> sh,
                                     c10::optional<double> sw) {
  return upsample_backward(g, sym_to_ints(os), sym_to_ints(is), 1, false, {sh, sw});
}
at::Tensor lt_up_linear1d_bwd(const at::Tensor &g, c10::SymIntArrayRef os,
                              c10::SymIntArrayRef is, bool align, c10::optional<double> s) {
  return upsample_backward(g, sym_to_ints(os), sym_to_ints(is), 2, align, {s});
}
at::Tensor lt_up_bilinear2d_bwd(const at::Tensor &g, c10::SymIntArrayRef os,
                                c10::SymIntArrayRef is, bool align, c10::optional<double> sh,
                                c10::optional<double> sw) {
  return upsample_backward(g, sym_to_ints(os), sym_to_ints(is), 2, align, {sh, sw});
}

/* ----------------------------------------------------------------- pads */

/* pads = (last dim before, after, next-to-last before, after, ...) */
at::Tensor pad(const at::Tensor &self, c10::SymIntArrayRef padding, bool reflect,
               const char *op) {
  std::vector<int64_t> p = sym_to_ints(padding);
  int64_t k = (int64_t)p.size() / 2, nd = self.dim();
  TORCH_CHECK(nd == k + 1 || nd == k + 2, op, ": expected a ", k + 1, "-D or ", k + 2,
              "-D input, got ", self.sizes());
  lt_tensor *x = handle_of(self);
  Ref r = Ref::borrow(x);
  for (int64_t d = 0; d < k; d++) {
    int64_t dim = nd - 1 - d;
    Taps t = pad_taps(self.size(dim), p[2 * d], p[2 * d + 1], reflect, op);
    if (self.size(dim) == 0 && !t.i0.empty()) throw_unsupported("pad of an empty dim");
    r = resample(r.get(), dim, t);
  }
  return wrap(fresh(std::move(r), {x}));
}

at::Tensor pad_backward(const at::Tensor &grad, const at::Tensor &self,
                        c10::SymIntArrayRef padding, bool reflect, const char *op) {
  std::vector<int64_t> p = sym_to_ints(padding);
  int64_t k = (int64_t)p.size() / 2, nd = self.dim();
  int core = common_core({&grad, &self});
  Ref r = operand(grad, core);
  for (int64_t d = k - 1; d >= 0; d--) {
    int64_t dim = nd - 1 - d;
    Taps t = pad_taps(self.size(dim), p[2 * d], p[2 * d + 1], reflect, op);
    r = resample_backward(r.get(), dim, self.size(dim), t);
  }
  return wrap(std::move(r));
}

#define LT_PAD_FNS(NAME, REFLECT)                                                       \
  at::Tensor lt_##NAME(const at::Tensor &self, c10::SymIntArrayRef p) {                 \
    return pad(self, p, REFLECT, #NAME);                                                \
  }                                                                                     \
  at::Tensor lt_##NAME##_backward(const at::Tensor &g, const at::Tensor &self,          \
                                  c10::SymIntArrayRef p) {                              \
    return pad_backward(g, self, p, REFLECT, #NAME);                                    \
  }
LT_PAD_FNS(reflection_pad1d, true)
LT_PAD_FNS(reflection_pad2d, true)
LT_PAD_FNS(reflection_pad3d, true)
LT_PAD_FNS(replication_pad1d, false)
LT_PAD_FNS(replication_pad2d, false)
LT_PAD_FNS(replication_pad3d, false)
#undef LT_PAD_FNS

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "upsample_nearest1d", TORCH_FN(lt_up_nearest1d));
  reg(m, "upsample_nearest2d", TORCH_FN(lt_up_nearest2d));
  reg(m, "_upsample_nearest_exact2d", TORCH_FN(lt_up_nearest_exact2d));
  reg(m, "upsample_linear1d", TORCH_FN(lt_up_linear1d));
  reg(m, "upsample_bilinear2d", TORCH_FN(lt_up_bilinear2d));
  reg(m, "upsample_nearest1d_backward", TORCH_FN(lt_up_nearest1d_bwd));
  reg(m, "upsample_nearest2d_backward", TORCH_FN(lt_up_nearest2d_bwd));
  reg(m, "_upsample_nearest_exact2d_backward", TORCH_FN(lt_up_nearest_exact2d_bwd));
  reg(m, "upsample_linear1d_backward", TORCH_FN(lt_up_linear1d_bwd));
  reg(m, "upsample_bilinear2d_backward", TORCH_FN(lt_up_bilinear2d_bwd));
  reg(m, "reflection_pad1d", TORCH_FN(lt_reflection_pad1d));
  reg(m, "reflection_pad2d", TORCH_FN(lt_reflection_pad2d));
  reg(m, "reflection_pad3d", TORCH_FN(lt_reflection_pad3d));
  reg(m, "replication_pad1d", TORCH_FN(lt_replication_pad1d));
  reg(m, "replication_pad2d", TORCH_FN(lt_replication_pad2d));
  reg(m, "replication_pad3d", TORCH_FN(lt_replication_pad3d));
  reg(m, "reflection_pad1d_backward", TORCH_FN(lt_reflection_pad1d_backward));
  reg(m, "reflection_pad2d_backward", TORCH_FN(lt_reflection_pad2d_backward));
  reg(m, "reflection_pad3d_backward", TORCH_FN(lt_reflection_pad3d_backward));
  reg(m, "replication_pad1d_backward", TORCH_FN(lt_replication_pad1d_backward));
  reg(m, "replication_pad2d_backward", TORCH_FN(lt_replication_pad2d_backward));
  reg(m, "replication_pad3d_backward", TORCH_FN(lt_replication_pad3d_backward));
}

}  // namespace lazytpu
