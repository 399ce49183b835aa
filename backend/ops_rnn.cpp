/*
 * backend/ops_rnn.cpp — the fused RNN cells PyTorch 2.x calls for every
 * non-CPU device (nn.LSTM / nn.GRU / LSTMCell / GRUCell): the input and
 * hidden projections come in already computed (two addmm/mm), these kernels
 * do the gate math. Composed from table ops (slice, sigmoid, tanh, mul, add,
 * cat), so a whole step's cells fuse like any elementwise code.
 *
 *   _thnn_fused_lstm_cell(ig, hg, cx, ib?, hb?) -> (hy, cy, workspace)
 *     gates = ig + hg (+ ib + hb) = [i | f | g | o] along dim 1
 *     cy = sigmoid(f) * cx + sigmoid(i) * tanh(g);  hy = sigmoid(o) * tanh(cy)
 *     workspace = the activated gates [sig(i) | sig(f) | tanh(g) | sig(o)]
 *   _thnn_fused_lstm_cell_backward_impl(ghy?, gcy?, cx, cy, ws, has_bias)
 *     -> (grad_gates, grad_cx, grad_bias)
 *   _thnn_fused_gru_cell(ig, hg, hx, ib?, hb?) -> (hy, workspace)
 *     ig = [ir | ii | in], hg = [hr | hi | hn]
 *     r = sig(ir + hr), z = sig(ii + hi), n = tanh(in + r * hn)
 *     hy = n + z * (hx - n);  workspace = [r | z | n | hx | hn]
 *   _thnn_fused_gru_cell_backward(ghy, ws, has_bias)
 *     -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_ib, grad_hb)
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <tuple>

namespace lazytpu {
namespace {

/* Columns [k*h, (k+1)*h) of a [B, n*h] (or [n*h]) tensor. */
Ref chunk(lt_tensor *x, int64_t k, int64_t h) {
  int nd = lt_tensor_shape(x)->ndim;
  lt_attrs a = attrs_of({nd - 1, k * h, (k + 1) * h, 1});
  return trace(LT_OP_slice, {x}, &a);
}

Ref un(lt_op op, const Ref &a) { return trace(op, {a.get()}); }
Ref bin(lt_op op, const Ref &a, const Ref &b) { return trace(op, {a.get(), b.get()}); }
/* 1 - x */
Ref one_minus(const Ref &x) {
  Ref one = scalar(x.core(), 1);
  return bin(LT_OP_sub, one, x);
}

Ref cat_last(std::vector<Ref> &parts) {
  std::vector<lt_tensor *> in;
  for (auto &p : parts) in.push_back(p.get());
  lt_attrs a = attrs_of({(int64_t)(parts[0].ndim() - 1)});
  return trace_n(LT_OP_cat, in, &a);
}

Ref sum_rows(const Ref &x) {
  if (x.ndim() < 2) return Ref::borrow(x.get());
  return reduce(LT_OP_sum, x.get(), {0}, false);
}

/* ig + hg (+ ib + hb) */
Ref gate_sum(const at::Tensor &ig, const at::Tensor &hg, const c10::optional<at::Tensor> &ib,
             const c10::optional<at::Tensor> &hb, int core) {
  Ref g = bin(LT_OP_add, operand(ig, core), operand(hg, core));
  if (ib && ib->defined()) g = bin(LT_OP_add, g, operand(*ib, core));
  if (hb && hb->defined()) g = bin(LT_OP_add, g, operand(*hb, core));
  return g;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_fused_lstm_cell(
    const at::Tensor &input_gates, const at::Tensor &hidden_gates, const at::Tensor &cx,
    const c10::optional<at::Tensor> &input_bias, const c10::optional<at::Tensor> &hidden_bias) {
  int core = common_core({&input_gates, &hidden_gates, &cx});
  TORCH_CHECK(input_gates.dim() >= 1 && input_gates.size(-1) % 4 == 0,
              "_thnn_fused_lstm_cell: gates of shape ", input_gates.sizes(),
              " do not split into 4 along the last dim");
  int64_t h = input_gates.size(-1) / 4;
  Ref gates = gate_sum(input_gates, hidden_gates, input_bias, hidden_bias, core);
  Ref i = un(LT_OP_sigmoid, chunk(gates.get(), 0, h));
  Ref f = un(LT_OP_sigmoid, chunk(gates.get(), 1, h));
  Ref g = un(LT_OP_tanh, chunk(gates.get(), 2, h));
  Ref o = un(LT_OP_sigmoid, chunk(gates.get(), 3, h));
  Ref c = operand(cx, core);
  Ref cy = bin(LT_OP_add, bin(LT_OP_mul, f, c), bin(LT_OP_mul, i, g));
  Ref hy = bin(LT_OP_mul, o, un(LT_OP_tanh, cy));
  std::vector<Ref> ws;
  ws.push_back(std::move(i));
  ws.push_back(std::move(f));
  ws.push_back(std::move(g));
  ws.push_back(std::move(o));
  Ref work = cat_last(ws);
  return std::make_tuple(wrap(std::move(hy)), wrap(std::move(cy)), wrap(std::move(work)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_fused_lstm_cell_backward_impl(
    const c10::optional<at::Tensor> &grad_hy, const c10::optional<at::Tensor> &grad_cy,
    const at::Tensor &cx, const at::Tensor &cy, const at::Tensor &workspace, bool has_bias) {
  int core = common_core({&cx, &cy, &workspace});
  int64_t h = workspace.size(-1) / 4;
  lt_tensor *ws = handle_of(workspace);
  Ref i = chunk(ws, 0, h), f = chunk(ws, 1, h), g = chunk(ws, 2, h), o = chunk(ws, 3, h);
  Ref c = operand(cx, core), y = operand(cy, core);
  Ref tcy = un(LT_OP_tanh, y);
  bool has_ghy = grad_hy && grad_hy->defined(), has_gcy = grad_cy && grad_cy->defined();
  Ref gcy = has_gcy ? operand(*grad_cy, core) : zeros(core, dims_of(y.shape()), y.dtype());
  Ref go;
  if (has_ghy) {
    Ref ghy = operand(*grad_hy, core);
    /* gcy += ghy * o * (1 - tanh(cy)^2) */
    gcy = bin(LT_OP_add, gcy, trace(LT_OP_tanh_backward, {bin(LT_OP_mul, ghy, o).get(), tcy.get()}));
    /* go = ghy * tanh(cy) * o * (1 - o) */
    go = trace(LT_OP_sigmoid_backward, {bin(LT_OP_mul, ghy, tcy).get(), o.get()});
  } else {
    go = zeros(core, dims_of(o.shape()), o.dtype());
  }
  Ref gi = trace(LT_OP_sigmoid_backward, {bin(LT_OP_mul, gcy, g).get(), i.get()});
  Ref gf = trace(LT_OP_sigmoid_backward, {bin(LT_OP_mul, gcy, c).get(), f.get()});
  Ref gg = trace(LT_OP_tanh_backward, {bin(LT_OP_mul, gcy, i).get(), g.get()});
  Ref gcx = bin(LT_OP_mul, gcy, f);
  std::vector<Ref> parts;
  parts.push_back(std::move(gi));
  parts.push_back(std::move(gf));
  parts.push_back(std::move(gg));
  parts.push_back(std::move(go));
  Ref gates = cat_last(parts);
  at::Tensor gb;
  if (has_bias) gb = wrap(sum_rows(gates));
  return std::make_tuple(wrap(std::move(gates)), wrap(std::move(gcx)), gb);
}

std::tuple<at::Tensor, at::Tensor> lt_fused_gru_cell(
    const at::Tensor &input_gates, const at::Tensor &hidden_gates, const at::Tensor &hx,
    const c10::optional<at::Tensor> &input_bias, const c10::optional<at::Tensor> &hidden_bias) {
  int core = common_core({&input_gates, &hidden_gates, &hx});
  TORCH_CHECK(input_gates.dim() >= 1 && input_gates.size(-1) % 3 == 0,
              "_thnn_fused_gru_cell: gates of shape ", input_gates.sizes(),
              " do not split into 3 along the last dim");
  int64_t h = input_gates.size(-1) / 3;
  Ref ig = operand(input_gates, core), hg = operand(hidden_gates, core);
  if (input_bias && input_bias->defined()) ig = bin(LT_OP_add, ig, operand(*input_bias, core));
  if (hidden_bias && hidden_bias->defined()) hg = bin(LT_OP_add, hg, operand(*hidden_bias, core));
  Ref r = un(LT_OP_sigmoid, bin(LT_OP_add, chunk(ig.get(), 0, h), chunk(hg.get(), 0, h)));
  Ref z = un(LT_OP_sigmoid, bin(LT_OP_add, chunk(ig.get(), 1, h), chunk(hg.get(), 1, h)));
  Ref hn = chunk(hg.get(), 2, h);
  Ref n = un(LT_OP_tanh, bin(LT_OP_add, chunk(ig.get(), 2, h), bin(LT_OP_mul, r, hn)));
  Ref x = operand(hx, core);
  Ref hy = bin(LT_OP_add, n, bin(LT_OP_mul, z, bin(LT_OP_sub, x, n)));
  std::vector<Ref> ws;
  ws.push_back(std::move(r));
  ws.push_back(std::move(z));
  ws.push_back(std::move(n));
  ws.push_back(std::move(x));
  ws.push_back(std::move(hn));
  Ref work = cat_last(ws);
  return std::make_tuple(wrap(std::move(hy)), wrap(std::move(work)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
lt_fused_gru_cell_backward(const at::Tensor &grad_hy, const at::Tensor &workspace,
                           bool has_bias) {
  int core = common_core({&grad_hy, &workspace});
  int64_t h = workspace.size(-1) / 5;
  lt_tensor *ws = handle_of(workspace);
  Ref r = chunk(ws, 0, h), z = chunk(ws, 1, h), n = chunk(ws, 2, h), x = chunk(ws, 3, h),
      hn = chunk(ws, 4, h);
  Ref g = operand(grad_hy, core);
  Ref ghx = bin(LT_OP_mul, g, z);                                    /* dh/dhx = z */
  Ref gz = trace(LT_OP_sigmoid_backward, {bin(LT_OP_mul, g, bin(LT_OP_sub, x, n)).get(), z.get()});
  Ref gn = trace(LT_OP_tanh_backward, {bin(LT_OP_mul, g, one_minus(z)).get(), n.get()});
  Ref gr = trace(LT_OP_sigmoid_backward, {bin(LT_OP_mul, gn, hn).get(), r.get()});
  Ref ghn = bin(LT_OP_mul, gn, r);
  std::vector<Ref> gi, gh;
  gi.push_back(Ref::borrow(gr.get()));
  gi.push_back(Ref::borrow(gz.get()));
  gi.push_back(Ref::borrow(gn.get()));
  gh.push_back(std::move(gr));
  gh.push_back(std::move(gz));
  gh.push_back(std::move(ghn));
  Ref gig = cat_last(gi), ghg = cat_last(gh);
  at::Tensor gib, ghb;
  if (has_bias) {
    gib = wrap(sum_rows(gig));
    ghb = wrap(sum_rows(ghg));
  }
  return std::make_tuple(wrap(std::move(gig)), wrap(std::move(ghg)), wrap(std::move(ghx)), gib,
                         ghb);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "_thnn_fused_lstm_cell", TORCH_FN(lt_fused_lstm_cell));
  reg(m, "_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lt_fused_lstm_cell_backward_impl));
  reg(m, "_thnn_fused_gru_cell", TORCH_FN(lt_fused_gru_cell));
  reg(m, "_thnn_fused_gru_cell_backward", TORCH_FN(lt_fused_gru_cell_backward));
}

}  // namespace lazytpu
