/*
 * backend/ops_nn.cpp — neural-network kernels: softmax, convolution, pooling,
 * batch/layer norm (as reductions + elementwise), losses, dropout and the
 * random ops (counter-based rand_uniform keyed by a per-core seed).
 *
 * Batch norm: PyTorch 1.13 does not write running stats back for a
 * functionalized backend, so native_batch_norm updates running_mean/var itself
 * (lt_tensor_assign into the tensors the module holds).
 */
#include "lt_aten.h"
#include "eager_checks.h"
#include "lt_register.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>

#include <cmath>

namespace lazytpu {

void cpu_fallback_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack);

namespace {

/* Every convolution of 1, 2 or 3 spatial dims runs natively (3-D ones on
 * the conv3d ops, 1-D ones as 2-D with a unit height). A transposed
 * convolution is the input gradient of the forward one with the same
 * weight, so it runs on the same kernels; an output_padding at or past the
 * stride (allowed up to the dilation) makes the forward convolution of its
 * gradient longer than its input: it is cut back (conv_trim). */
bool conv_native(const at::Tensor &input) {
  return input.dim() >= 3 && input.dim() <= 5;
}

int64_t wrapd(int64_t d, int64_t nd) { return c10::maybe_wrap_dim(d, nd); }

/* ------------------------------------------------------------- softmax */

at::Tensor softmax_like(lt_op op, const at::Tensor &self, int64_t dim) {
  lt_tensor *x = handle_of(self);
  int nd = lt_tensor_shape(x)->ndim;
  lt_attrs a = attrs_of({nd ? wrapd(dim, nd) : 0});
  /* eager's CPU kernels take floating inputs only (torch.softmax(int)
   * without dtype= reaches here with the integer tensor) */
  bool last = nd == 0 || a.i[0] == nd - 1;
  check_floating_kernel(self, op == LT_OP_log_softmax
                                  ? (last ? "log_softmax_lastdim_kernel_impl" : "log_softmax_kernel_impl")
                                  : (last ? "softmax_lastdim_kernel_impl" : "softmax_kernel_impl"));
  return wrap(trace(op, {x}, &a));
}
at::Tensor lt_log_softmax(const at::Tensor &self, int64_t dim, bool half_to_float) {
  return softmax_like(LT_OP_log_softmax, self, dim);
}
at::Tensor lt_softmax(const at::Tensor &self, int64_t dim, bool half_to_float) {
  return softmax_like(LT_OP_softmax, self, dim);
}
at::Tensor softmax_bwd(lt_op op, const at::Tensor &grad, const at::Tensor &output, int64_t dim) {
  int core = common_core({&grad, &output});
  Ref g = operand(grad, core), o = operand(output, core);
  int nd = o.ndim();
  lt_attrs a = attrs_of({nd ? wrapd(dim, nd) : 0});
  return wrap(trace(op, {g.get(), o.get()}, &a));
}
at::Tensor lt_log_softmax_backward(const at::Tensor &grad, const at::Tensor &output,
                                   int64_t dim, at::ScalarType input_dtype) {
  return softmax_bwd(LT_OP_log_softmax_backward, grad, output, dim);
}
at::Tensor lt_softmax_backward(const at::Tensor &grad, const at::Tensor &output, int64_t dim,
                               at::ScalarType input_dtype) {
  return softmax_bwd(LT_OP_softmax_backward, grad, output, dim);
}

/* --------------------------------------------------------- convolution */

int64_t at2(at::IntArrayRef v, size_t i, int64_t dflt) {
  if (v.empty()) return dflt;
  return v.size() == 1 ? v[0] : v[i];
}

struct ConvGeom {
  bool is1d;
  int k;                       /* spatial dims of the device op: 2 or 3 */
  std::vector<int64_t> attrs;  /* stride[k], pad[k], dil[k], groups */
};

ConvGeom conv_geom(const at::Tensor &input, at::IntArrayRef stride, at::IntArrayRef padding,
                   at::IntArrayRef dilation, bool transposed, int64_t groups) {
  TORCH_CHECK(input.dim() >= 3 && input.dim() <= 5, "lazytpu: convolution supports 1d/2d/3d "
              "inputs ([N, C, L], [N, C, H, W] or [N, C, D, H, W]), got input of sizes ",
              input.sizes());
  ConvGeom g;
  g.is1d = input.dim() == 3;
  g.k = input.dim() == 5 ? 3 : 2;
  if (g.is1d) {
    g.attrs = {1, at2(stride, 0, 1), 0, at2(padding, 0, 0), 1, at2(dilation, 0, 1), groups};
  } else {
    for (int j = 0; j < g.k; j++) g.attrs.push_back(at2(stride, j, 1));
    for (int j = 0; j < g.k; j++) g.attrs.push_back(at2(padding, j, 0));
    for (int j = 0; j < g.k; j++) g.attrs.push_back(at2(dilation, j, 1));
    g.attrs.push_back(groups);
  }
  return g;
}

lt_op conv_op(const ConvGeom &g, int which) {  /* 0 forward, 1 backward input, 2 weight */
  static const lt_op ops[2][3] = {
      {LT_OP_conv2d, LT_OP_conv2d_backward_input, LT_OP_conv2d_backward_weight},
      {LT_OP_conv3d, LT_OP_conv3d_backward_input, LT_OP_conv3d_backward_weight}};
  return ops[g.k == 3][which];
}

Ref to2d(lt_tensor *x) {  /* [N, C, L] -> [N, C, 1, L] */
  const lt_shape *s = lt_tensor_shape(x);
  return reshape(x, {s->dims[0], s->dims[1], 1, s->dims[2]});
}
Ref from2d(lt_tensor *x) {  /* [N, C, 1, L] -> [N, C, L] */
  const lt_shape *s = lt_tensor_shape(x);
  return reshape(x, {s->dims[0], s->dims[1], s->dims[3]});
}

/* spatial output size of a transposed convolution */
int64_t tconv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

/* y cut to the spatial sizes of `like` (same rank) where it is longer */
Ref conv_trim(Ref y, const lt_shape &like) {
  for (int d = 2; d < like.ndim; d++)
    if (y.shape().dims[d] > like.dims[d]) {
      lt_attrs a = attrs_of({d, 0, like.dims[d], 1});
      y = trace(LT_OP_slice, {y.get()}, &a);
    }
  return y;
}

at::Tensor lt_convolution(const at::Tensor &input, const at::Tensor &weight,
                          const c10::optional<at::Tensor> &bias, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                          at::IntArrayRef output_padding, int64_t groups) {
  if (!conv_native(input))
    return at::native::call_fallback_fn<&cpu_fallback_boxed, at::_ops::convolution>::call(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
  bool hb = bias && bias->defined();
  int core = common_core({&input, &weight, hb ? &*bias : nullptr});
  ConvGeom g = conv_geom(input, stride, padding, dilation, transposed, groups);
  TORCH_CHECK(weight.dim() == input.dim(), "Expected ", input.dim(), "-dimensional weight for ",
              input.dim(), "-dimensional input ", input.sizes(), ", but got ", weight.dim(),
              "-dimensional weight of size ", weight.sizes());
  Ref x = operand(input, core), w = operand(weight, core);
  if (g.is1d) { x = to2d(x.get()); w = to2d(w.get()); }
  Ref y;
  int64_t oc;
  if (transposed) {
    /* the input gradient of conv(y, w) for the output size asked for */
    TORCH_CHECK(x.shape().dims[1] == w.shape().dims[0], "conv_transpose: input has ",
                x.shape().dims[1], " channels but weight ", weight.sizes(), " expects ",
                w.shape().dims[0]);
    std::vector<int64_t> at = g.attrs;
    int k = g.k;
    for (int j = 0; j < k; j++) {
      int64_t op = g.is1d ? (j == 0 ? 0 : at2(output_padding, 0, 0)) : at2(output_padding, j, 0);
      at.push_back(tconv_out(x.shape().dims[2 + j], w.shape().dims[2 + j], at[j], at[k + j],
                             at[2 * k + j], op));
    }
    oc = w.shape().dims[1] * groups;
    bool zero = false, neg = false;
    for (int j = 0; j < k; j++) {
      zero |= at[3 * k + 1 + j] == 0;
      neg |= at[3 * k + 1 + j] < 0;
    }
    if (zero && !neg) {   /* eager returns the empty output asked for */
      std::vector<int64_t> od = {x.shape().dims[0], oc};
      od.insert(od.end(), at.begin() + 3 * k + 1, at.end());
      if (g.is1d) od.erase(od.begin() + 2);
      return wrap(zeros(core, od, x.dtype()));
    }
    lt_attrs a = attrs_vec(at);
    y = trace(conv_op(g, 1), {x.get(), w.get()}, &a);
  } else {
    lt_attrs a = attrs_vec(g.attrs);
    y = trace(conv_op(g, 0), {x.get(), w.get()}, &a);
    oc = weight.size(0);
  }
  if (hb) {
    Ref b = operand(*bias, core);
    std::vector<int64_t> bd(y.ndim(), 1);
    bd[1] = oc;
    y = trace(LT_OP_add, {y.get(), reshape(b.get(), bd).get()});
  }
  if (g.is1d) y = from2d(y.get());
  return wrap(std::move(y));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_convolution_backward(
    const at::Tensor &grad_output, const at::Tensor &input, const at::Tensor &weight,
    at::OptionalIntArrayRef bias_sizes, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> mask) {
  if (!conv_native(input))
    return at::native::call_fallback_fn_symint<&cpu_fallback_boxed, at::_ops::convolution_backward>::call(
        grad_output, input, weight,
        bias_sizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*bias_sizes))
                   : at::OptionalSymIntArrayRef(std::nullopt),
        c10::fromIntArrayRefSlow(stride),
        c10::fromIntArrayRefSlow(padding), c10::fromIntArrayRefSlow(dilation), transposed,
        c10::fromIntArrayRefSlow(output_padding), groups, mask);
  int core = common_core({&grad_output, &input, &weight});
  ConvGeom g = conv_geom(input, stride, padding, dilation, transposed, groups);
  Ref go = operand(grad_output, core), x = operand(input, core), w = operand(weight, core);
  if (g.is1d) { go = to2d(go.get()); x = to2d(x.get()); w = to2d(w.get()); }
  int k = g.k;
  at::Tensor gi, gw, gb;
  if (grad_output.numel() == 0) {   /* nothing flows back: zeros of each shape */
    lt_dtype dt = go.dtype();
    if (mask[0]) gi = wrap(zeros(core, input.sizes().vec(), dt));
    if (mask[1]) gw = wrap(zeros(core, weight.sizes().vec(), dt));
    if (mask[2]) gb = wrap(zeros(core, {grad_output.size(1)}, dt));
    return std::make_tuple(gi, gw, gb);
  }
  if (mask[0]) {
    Ref r;
    if (transposed) {   /* the forward convolution of the gradient */
      lt_attrs a = attrs_vec(g.attrs);
      r = conv_trim(trace(conv_op(g, 0), {go.get(), w.get()}, &a), x.shape());
    } else {
      std::vector<int64_t> at = g.attrs;
      for (int j = 0; j < k; j++) at.push_back(x.shape().dims[2 + j]);
      lt_attrs a = attrs_vec(at);
      r = trace(conv_op(g, 1), {go.get(), w.get()}, &a);
    }
    gi = wrap(g.is1d ? from2d(r.get()) : std::move(r));
  }
  if (mask[1]) {
    std::vector<int64_t> at = g.attrs;
    for (int j = 0; j < k; j++) at.push_back(w.shape().dims[2 + j]);
    lt_attrs a = attrs_vec(at);
    /* transposed: the roles of input and output gradient swap */
    Ref r = transposed ? trace(conv_op(g, 2), {x.get(), go.get()}, &a)
                       : trace(conv_op(g, 2), {go.get(), x.get()}, &a);
    gw = wrap(g.is1d ? from2d(r.get()) : std::move(r));
  }
  if (mask[2]) {
    std::vector<int64_t> rd = {0};
    for (int j = 0; j < k; j++) rd.push_back(2 + j);
    gb = wrap(reduce(LT_OP_sum, go.get(), rd, false));
  }
  return std::make_tuple(gi, gw, gb);
}

/* ------------------------------------------------------------- pooling */

void check_pool_input(const at::Tensor &x, const char *op) {
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4, op, ": Expected 3D or 4D (batch mode) tensor "
              "for input, but got: ", x.sizes());
}

lt_attrs maxpool_attrs(at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                       at::IntArrayRef d, bool ceil) {
  int64_t kh = at2(k, 0, 1), kw = at2(k, 1, 1);
  return attrs_of({kh, kw, at2(s, 0, kh), at2(s, 1, kw), at2(p, 0, 0), at2(p, 1, 0),
                   at2(d, 0, 1), at2(d, 1, 1), ceil ? 1 : 0});
}

std::tuple<at::Tensor, at::Tensor> lt_max_pool2d_with_indices(
    const at::Tensor &self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
    at::IntArrayRef d, bool ceil) {
  check_pool_input(self, "max_pool2d");
  lt_tensor *x = handle_of(self);
  lt_attrs a = maxpool_attrs(k, s, p, d, ceil);
  /* eager's check (its first line); the input on the next */
  TORCH_CHECK(a.i[4] <= a.i[0] / 2 && a.i[5] <= a.i[1] / 2, "pad should be smaller than or "
              "equal to half of kernel size, but got padW = ", a.i[5], ", padH = ", a.i[4],
              ", kW = ", a.i[1], ", kH = ", a.i[0], "\n(max_pool2d of a ", self.scalar_type(),
              self.sizes(), " input)");
  return std::make_tuple(wrap(trace(LT_OP_max_pool2d, {x}, &a)),
                         wrap(trace(LT_OP_max_pool2d_indices, {x}, &a)));
}
at::Tensor lt_max_pool2d_backward(const at::Tensor &grad, const at::Tensor &self,
                                  at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                  at::IntArrayRef d, bool ceil, const at::Tensor &indices) {
  lt_attrs a = maxpool_attrs(k, s, p, d, ceil);
  const int64_t *v = a.i;
  if (v[0] == 2 && v[1] == 2 && v[2] == 2 && v[3] == 2 && v[4] == 0 && v[5] == 0 && v[6] == 1 &&
      v[7] == 1) {
    /* 2x2 / stride 2: recomputing the windows from x is as cheap as a
     * scatter (pool_max2.c), and a lazy step then never computes indices */
    int core = common_core({&grad, &self});
    Ref g = operand(grad, core), x = operand(self, core);
    return wrap(trace(LT_OP_max_pool2d_backward, {g.get(), x.get()}, &a));
  }
  /* otherwise the forward's indices, as eager: a scatter instead of
   * recomputing every (overlapping) window (x only gives the shape) */
  int core = common_core({&grad, &self, &indices});
  Ref g = operand(grad, core), x = operand(self, core), i = operand(indices, core);
  return wrap(trace(LT_OP_max_pool2d_backward_idx, {g.get(), x.get(), i.get()}, &a));
}

lt_attrs avgpool_attrs(at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p, bool ceil,
                       bool cip, c10::optional<int64_t> div) {
  int64_t kh = at2(k, 0, 1), kw = at2(k, 1, 1);
  TORCH_CHECK(!div || *div != 0, "divisor must be not zero");
  return attrs_of({kh, kw, at2(s, 0, kh), at2(s, 1, kw), at2(p, 0, 0), at2(p, 1, 0),
                   ceil ? 1 : 0, cip ? 1 : 0, div.value_or(0)});
}
at::Tensor lt_avg_pool2d(const at::Tensor &self, at::IntArrayRef k, at::IntArrayRef s,
                         at::IntArrayRef p, bool ceil, bool cip, c10::optional<int64_t> div) {
  check_pool_input(self, "avg_pool2d");
  lt_attrs a = avgpool_attrs(k, s, p, ceil, cip, div);
  for (int j = 0; j < 2; j++)   /* eager's check (its first line); the input on the next */
    TORCH_CHECK(a.i[4 + j] <= a.i[j] / 2, "pad should be at most half of effective kernel "
                "size, but got pad=", a.i[4 + j], ", kernel_size=", a.i[j], " and dilation=1"
                "\n(avg_pool2d of a ", self.scalar_type(), self.sizes(), " input)");
  return wrap(trace(LT_OP_avg_pool2d, {handle_of(self)}, &a));
}
at::Tensor lt_avg_pool2d_backward(const at::Tensor &grad, const at::Tensor &self,
                                  at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                  bool ceil, bool cip, c10::optional<int64_t> div) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  lt_attrs a = avgpool_attrs(k, s, p, ceil, cip, div);
  return wrap(trace(LT_OP_avg_pool2d_backward, {g.get(), x.get()}, &a));
}
at::Tensor lt_adaptive_avg_pool2d(const at::Tensor &self, c10::SymIntArrayRef output_size) {
  check_pool_input(self, "adaptive_avg_pool2d");
  std::vector<int64_t> os = sym_to_ints(output_size);
  TORCH_CHECK(os.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  lt_attrs a = attrs_of({os[0], os[1]});
  return wrap(trace(LT_OP_adaptive_avg_pool2d, {handle_of(self)}, &a));
}
at::Tensor lt_adaptive_avg_pool2d_backward(const at::Tensor &grad, const at::Tensor &self) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  int nd = g.ndim();
  lt_attrs a = attrs_of({g.shape().dims[nd - 2], g.shape().dims[nd - 1]});
  return wrap(trace(LT_OP_adaptive_avg_pool2d_backward, {g.get(), x.get()}, &a));
}

std::tuple<at::Tensor, at::Tensor> lt_adaptive_max_pool2d(const at::Tensor &self,
                                                          at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2, "adaptive_max_pool2d(): internal error: output_size.size() "
              "must be 2");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "adaptive_max_pool2d(): Expected 3D or 4D "
              "tensor, but got: ", self.sizes());
  for (int64_t d = 1; d < self.dim(); d++)
    TORCH_CHECK(self.size(d) > 0, "adaptive_max_pool2d(): Expected input to have non-zero size "
                "for non-batch dimensions, but input has sizes ", self.sizes(), " with dimension ",
                d, " being empty");
  TORCH_CHECK(output_size[0] > 0 && output_size[1] > 0, "adaptive_max_pool2d(): output_size "
              "must be positive, got ", output_size);
  lt_tensor *x = handle_of(self);
  lt_attrs a = attrs_of({output_size[0], output_size[1]});
  return std::make_tuple(wrap(trace(LT_OP_adaptive_max_pool2d, {x}, &a)),
                         wrap(trace(LT_OP_adaptive_max_pool2d_indices, {x}, &a)));
}
at::Tensor lt_adaptive_max_pool2d_backward(const at::Tensor &grad, const at::Tensor &self,
                                           const at::Tensor &indices) {
  int core = common_core({&grad, &self, &indices});
  Ref g = operand(grad, core), x = operand(self, core), i = operand(indices, core);
  return wrap(trace(LT_OP_adaptive_max_pool2d_backward, {g.get(), x.get(), i.get()}));
}

/* ---------------------------------------------------------- batch norm */

std::vector<int64_t> bn_reduce_dims(int nd) {
  std::vector<int64_t> d{0};
  for (int i = 2; i < nd; i++) d.push_back(i);
  return d;
}
std::vector<int64_t> bn_bshape(int nd, int64_t c) {
  std::vector<int64_t> s(nd, 1);
  s[1] = c;
  return s;
}
Ref opt_operand(const c10::optional<at::Tensor> &t, int core) {
  if (!t || !t->defined()) return Ref();
  return operand(*t, core);
}
Ref add_eps_rsqrt(lt_tensor *var, double eps) {
  Ref e = scalar(lt_tensor_core(var), eps);
  return trace(LT_OP_rsqrt, {trace(LT_OP_add, {var, e.get()}).get()});
}
/* x * (1 - m) + y * m */
Ref ema(lt_tensor *x, lt_tensor *y, double m) {
  return trace(LT_OP_add, {mul_scalar(x, 1.0 - m).get(), mul_scalar(y, m).get()});
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_batch_norm(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &running_mean,
    const c10::optional<at::Tensor> &running_var, bool training, double momentum, double eps) {
  int core = common_core({&input});
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected at least 2D input (got ", input.dim(),
              "D input)");
  Ref x = operand(input, core);
  int nd = x.ndim();
  int64_t c = x.shape().dims[1];
  std::vector<int64_t> dims = bn_reduce_dims(nd), bs = bn_bshape(nd, c);
  Ref w = opt_operand(weight, core), b = opt_operand(bias, core);
  Ref rm = opt_operand(running_mean, core), rv = opt_operand(running_var, core);
  Ref mean, invstd, xc, new_rm, new_rv;
  if (training) {
    mean = reduce(LT_OP_mean, x.get(), dims, false);
    xc = trace(LT_OP_sub, {x.get(), reshape(mean.get(), bs).get()});
    Ref var = reduce(LT_OP_mean, trace(LT_OP_mul, {xc.get(), xc.get()}).get(), dims, false);
    invstd = add_eps_rsqrt(var.get(), eps);
    int64_t n = lt_shape_numel(&x.shape()) / (c ? c : 1);
    if (rm) new_rm = cast(ema(rm.get(), mean.get(), momentum).get(), rm.dtype());
    if (rv) {
      Ref unbiased = mul_scalar(var.get(), n > 1 ? (double)n / (double)(n - 1) : 1.0);
      new_rv = cast(ema(rv.get(), unbiased.get(), momentum).get(), rv.dtype());
    }
  } else {
    TORCH_CHECK(rm && rv, "running_mean and running_var must be defined in evaluation mode");
    Ref m = Ref::borrow(rm.get());
    Ref is = add_eps_rsqrt(rv.get(), eps);
    xc = trace(LT_OP_sub, {x.get(), reshape(m.get(), bs).get()});
    Ref y = trace(LT_OP_mul, {xc.get(), reshape(is.get(), bs).get()});
    if (w) y = trace(LT_OP_mul, {y.get(), reshape(w.get(), bs).get()});
    if (b) y = trace(LT_OP_add, {y.get(), reshape(b.get(), bs).get()});
    /* eval mode saves no statistics (the backward reads the running ones) */
    return std::make_tuple(wrap(std::move(y)), wrap(zeros(core, {0}, x.dtype())),
                           wrap(zeros(core, {0}, x.dtype())));
  }
  /* y = x * alpha + beta with per-channel alpha = invstd * w and
   * beta = b - mean * alpha, as eager's CPU kernel computes it: one multiply
   * and one add per element over two broadcast operands (instead of four
   * ops over four), and xc stays inside var's reduction (not materialised
   * for y). */
  Ref alpha = w ? trace(LT_OP_mul, {invstd.get(), w.get()}) : Ref::borrow(invstd.get());
  Ref beta = trace(LT_OP_neg, {trace(LT_OP_mul, {mean.get(), alpha.get()}).get()});
  if (b) beta = trace(LT_OP_add, {beta.get(), b.get()});
  Ref y = trace(LT_OP_add, {trace(LT_OP_mul, {x.get(), reshape(alpha.get(), bs).get()}).get(),
                            reshape(beta.get(), bs).get()});
  /* running stats last: nothing above may fail after they changed */
  if (new_rm) check(lt_tensor_assign(rm.get(), new_rm.get()));
  if (new_rv) check(lt_tensor_assign(rv.get(), new_rv.get()));
  return std::make_tuple(wrap(std::move(y)), wrap(std::move(mean)), wrap(std::move(invstd)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_batch_norm_backward(
    const at::Tensor &grad_out, const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &running_mean, const c10::optional<at::Tensor> &running_var,
    const c10::optional<at::Tensor> &save_mean, const c10::optional<at::Tensor> &save_invstd,
    bool train, double eps, std::array<bool, 3> mask) {
  int core = common_core({&grad_out, &input});
  Ref g = operand(grad_out, core), x = operand(input, core);
  int nd = x.ndim();
  int64_t c = x.shape().dims[1];
  std::vector<int64_t> dims = bn_reduce_dims(nd), bs = bn_bshape(nd, c);
  Ref w = opt_operand(weight, core);
  Ref mean, invstd;
  if (train) {
    mean = opt_operand(save_mean, core);
    invstd = opt_operand(save_invstd, core);
  } else {
    mean = opt_operand(running_mean, core);
    Ref rv = opt_operand(running_var, core);
    TORCH_CHECK(mean && rv, "batch_norm backward: running stats must be defined in eval mode");
    invstd = add_eps_rsqrt(rv.get(), eps);
  }
  TORCH_CHECK(mean && invstd, "batch_norm backward: saved statistics are missing");
  /* as eager's CPU kernel: dotp = sum(g * (x - mean)) per channel (two ops
   * per element in the reduction), the weight gradient dotp * invstd, and
   * the input gradient (g - (x - mean) * k - sum(g) / n) * invstd * w with
   * k = dotp * invstd^2 / n, all per-channel factors computed on [C] */
  Ref xc = trace(LT_OP_sub, {x.get(), reshape(mean.get(), bs).get()});
  Ref gsum = reduce(LT_OP_sum, g.get(), dims, false);
  Ref dotp = reduce(LT_OP_sum, trace(LT_OP_mul, {g.get(), xc.get()}).get(), dims, false);
  Ref gxsum = trace(LT_OP_mul, {dotp.get(), invstd.get()});
  at::Tensor gi, gw, gb;
  if (mask[0]) {
    Ref scale = w ? trace(LT_OP_mul, {invstd.get(), w.get()}) : Ref::borrow(invstd.get());
    Ref scale_b = reshape(scale.get(), bs);
    if (train) {
      int64_t n = lt_shape_numel(&x.shape()) / (c ? c : 1);
      double inv_n = n ? 1.0 / (double)n : 0.0;
      Ref gmean = mul_scalar(gsum.get(), inv_n);
      Ref k = mul_scalar(trace(LT_OP_mul, {gxsum.get(), invstd.get()}).get(), inv_n);
      Ref d = trace(LT_OP_sub, {trace(LT_OP_sub, {g.get(), trace(LT_OP_mul, {xc.get(),
                                    reshape(k.get(), bs).get()}).get()}).get(),
                                reshape(gmean.get(), bs).get()});
      gi = wrap(trace(LT_OP_mul, {d.get(), scale_b.get()}));
    } else {
      gi = wrap(trace(LT_OP_mul, {g.get(), scale_b.get()}));
    }
  }
  if (mask[1]) gw = wrap(std::move(gxsum));
  if (mask[2]) gb = wrap(std::move(gsum));
  return std::make_tuple(gi, gw, gb);
}

/* ---------------------------------------------------------- layer norm */

/* Fused kernels (lazy/kernels/layernorm.c): y in one pass over x; mean
 * and rstd from a separate stats op, which a lazy graph computes only when
 * the backward (or the caller) reads them; the backward one pass for the
 * input's grad and one for the affine grads (both from the saved stats:
 * native_layer_norm_backward gets no eps). */
std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_layer_norm(
    const at::Tensor &input, c10::SymIntArrayRef normalized_shape,
    const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias, double eps) {
  int core = common_core({&input});
  std::vector<int64_t> ns = sym_to_ints(normalized_shape);
  int64_t nd = input.dim(), k = (int64_t)ns.size();
  TORCH_CHECK(k >= 1 && k <= nd && input.sizes().slice(nd - k).vec() == ns,
              "Given normalized_shape=", c10::IntArrayRef(ns), ", expected input with shape "
              "[*, ", c10::IntArrayRef(ns), "], but got input of size", input.sizes());
  Ref x = operand(input, core);
  Ref w = opt_operand(weight, core), b = opt_operand(bias, core);
  std::vector<lt_tensor *> in{x.get()};
  if (w) in.push_back(w.get());
  if (b) in.push_back(b.get());
  lt_attrs a = attrs_of({k, w ? 1 : 0, b ? 1 : 0});
  a.f[0] = eps;
  Ref y = trace_n(LT_OP_layer_norm, in, &a);
  lt_attrs sa = attrs_of({k});
  sa.f[0] = eps;
  Ref stats = trace(LT_OP_layer_norm_stats, {x.get()}, &sa);
  /* mean, rstd: [*leading, 1 (k times)], in the parameters' dtype when
   * they are wider than a bf16 input (eager's mixed-type rule) */
  std::vector<int64_t> ss;
  for (int64_t i = 0; i < nd; i++) ss.push_back(i < nd - k ? input.size(i) : 1);
  lt_dtype pdt = w ? w.dtype() : b ? b.dtype() : x.dtype();
  lt_dtype sdt = x.dtype() == LT_BF16 && pdt == LT_F32 ? LT_F32 : x.dtype();
  auto part = [&](int64_t which) {
    lt_attrs sel = attrs_of({0, which});
    Ref r = reshape(trace(LT_OP_select, {stats.get()}, &sel).get(), ss);
    return wrap(cast(r.get(), sdt));
  };
  return std::make_tuple(wrap(std::move(y)), part(0), part(1));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_layer_norm_backward(
    const at::Tensor &grad_out, const at::Tensor &input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor &mean_t, const at::Tensor &rstd_t, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, std::array<bool, 3> mask) {
  int core = common_core({&grad_out, &input, &mean_t, &rstd_t});
  int64_t nd = input.dim(), k = (int64_t)normalized_shape.size();
  TORCH_CHECK(k >= 1 && k <= nd, "layer_norm backward: bad normalized_shape");
  Ref g = operand(grad_out, core), x = operand(input, core);
  Ref mean = operand(mean_t, core), rstd = operand(rstd_t, core);
  Ref w = opt_operand(weight, core);
  at::Tensor gi, gw, gb;
  if (mask[0]) {
    std::vector<lt_tensor *> in{g.get(), x.get(), mean.get(), rstd.get()};
    if (w) in.push_back(w.get());
    lt_attrs a = attrs_of({k, w ? 1 : 0});
    gi = wrap(trace_n(LT_OP_layer_norm_backward, in, &a));
  }
  bool want_w = mask[1] && weight && weight->defined();
  bool want_b = mask[2] && bias && bias->defined();
  if (want_w || want_b) {
    lt_attrs a = attrs_of({k});
    Ref both = trace(LT_OP_layer_norm_backward_affine,
                     {g.get(), x.get(), mean.get(), rstd.get()}, &a);
    auto part = [&](int64_t which, const at::Tensor &like) {
      lt_attrs sel = attrs_of({0, which});
      return wrap(cast(trace(LT_OP_select, {both.get()}, &sel).get(),
                       to_lt_dtype(like.scalar_type())));
    };
    if (want_w) gw = part(0, *weight);
    if (want_b) gb = part(1, *bias);
  }
  return std::make_tuple(gi, gw, gb);
}

/* --------------------------------------------------------------- losses */

}  // namespace

Ref nll_target(lt_tensor *t, int64_t C, int64_t ignore_index, bool byte_ok) {
  lt_dtype dt = lt_tensor_dtype(t);
  if (dt == LT_I64) return Ref::borrow(t);
  if (dt == LT_U8 && (byte_ok || xla_compat())) return cast(t, LT_I64);
  if (!xla_compat()) return Ref::borrow(t);
  if (!lt_dtype_is_float(dt)) return cast(t, LT_I64);
  int core = lt_tensor_core(t);
  Ref lo = scalar_typed(core, 0, dt), hi = scalar_typed(core, (double)C, dt);
  Ref whole = trace(LT_OP_eq, {t, trace(LT_OP_floor, {t}).get()});
  Ref in = trace(LT_OP_logical_and, {trace(LT_OP_ge, {t, lo.get()}).get(),
                                     trace(LT_OP_lt, {t, hi.get()}).get()});
  Ref ok = trace(LT_OP_logical_and, {whole.get(), in.get()});
  Ref ig = scalar_typed(core, (double)ignore_index, dt);
  return cast(trace(LT_OP_where, {ok.get(), t, ig.get()}).get(), LT_I64);
}

namespace {

std::tuple<at::Tensor, at::Tensor> lt_nll_loss_forward(const at::Tensor &self,
                                                       const at::Tensor &target,
                                                       const c10::optional<at::Tensor> &weight,
                                                       int64_t reduction, int64_t ignore_index) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
  TORCH_CHECK(self.dim() == 1 || self.size(0) == target.size(0), "Expected input batch_size (",
              self.size(0), ") to match target batch_size (", target.size(0), ").");
  bool hw = weight && weight->defined();
  int core = common_core({&self, &target, hw ? &*weight : nullptr});
  Ref x = operand(self, core), w = opt_operand(weight, core);
  Ref t = nll_target(operand(target, core).get(), self.size(-1), ignore_index, true);
  lt_attrs a = attrs_of({reduction, ignore_index});
  std::vector<lt_tensor *> in{x.get(), t.get()};
  if (w) in.push_back(w.get());
  Ref out = trace_n(LT_OP_nll_loss, in, &a);
  /* total_weight: sum of the weights of the non-ignored targets */
  Ref ig = scalar(core, ignore_index);
  Ref valid = cast(trace(LT_OP_ne, {t.get(), ig.get()}).get(), x.dtype());
  if (w) {
    Ref zero = scalar(core, 0);
    Ref safe = trace(LT_OP_where, {trace(LT_OP_ne, {t.get(), ig.get()}).get(), t.get(),
                                   zero.get()});
    lt_attrs ia = attrs_of({0});
    Ref wt = trace(LT_OP_index_select, {w.get(), reshape(safe.get(), {target.numel()}).get()}, &ia);
    valid = trace(LT_OP_mul, {reshape(valid.get(), {target.numel()}).get(), wt.get()});
  }
  Ref tw = reduce(LT_OP_sum, valid.get(), {}, false);
  return std::make_tuple(wrap(std::move(out)), wrap(std::move(tw)));
}

at::Tensor lt_nll_loss_backward(const at::Tensor &grad, const at::Tensor &self,
                                const at::Tensor &target, const c10::optional<at::Tensor> &weight,
                                int64_t reduction, int64_t ignore_index,
                                const at::Tensor &total_weight) {
  bool hw = weight && weight->defined();
  int core = common_core({&grad, &self, &target, hw ? &*weight : nullptr});
  Ref g = operand(grad, core), x = operand(self, core);
  Ref t = nll_target(operand(target, core).get(), self.size(-1), ignore_index, true);
  Ref w = opt_operand(weight, core);
  lt_attrs a = attrs_of({reduction, ignore_index});
  std::vector<lt_tensor *> in{g.get(), x.get(), t.get()};
  if (w) in.push_back(w.get());
  return wrap(trace_n(LT_OP_nll_loss_backward, in, &a));
}

Ref reduce_loss(Ref l, int64_t reduction) {
  if (reduction == 1) return reduce(LT_OP_mean, l.get(), {}, false);
  if (reduction == 2) return reduce(LT_OP_sum, l.get(), {}, false);
  return l;
}
at::Tensor lt_mse_loss(const at::Tensor &self, const at::Tensor &target, int64_t reduction) {
  int core = common_core({&self, &target});
  Ref a = operand(self, core), b = operand(target, core);
  Ref d = trace(LT_OP_sub, {a.get(), b.get()});
  return wrap(reduce_loss(trace(LT_OP_mul, {d.get(), d.get()}), reduction));
}
at::Tensor lt_mse_loss_backward(const at::Tensor &grad, const at::Tensor &self,
                                const at::Tensor &target, int64_t reduction) {
  int core = common_core({&grad, &self, &target});
  Ref g = operand(grad, core), a = operand(self, core), b = operand(target, core);
  Ref d = trace(LT_OP_sub, {a.get(), b.get()});
  int64_t n = lt_shape_numel(&a.shape());
  double k = reduction == 1 ? 2.0 / (double)(n ? n : 1) : 2.0;
  Ref r = trace(LT_OP_mul, {mul_scalar(d.get(), k).get(), g.get()});
  std::vector<int64_t> dims = dims_of(a.shape());
  if (dims_of(r.shape()) != dims) r = expand(r.get(), dims);
  return wrap(std::move(r));
}

/* ------------------------------------------------------- random/dropout */

/* U[0,1) of `dims` (float dtype dt), keyed by the core's next seed. */
Ref rand_uniform(int core, const std::vector<int64_t> &dims, lt_dtype dt) {
  Ref seed = scalar_typed(core, (double)rng_next_seed(core), LT_I64);
  std::vector<int64_t> a{(int64_t)dt, (int64_t)dims.size()};
  a.insert(a.end(), dims.begin(), dims.end());
  lt_attrs at = attrs_vec(a);
  return trace(LT_OP_rand_uniform, {seed.get()}, &at);
}
lt_dtype float_dt(lt_dtype dt) { return lt_dtype_is_float(dt) ? dt : LT_F32; }

/* multinomial from the device RNG, rows of p ([C] or [R, C], weights >= 0):
 *   with replacement: inverse CDF, sample = #{c : cdf_c <= u} for
 *     u ~ U[0, 1) (zero-weight classes are never picked);
 *   without: Gumbel top-k, the n largest log(p_c) - log(-log(u_c)), which
 *     has the law of drawing one after another without replacement.
 * Eager's checks on the values (negative weights, all-zero rows, more
 * samples than non-zero weights) would need a host read: not done. */
at::Tensor lt_multinomial(const at::Tensor &self, int64_t n, bool replacement,
                          c10::optional<at::Generator> gen) {
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point "
              "dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(n > 0, "cannot sample n_sample <= 0 samples");
  int64_t C = self.size(-1);
  TORCH_CHECK(replacement || n <= C, "cannot sample n_sample > prob_dist.size(-1) samples "
              "without replacement");
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  int64_t R = self.dim() == 2 ? self.size(0) : 1;
  Ref p = reshape(cast(x, LT_F64).get(), {R, C});
  Ref out;
  if (replacement) {
    lt_attrs a1 = attrs_of({1});
    Ref cdf = trace(LT_OP_cumsum, {p.get()}, &a1);
    Ref tot = reduce(LT_OP_sum, p.get(), {1}, true);
    cdf = reshape(trace(LT_OP_div, {cdf.get(), tot.get()}).get(), {R, 1, C});
    Ref u = reshape(rand_uniform(core, {R, n}, LT_F64).get(), {R, n, 1});
    Ref below = cast(trace(LT_OP_le, {cdf.get(), u.get()}).get(), LT_I64);
    Ref k = reduce(LT_OP_sum, below.get(), {2}, false);
    Ref last = scalar_typed(core, (double)(C - 1), LT_I64);
    out = trace(LT_OP_minimum, {k.get(), last.get()});
  } else {
    Ref u = rand_uniform(core, {R, C}, LT_F64);
    Ref g = trace(LT_OP_neg, {trace(LT_OP_log, {trace(LT_OP_neg, {trace(LT_OP_log, {u.get()}).get()}).get()}).get()});
    Ref keys = trace(LT_OP_add, {trace(LT_OP_log, {p.get()}).get(), g.get()});
    lt_attrs sa = attrs_of({1, 1});
    Ref order = trace(LT_OP_argsort, {keys.get()}, &sa);
    lt_attrs sl = attrs_of({1, 0, n, 1});
    out = trace(LT_OP_slice, {order.get()}, &sl);
  }
  if (self.dim() == 1) out = reshape(out.get(), {n});
  return wrap(std::move(out));
}

at::Tensor lt_bernoulli_p(const at::Tensor &self, double p, c10::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  Ref u = rand_uniform(core, dims_of(*lt_tensor_shape(x)), float_dt(lt_tensor_dtype(x)));
  Ref pp = scalar(core, p);
  return wrap(cast(trace(LT_OP_lt, {u.get(), pp.get()}).get(), lt_tensor_dtype(x)));
}
at::Tensor lt_bernoulli(const at::Tensor &self, c10::optional<at::Generator> gen) {
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  Ref u = rand_uniform(core, dims_of(*lt_tensor_shape(x)), float_dt(lt_tensor_dtype(x)));
  return wrap(cast(trace(LT_OP_lt, {u.get(), x}).get(), lt_tensor_dtype(x)));
}
at::Tensor &lt_bernoulli__float(at::Tensor &self, double p, c10::optional<at::Generator> gen) {
  at::Tensor v = lt_bernoulli_p(self, p, gen);
  assign_value(self, handle_of(v));
  return self;
}
at::Tensor lt_uniform(const at::Tensor &self, double from, double to,
                      c10::optional<at::Generator> gen) {
  lt_tensor *x = handle_of(self);
  TORCH_CHECK(lt_dtype_is_float(lt_tensor_dtype(x)), "uniform_ expects a floating point tensor");
  Ref u = rand_uniform(lt_tensor_core(x), dims_of(*lt_tensor_shape(x)), lt_tensor_dtype(x));
  if (from != 0.0 || to != 1.0) {
    Ref lo = scalar(lt_tensor_core(x), from);
    u = trace(LT_OP_add, {mul_scalar(u.get(), to - from).get(), lo.get()});
  }
  return wrap(std::move(u));
}
at::Tensor &lt_uniform_(at::Tensor &self, double from, double to,
                        c10::optional<at::Generator> gen) {
  at::Tensor v = lt_uniform(self, from, to, gen);
  assign_value(self, handle_of(v));
  return self;
}
/* normal_(mean, std): the core's N(0,1) stream scaled; like uniform_, the
   generator argument only names the device (random ops draw from their
   core's stream). Keras's initializers pass a lazytpu generator. */
at::Tensor lt_normal(const at::Tensor &self, double mean, double std,
                     c10::optional<at::Generator> gen) {
  lt_tensor *x = handle_of(self);
  TORCH_CHECK(lt_dtype_is_float(lt_tensor_dtype(x)), "normal_ expects a floating point tensor");
  TORCH_CHECK(std >= 0.0, "normal_ expects std >= 0.0, but found std ", std);
  int core = lt_tensor_core(x);
  std::vector<int64_t> dims = dims_of(*lt_tensor_shape(x));
  Ref seed = scalar_typed(core, (double)rng_next_seed(core), LT_I64);
  std::vector<int64_t> a{(int64_t)lt_tensor_dtype(x), (int64_t)dims.size()};
  a.insert(a.end(), dims.begin(), dims.end());
  lt_attrs at = attrs_vec(a);
  Ref n = trace(LT_OP_rand_normal, {seed.get()}, &at);
  if (std != 1.0) n = mul_scalar(n.get(), std);
  if (mean != 0.0) {
    Ref m = scalar(core, mean);
    n = trace(LT_OP_add, {n.get(), m.get()});
  }
  return wrap(std::move(n));
}
at::Tensor &lt_normal_(at::Tensor &self, double mean, double std,
                       c10::optional<at::Generator> gen) {
  at::Tensor v = lt_normal(self, mean, std, gen);
  check(lt_tensor_assign(handle_of(self), handle_of(v)));
  return self;
}

std::tuple<at::Tensor, at::Tensor> lt_native_dropout(const at::Tensor &input, double p,
                                                     c10::optional<bool> train) {
  lt_tensor *x = handle_of(input);
  int core = lt_tensor_core(x);
  std::vector<int64_t> dims = dims_of(*lt_tensor_shape(x));
  if (!train.value_or(true) || p == 0) {
    return std::make_tuple(wrap(fresh(Ref::borrow(x), {x})), wrap(full(core, dims, 1, LT_BOOL)));
  }
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  Ref u = rand_uniform(core, dims, float_dt(lt_tensor_dtype(x)));
  Ref keep = scalar(core, 1.0 - p);
  Ref mask = trace(LT_OP_lt, {u.get(), keep.get()});
  double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  Ref y = mul_scalar(trace(LT_OP_mul, {x, cast(mask.get(), lt_tensor_dtype(x)).get()}).get(), scale);
  return std::make_tuple(wrap(std::move(y)), wrap(std::move(mask)));
}
at::Tensor lt_native_dropout_backward(const at::Tensor &grad, const at::Tensor &mask,
                                      double scale) {
  int core = common_core({&grad, &mask});
  Ref g = operand(grad, core), m = operand(mask, core);
  Ref r = trace(LT_OP_mul, {g.get(), cast(m.get(), g.dtype()).get()});
  return wrap(mul_scalar(r.get(), scale));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "_log_softmax", TORCH_FN(lt_log_softmax));
  reg(m, "_softmax", TORCH_FN(lt_softmax));
  reg(m, "_log_softmax_backward_data", TORCH_FN(lt_log_softmax_backward));
  reg(m, "_softmax_backward_data", TORCH_FN(lt_softmax_backward));
  reg(m, "convolution", TORCH_FN(lt_convolution));
  reg(m, "convolution_backward", TORCH_FN(lt_convolution_backward));
  reg(m, "max_pool2d_with_indices", TORCH_FN(lt_max_pool2d_with_indices));
  reg(m, "max_pool2d_with_indices_backward", TORCH_FN(lt_max_pool2d_backward));
  reg(m, "avg_pool2d", TORCH_FN(lt_avg_pool2d));
  reg(m, "avg_pool2d_backward", TORCH_FN(lt_avg_pool2d_backward));
  reg(m, "_adaptive_avg_pool2d", TORCH_FN(lt_adaptive_avg_pool2d));
  reg(m, "_adaptive_avg_pool2d_backward", TORCH_FN(lt_adaptive_avg_pool2d_backward));
  reg(m, "adaptive_max_pool2d", TORCH_FN(lt_adaptive_max_pool2d));
  reg(m, "adaptive_max_pool2d_backward", TORCH_FN(lt_adaptive_max_pool2d_backward));
  reg(m, "native_batch_norm", TORCH_FN(lt_native_batch_norm));
  reg(m, "native_batch_norm_backward", TORCH_FN(lt_native_batch_norm_backward));
  reg(m, "native_layer_norm", TORCH_FN(lt_native_layer_norm));
  reg(m, "native_layer_norm_backward", TORCH_FN(lt_native_layer_norm_backward));
  reg(m, "nll_loss_forward", TORCH_FN(lt_nll_loss_forward));
  reg(m, "nll_loss_backward", TORCH_FN(lt_nll_loss_backward));
  reg(m, "mse_loss", TORCH_FN(lt_mse_loss));
  reg(m, "mse_loss_backward", TORCH_FN(lt_mse_loss_backward));
  reg(m, "bernoulli.p", TORCH_FN(lt_bernoulli_p), true);
  reg(m, "bernoulli", TORCH_FN(lt_bernoulli));
  reg(m, "multinomial", TORCH_FN(lt_multinomial));
  reg(m, "bernoulli_.float", TORCH_FN(lt_bernoulli__float));
  reg(m, "uniform", TORCH_FN(lt_uniform));
  reg(m, "uniform_", TORCH_FN(lt_uniform_));
  reg(m, "normal_functional", TORCH_FN(lt_normal));  /* what functionalization runs for normal_ */
  reg(m, "normal_", TORCH_FN(lt_normal_));
  reg(m, "native_dropout", TORCH_FN(lt_native_dropout));
  reg(m, "native_dropout_backward", TORCH_FN(lt_native_dropout_backward));
}

}  // namespace lazytpu
