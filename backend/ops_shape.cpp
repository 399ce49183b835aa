/*
 * backend/ops_shape.cpp — view (*_copy), scatter, concat/split and indexing
 * kernels. Functionalization turns every aten view into its *_copy op and
 * every write through a view into a *_scatter op, so these map 1:1 onto the
 * table's movement and scatter ops; the reshape-like ones (view_copy,
 * _unsafe_view, _reshape_alias_copy, squeeze/unsqueeze) become `reshape`,
 * transposes become `permute`. select/slice/diagonal_backward are scatters
 * into zeros (a native kernel is required: the defaults give wrong gradients
 * on a storage-less device).
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/InferSize.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_put_ops.h>
#include <ATen/TensorUtils.h>

namespace lazytpu {

/* "lazytpu:N" ("xla:N" in compatibility mode) for messages; tensor_impl.cpp */
std::string core_name(int core);


void cpu_fallback_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack);

/* ops_dynamic.cpp: masks and several index tensors (undefined: not taken) */
at::Tensor advanced_index(const at::Tensor &self,
                          const c10::List<c10::optional<at::Tensor>> &indices);
at::Tensor advanced_index_put(const at::Tensor &self,
                              const c10::List<c10::optional<at::Tensor>> &indices,
                              const at::Tensor &values, bool accumulate);

namespace {

int64_t wrapd(int64_t d, int64_t nd) { return c10::maybe_wrap_dim(d, nd); }

std::vector<int64_t> shape_vec(lt_tensor *x) { return dims_of(*lt_tensor_shape(x)); }

at::Tensor out(Ref r, lt_tensor *in) { return wrap(fresh(std::move(r), {in})); }
at::Tensor out_fresh(Ref r, lt_tensor *in) { return out(std::move(r), in); }

/* A view result reporting eager's strides/offset relative to self's. */
at::Tensor as_view(Ref r, const at::Tensor &self, const std::vector<int64_t> &strides,
                   int64_t offset) {
  lt_tensor *in = handle_of(self);
  at::Tensor t = wrap(fresh(std::move(r), {in}));
  static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())->set_view_layout(strides, offset);
  return t;
}

at::Tensor reshape_view(Ref r, const at::Tensor &self, c10::IntArrayRef new_sizes) {
  auto st = at::detail::computeStride(self.sizes(), self.strides(), new_sizes);
  if (!st) return out(std::move(r), handle_of(self));  /* a copy: contiguous */
  return as_view(std::move(r), self, *st, self.storage_offset());
}

/* ------------------------------------------------------------ reshapes */

at::Tensor reshape_to(const at::Tensor &self, c10::IntArrayRef size) {
  lt_tensor *x = handle_of(self);
  int64_t numel = lt_shape_numel(lt_tensor_shape(x));
  std::vector<int64_t> dims = at::infer_size(size, numel);
  return reshape_view(reshape(x, dims), self, dims);
}

at::Tensor lt_view_copy(const at::Tensor &self, c10::SymIntArrayRef size) {
  return reshape_to(self, sym_to_ints(size));
}
at::Tensor lt_reshape_alias_copy(const at::Tensor &self, c10::SymIntArrayRef size,
                                 c10::SymIntArrayRef stride) {
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> dims = at::infer_size(sym_to_ints(size), lt_shape_numel(lt_tensor_shape(x)));
  return as_view(reshape(x, dims), self, sym_to_ints(stride), self.storage_offset());
}
at::Tensor lt_unsqueeze_copy(const at::Tensor &self, int64_t dim) {
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> d = shape_vec(x), st = self.strides().vec();
  dim = wrapd(dim, (int64_t)d.size() + 1);
  int64_t ns = dim >= (int64_t)d.size() ? 1 : d[dim] * st[dim];
  d.insert(d.begin() + dim, 1);
  st.insert(st.begin() + dim, ns);
  return as_view(reshape(x, d), self, st, self.storage_offset());
}
at::Tensor lt_squeeze_copy(const at::Tensor &self) {
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> d, st, sh = shape_vec(x);
  for (size_t i = 0; i < sh.size(); i++)
    if (sh[i] != 1) { d.push_back(sh[i]); st.push_back(self.stride(i)); }
  return as_view(reshape(x, d), self, st, self.storage_offset());
}
at::Tensor lt_squeeze_copy_dim(const at::Tensor &self, int64_t dim) {
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> d = shape_vec(x);
  if (d.empty()) return out(Ref::borrow(x), x);
  dim = wrapd(dim, (int64_t)d.size());
  std::vector<int64_t> st = self.strides().vec();
  if (d[dim] == 1) { d.erase(d.begin() + dim); st.erase(st.begin() + dim); }
  return as_view(reshape(x, d), self, st, self.storage_offset());
}
at::Tensor lt_expand_copy(const at::Tensor &self, c10::SymIntArrayRef size, bool implicit) {
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> want = sym_to_ints(size), have = shape_vec(x);
  TORCH_CHECK(want.size() >= have.size(), "expand(", self.toString(), "{", c10::IntArrayRef(have),
              "}, size=", c10::IntArrayRef(want), "): the number of sizes provided (",
              want.size(), ") must be greater or equal to the number of dimensions in the "
              "tensor (", have.size(), ")");
  size_t lead = want.size() - have.size();
  std::vector<int64_t> padded(lead, 1);
  padded.insert(padded.end(), have.begin(), have.end());
  for (size_t i = 0; i < want.size(); i++) {
    if (want[i] == -1) {
      TORCH_CHECK(i >= lead, "expand: -1 is not allowed in a leading, non-existing dimension");
      want[i] = padded[i];
    }
    TORCH_CHECK(padded[i] == want[i] || padded[i] == 1,
                "The expanded size of the tensor (", want[i], ") must match the existing "
                "size (", padded[i], ") at non-singleton dimension ", i, ".  Target sizes: ",
                c10::IntArrayRef(want), ".  Tensor sizes: ", c10::IntArrayRef(have));
  }
  std::vector<int64_t> st(lead, 0);
  for (size_t i = 0; i < have.size(); i++) st.push_back(self.stride(i));
  for (size_t i = 0; i < want.size(); i++) if (padded[i] != want[i]) st[i] = 0;
  Ref r = reshape(x, padded);
  return as_view(expand(r.get(), want), self, st, self.storage_offset());
}

/* ------------------------------------------------------------ permutes */

at::Tensor lt_permute_copy(const at::Tensor &self, at::IntArrayRef dims) {
  lt_tensor *x = handle_of(self);
  int64_t nd = lt_tensor_shape(x)->ndim;
  TORCH_CHECK((int64_t)dims.size() == nd, "permute(sparse_coo): number of dimensions in the "
              "tensor input does not match the length of the desired ordering of dimensions "
              "i.e. input.dim() = ", nd, " is not equal to len(dims) = ", dims.size());
  std::vector<int64_t> p, st;
  for (int64_t d : dims) { p.push_back(wrapd(d, nd)); st.push_back(self.stride(p.back())); }
  return as_view(permute(x, p), self, st, self.storage_offset());
}
at::Tensor lt_transpose_copy(const at::Tensor &self, int64_t d0, int64_t d1) {
  lt_tensor *x = handle_of(self);
  int64_t nd = lt_tensor_shape(x)->ndim;
  if (nd == 0) return out(Ref::borrow(x), x);
  d0 = wrapd(d0, nd);
  d1 = wrapd(d1, nd);
  std::vector<int64_t> p;
  for (int64_t i = 0; i < nd; i++) p.push_back(i);
  std::swap(p[d0], p[d1]);
  std::vector<int64_t> st = self.strides().vec();
  std::swap(st[d0], st[d1]);
  return as_view(permute(x, p), self, st, self.storage_offset());
}
at::Tensor lt_t_copy(const at::Tensor &self) {
  TORCH_CHECK(self.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ",
              self.dim(), "D");
  return lt_transpose_copy(self, 0, self.dim() < 2 ? 0 : 1);
}

/* -------------------------------------------------- select/slice/diagonal */

int64_t norm_index(int64_t index, int64_t size, int64_t dim, const at::Tensor &self) {
  TORCH_CHECK_INDEX(index >= -size && index < size, "select(): index ", index,
                    " out of range for tensor of size ", self.sizes(), " at dimension ", dim);
  return index < 0 ? index + size : index;
}

lt_attrs select_attrs(const at::Tensor &self, int64_t dim, int64_t index) {
  int64_t nd = self.dim();
  TORCH_CHECK_INDEX(nd > 0, "select() cannot be applied to a 0-dim tensor.");
  dim = wrapd(dim, nd);
  return attrs_of({dim, norm_index(index, self.size(dim), dim, self)});
}

at::Tensor lt_select_copy(const at::Tensor &self, int64_t dim, int64_t index) {
  lt_attrs a = select_attrs(self, dim, index);
  std::vector<int64_t> st = self.strides().vec();
  int64_t off = self.storage_offset() + a.i[1] * st[a.i[0]];
  st.erase(st.begin() + a.i[0]);
  return as_view(trace(LT_OP_select, {handle_of(self)}, &a), self, st, off);
}

/* a slice {dim, start, end, step} of self as a view */
at::Tensor slice_view(const at::Tensor &self, const lt_attrs &a) {
  std::vector<int64_t> st = self.strides().vec();
  int64_t off = self.storage_offset() + a.i[1] * st[a.i[0]];
  st[a.i[0]] *= a.i[3];
  return as_view(trace(LT_OP_slice, {handle_of(self)}, &a), self, st, off);
}

/* {dim, start, end, step} normalised like aten::slice */
lt_attrs slice_attrs(c10::IntArrayRef sizes, int64_t dim, c10::optional<int64_t> start,
                     c10::optional<int64_t> end, int64_t step) {
  int64_t nd = (int64_t)sizes.size();
  TORCH_CHECK(nd > 0, "slice() cannot be applied to a 0-dim tensor.");
  TORCH_CHECK(step > 0, "slice step must be positive");
  dim = wrapd(dim, nd);
  int64_t n = sizes[dim];
  int64_t s = start.value_or(0), e = end.value_or(INT64_MAX);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::min(std::max<int64_t>(s, 0), n);
  e = std::min(std::max<int64_t>(e, 0), n);
  if (e < s) e = s;
  return attrs_of({dim, s, e, step});
}

c10::optional<int64_t> opt_sym(const c10::optional<c10::SymInt> &v) {
  if (!v) return c10::nullopt;
  return v->expect_int();
}

at::Tensor lt_slice_copy(const at::Tensor &self, int64_t dim, c10::optional<c10::SymInt> start,
                         c10::optional<c10::SymInt> end, c10::SymInt step) {
  lt_attrs a = slice_attrs(self.sizes(), dim, opt_sym(start), opt_sym(end), step.expect_int());
  return slice_view(self, a);
}
at::Tensor lt_narrow_copy(const at::Tensor &self, int64_t dim, c10::SymInt start,
                          c10::SymInt length) {
  int64_t s = start.expect_int(), l = length.expect_int();
  int64_t d = wrapd(dim, self.dim());
  if (s < 0) s += self.size(d);
  TORCH_CHECK(s >= 0 && l >= 0 && s + l <= self.size(d), "start (", s, ") + length (", l,
              ") exceeds dimension size (", self.size(d), ").");
  lt_attrs a = attrs_of({d, s, s + l, 1});
  return slice_view(self, a);
}

lt_attrs diag_attrs(int64_t nd, int64_t offset, int64_t d1, int64_t d2) {
  d1 = wrapd(d1, nd);
  d2 = wrapd(d2, nd);
  TORCH_CHECK(d1 != d2, "diagonal dimensions cannot be identical ", d1, ", ", d2);
  return attrs_of({offset, d1, d2});
}
at::Tensor lt_diagonal_copy(const at::Tensor &self, int64_t offset, int64_t d1, int64_t d2) {
  lt_attrs a = diag_attrs(self.dim(), offset, d1, d2);
  d1 = a.i[1];
  d2 = a.i[2];
  int64_t n = offset >= 0 ? std::min(self.size(d1), self.size(d2) - offset)
                          : std::min(self.size(d1) + offset, self.size(d2));
  int64_t off = self.storage_offset();
  if (n > 0) off += offset >= 0 ? offset * self.stride(d2) : -offset * self.stride(d1);
  std::vector<int64_t> st;
  for (int64_t i = 0; i < self.dim(); i++) if (i != d1 && i != d2) st.push_back(self.stride(i));
  st.push_back(self.stride(d1) + self.stride(d2));
  return as_view(trace(LT_OP_diagonal, {handle_of(self)}, &a), self, st, off);
}

/* self's values in storage order (its layout must be dense and
 * non-overlapping: a permutation of a contiguous one). perm[i] is the logical
 * dim stored at position i. */
std::vector<int64_t> storage_perm(const at::Tensor &self) {
  std::vector<int64_t> perm(self.dim());
  for (int64_t i = 0; i < self.dim(); i++) perm[i] = i;
  if (self.is_contiguous()) return perm;
  TORCH_CHECK(self.is_non_overlapping_and_dense(), "lazytpu: as_strided on a device tensor "
              "whose layout is not dense (sizes ", self.sizes(), ", strides ", self.strides(),
              ") is not supported; call .contiguous() first");
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return self.stride(a) > self.stride(b);
  });
  return perm;
}

lt_attrs strided_attrs(const at::Tensor &self, c10::SymIntArrayRef size,
                       c10::SymIntArrayRef stride, c10::optional<c10::SymInt> offset) {
  int64_t rel = (offset ? offset->expect_int() : self.storage_offset()) - self.storage_offset();
  TORCH_CHECK(rel >= 0, "lazytpu: as_strided: storage offset ", rel + self.storage_offset(),
              " lies before the data of the ", self.scalar_type(), self.sizes(),
              " tensor (offset ", self.storage_offset(), "): a device tensor has no storage "
              "outside its data");
  std::vector<int64_t> sz = sym_to_ints(size), st = sym_to_ints(stride);
  TORCH_CHECK(sz.size() == st.size(), "mismatch in length of strides and shape");
  std::vector<int64_t> v{(int64_t)sz.size()};
  v.insert(v.end(), sz.begin(), sz.end());
  v.insert(v.end(), st.begin(), st.end());
  v.push_back(rel);
  return attrs_vec(v);
}
at::Tensor lt_as_strided_copy(const at::Tensor &self, c10::SymIntArrayRef size,
                              c10::SymIntArrayRef stride, c10::optional<c10::SymInt> offset) {
  lt_attrs a = strided_attrs(self, size, stride, offset);
  Ref x = permute(handle_of(self), storage_perm(self));
  return as_view(trace(LT_OP_as_strided, {x.get()}, &a), self, sym_to_ints(stride),
                 offset ? offset->expect_int() : self.storage_offset());
}

/* ------------------------------------------------------------- scatters */

/* select/slice/diagonal_scatter: self's dtype, src's values cast to it
 * (eager copies src into a clone of self) */
at::Tensor scatter2(lt_op op, const at::Tensor &self, const at::Tensor &src, const lt_attrs &a) {
  int core = common_core({&self, &src});
  Ref b = operand(self, core), s = operand(src, core);
  return wrap(trace(op, {b.get(), cast(s.get(), b.dtype()).get()}, &a));
}
at::Tensor lt_select_scatter(const at::Tensor &self, const at::Tensor &src, int64_t dim,
                             int64_t index) {
  return scatter2(LT_OP_select_scatter, self, src, select_attrs(self, dim, index));
}
at::Tensor lt_slice_scatter(const at::Tensor &self, const at::Tensor &src, int64_t dim,
                            c10::optional<c10::SymInt> start, c10::optional<c10::SymInt> end,
                            c10::SymInt step) {
  return scatter2(LT_OP_slice_scatter, self, src,
                  slice_attrs(self.sizes(), dim, opt_sym(start), opt_sym(end), step.expect_int()));
}
at::Tensor lt_diagonal_scatter(const at::Tensor &self, const at::Tensor &src, int64_t offset,
                               int64_t d1, int64_t d2) {
  return scatter2(LT_OP_diagonal_scatter, self, src, diag_attrs(self.dim(), offset, d1, d2));
}
at::Tensor lt_as_strided_scatter(const at::Tensor &self, const at::Tensor &src,
                                 c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                                 c10::optional<c10::SymInt> offset) {
  lt_attrs a = strided_attrs(self, size, stride, offset);
  for (size_t j = 0; j < size.size(); j++)   /* eager's internal-overlap check */
    TORCH_CHECK(stride[j] != 0 || size[j] <= 1, "unsupported operation: more than one element "
                "of the written-to tensor refers to a single memory location. Please clone() "
                "the tensor before performing the operation.");
  int core = common_core({&self, &src});
  std::vector<int64_t> perm = storage_perm(self), inv(perm.size());
  for (size_t i = 0; i < perm.size(); i++) inv[perm[i]] = (int64_t)i;
  Ref b = operand(self, core), s = operand(src, core);
  Ref bs = permute(b.get(), perm);
  Ref r = trace(LT_OP_as_strided_scatter, {bs.get(), cast(s.get(), b.dtype()).get()}, &a);
  return wrap(fresh(permute(r.get(), inv), {b.get()}));
}

/* grad scattered into zeros of input_sizes */
at::Tensor scatter_zeros(lt_op op, const at::Tensor &grad, c10::SymIntArrayRef input_sizes,
                         const lt_attrs &a) {
  lt_tensor *g = handle_of(grad);
  Ref z = zeros(lt_tensor_core(g), sym_to_ints(input_sizes), lt_tensor_dtype(g));
  return wrap(trace(op, {z.get(), g}, &a));
}
at::Tensor lt_select_backward(const at::Tensor &grad, c10::SymIntArrayRef input_sizes,
                              int64_t dim, c10::SymInt index_sym) {
  int64_t index = index_sym.expect_int();
  std::vector<int64_t> sz = sym_to_ints(input_sizes);
  int64_t d = wrapd(dim, (int64_t)sz.size());
  int64_t idx = index < 0 ? index + sz[d] : index;
  return scatter_zeros(LT_OP_select_scatter, grad, input_sizes, attrs_of({d, idx}));
}
at::Tensor lt_slice_backward(const at::Tensor &grad, c10::SymIntArrayRef input_sizes,
                             int64_t dim, c10::SymInt start, c10::SymInt end, c10::SymInt step) {
  std::vector<int64_t> sz = sym_to_ints(input_sizes);
  return scatter_zeros(LT_OP_slice_scatter, grad, input_sizes,
                       slice_attrs(sz, dim, start.expect_int(), end.expect_int(),
                                   step.expect_int()));
}
at::Tensor lt_diagonal_backward(const at::Tensor &grad, c10::SymIntArrayRef input_sizes,
                                int64_t offset, int64_t d1, int64_t d2) {
  return scatter_zeros(LT_OP_diagonal_scatter, grad, input_sizes,
                       diag_attrs((int64_t)input_sizes.size(), offset, d1, d2));
}

/* ------------------------------------------------------- cat/stack/split */

at::Tensor cat_refs(std::vector<Ref> &parts, int64_t dim) {
  std::vector<lt_tensor *> in;
  for (auto &p : parts) in.push_back(p.get());
  TORCH_CHECK(!in.empty(), "torch.cat(): expected a non-empty list of Tensors");
  if (in.size() == 1) return out(Ref::borrow(in[0]), in[0]);
  lt_attrs a = attrs_of({dim});
  return wrap(trace_n(LT_OP_cat, in, &a));
}

at::Tensor lt_cat(const at::ITensorListRef &tensors, int64_t dim) {
  std::vector<at::Tensor> ts;
  for (const at::Tensor &t : tensors) ts.push_back(t);
  TORCH_CHECK(!ts.empty(), "torch.cat(): expected a non-empty list of Tensors");
  int core = -1;
  for (auto &t : ts) {
    LtTensorImpl *i = impl_of(t);
    if (i) { core = lt_tensor_core(i->handle()); break; }
  }
  int64_t nd = -1;
  for (auto &t : ts)
    if (!(t.dim() == 1 && t.size(0) == 0)) { nd = t.dim(); break; }  /* legacy empties */
  if (nd < 0) return wrap(fresh(Ref::borrow(handle_of(ts[0])), {handle_of(ts[0])}));
  TORCH_CHECK(nd > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
  dim = wrapd(dim, nd);
  std::vector<Ref> parts;
  for (auto &t : ts) {
    if (t.dim() == 1 && t.size(0) == 0 && nd != 1) continue;
    TORCH_CHECK(impl_of(t), "Expected all tensors to be on the same device, but found at "
                "least two devices, ", core_name(core), " and ", t.device().str(), "!");
    parts.push_back(operand(t, core));
  }
  return cat_refs(parts, dim);
}

at::Tensor lt_stack(at::TensorList tensors, int64_t dim) {
  TORCH_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  int64_t nd = tensors[0].dim();
  dim = wrapd(dim, nd + 1);
  std::vector<Ref> parts;
  int core = -1;
  for (size_t i = 0; i < tensors.size(); i++) {
    const at::Tensor &t = tensors[i];
    TORCH_CHECK(t.sizes() == tensors[0].sizes(), "stack expects each tensor to be equal size, "
                "but got ", tensors[0].sizes(), " at entry 0 and ", t.sizes(), " at entry ", i);
    lt_tensor *h = handle_of(t);
    if (core < 0) core = lt_tensor_core(h);
    std::vector<int64_t> d = shape_vec(h);
    d.insert(d.begin() + dim, 1);
    parts.push_back(reshape(h, d));
  }
  return cat_refs(parts, dim);
}

std::vector<at::Tensor> split_sizes(const at::Tensor &self, std::vector<int64_t> sizes,
                                    int64_t dim) {
  lt_tensor *x = handle_of(self);
  dim = wrapd(dim, self.dim());
  std::vector<at::Tensor> outs;
  int64_t start = 0;
  for (int64_t s : sizes) {
    lt_attrs a = attrs_of({dim, start, start + s, 1});
    outs.push_back(slice_view(self, a));
    start += s;
  }
  TORCH_CHECK(start == self.size(dim), "split_with_sizes expects split_sizes to sum exactly to ",
              self.size(dim), " (input tensor's size at dimension ", dim, "), but got "
              "split_sizes=", c10::IntArrayRef(sizes));
  return outs;
}
std::vector<at::Tensor> lt_split(const at::Tensor &self, int64_t split_size, int64_t dim) {
  TORCH_CHECK(self.dim() != 0, "split expects at least a 1-dimensional tensor");
  TORCH_CHECK(split_size >= 0, "split expects split_size be non-negative, but got split_size=",
              split_size);
  int64_t n = self.size(wrapd(dim, self.dim()));
  std::vector<int64_t> sizes;
  if (split_size == 0) { if (n == 0) sizes.push_back(0); }
  else for (int64_t s = 0; s < n || (n == 0 && sizes.empty()); s += split_size)
    sizes.push_back(std::min(split_size, n - s));
  return split_sizes(self, sizes, dim);
}
std::vector<at::Tensor> lt_split_with_sizes(const at::Tensor &self, at::IntArrayRef sizes,
                                            int64_t dim) {
  return split_sizes(self, sizes.vec(), dim);
}
std::vector<at::Tensor> lt_unbind(const at::Tensor &self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "Dimension specified as 0 but tensor has no dimensions");
  dim = wrapd(dim, self.dim());
  lt_tensor *x = handle_of(self);
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < self.size(dim); i++) {
    outs.push_back(lt_select_copy(self, dim, i));
  }
  return outs;
}

/* ------------------------------------------------------------- indexing */

void check_index_dtype(const at::Tensor &idx, const char *op) {
  TORCH_CHECK_INDEX(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt, op,
                    "(): Expected dtype int32/int64 for index but got: ", idx.scalar_type());
}

at::Tensor lt_index_select(const at::Tensor &self, int64_t dim, const at::Tensor &index) {
  check_index_dtype(index, "index_select");
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  int core = common_core({&self, &index});
  Ref x = operand(self, core), i = operand(index, core);
  if (i.ndim() == 0) i = reshape(i.get(), {1});
  lt_attrs a = attrs_of({wrapd(dim, std::max<int64_t>(self.dim(), 1))});
  /* eager's check for an empty multi-dim self (1-dim: the index check) */
  TORCH_CHECK(index.numel() == 0 || self.dim() <= 1 || self.size(a.i[0]) > 0,
              "index_select(): self indexing axis dim should be positive");
  return wrap(trace(LT_OP_index_select, {x.get(), i.get()}, &a));
}
/* flip: each listed dim read through a reversed index (index_select) */
at::Tensor lt_flip(const at::Tensor &self, at::IntArrayRef dims) {
  lt_tensor *x = handle_of(self);
  int nd = lt_tensor_shape(x)->ndim;
  std::vector<bool> seen(std::max(nd, 1), false);
  Ref r = Ref::borrow(x);
  for (int64_t d0 : dims) {
    int64_t d = c10::maybe_wrap_dim(d0, std::max(nd, 1));
    TORCH_CHECK(!seen[d], "dims has duplicates, original flip dims size=", dims.size());
    seen[d] = true;
    if (nd == 0) continue;
    int64_t n = lt_tensor_shape(x)->dims[d];
    if (n <= 1) continue;
    int core = lt_tensor_core(x);
    Ref start = scalar_typed(core, (double)(n - 1), LT_I64);
    Ref step = scalar_typed(core, -1.0, LT_I64);
    lt_attrs ai = attrs_of({(int64_t)LT_I64, n});
    Ref idx = trace(LT_OP_arange, {start.get(), step.get()}, &ai);
    lt_attrs a = attrs_of({d});
    r = trace(LT_OP_index_select, {r.get(), idx.get()}, &a);
  }
  return wrap(fresh(std::move(r), {x}));
}

at::Tensor lt_gather(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                     bool sparse_grad) {
  /* other index dtypes: eager's own checks (and its empty-index cases) */
  if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)
    throw_unsupported("gather: index dtype");
  int core = common_core({&self, &index});
  Ref x = operand(self, core), i = cast(operand(index, core).get(), LT_I64);
  lt_attrs a = attrs_of({wrapd(dim, std::max<int64_t>(self.dim(), 1))});
  return wrap(trace(LT_OP_gather, {x.get(), i.get()}, &a));
}
at::Tensor lt_scatter_add(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                          const at::Tensor &src) {
  if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)
    throw_unsupported("scatter: index dtype");
  int core = common_core({&self, &index, &src});
  Ref x = operand(self, core), i = cast(operand(index, core).get(), LT_I64), s = operand(src, core);
  lt_attrs a = attrs_of({wrapd(dim, std::max<int64_t>(self.dim(), 1))});
  return wrap(trace(LT_OP_scatter_add, {x.get(), i.get(), s.get()}, &a));
}

/* scatter (overwrite): each index position takes its source value, in
 * index order (with duplicate indices the last one wins, like eager's CPU
 * loop). */
at::Tensor scatter_overwrite(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                             Ref src) {
  if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)
    throw_unsupported("scatter: index dtype");
  int core = common_core({&self, &index});
  Ref x = operand(self, core), i = cast(operand(index, core).get(), LT_I64);
  int64_t d = wrapd(dim, std::max<int64_t>(self.dim(), 1));
  lt_attrs a = attrs_of({d});
  return wrap(trace(LT_OP_scatter, {x.get(), i.get(), cast(src.get(), x.dtype()).get()}, &a));
}
at::Tensor lt_scatter_src(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                          const at::Tensor &src) {
  TORCH_CHECK(self.scalar_type() == src.scalar_type(),
              "scatter(): Expected self.dtype to be equal to src.dtype");
  int core = common_core({&self, &index, &src});
  Ref s = operand(src, core);
  /* only the index-shaped corner of src takes part */
  std::vector<int64_t> id = index.sizes().vec(), sd = dims_of(s.shape());
  for (size_t k = 0; k < id.size() && k < sd.size(); k++)
    if (sd[k] != id[k]) {
      lt_attrs a = attrs_of({(int64_t)k, 0, id[k], 1});
      s = trace(LT_OP_slice, {s.get()}, &a);
    }
  return scatter_overwrite(self, dim, index, std::move(s));
}
at::Tensor lt_scatter_value(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                            const c10::Scalar &value) {
  int core = common_core({&self, &index});
  return scatter_overwrite(self, dim, index,
                           full(core, index.sizes().vec(), value.toDouble(),
                                to_lt_dtype(self.scalar_type())));
}

/* index_add: the index vector broadcast along `dim` of source, scatter_add */
at::Tensor lt_index_add(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                        const at::Tensor &source, const c10::Scalar &alpha) {
  check_index_dtype(index, "index_add");
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "index_add_(): self (",
              self.scalar_type(), ") and source (", source.scalar_type(),
              ") must have the same scalar type");
  int core = common_core({&self, &index, &source});
  Ref x = operand(self, core), i = operand(index, core), s = operand(source, core);
  int64_t nd = std::max<int64_t>(self.dim(), 1);
  int64_t d = wrapd(dim, nd);
  TORCH_CHECK_INDEX(i.ndim() <= 1, "index_add_(): Index is supposed to be a vector");
  /* 0-dim self and source count as [1] */
  if (x.ndim() == 0) x = reshape(x.get(), {1});
  if (s.ndim() == 0) s = reshape(s.get(), {1});
  TORCH_CHECK(s.ndim() == x.ndim(), "index_add_(): Source and destination tensors must "
              "have the same number of dimensions, got ", source.dim(), " and ", self.dim());
  std::vector<int64_t> sd = dims_of(s.shape());
  int64_t ni = lt_shape_numel(&i.shape());
  TORCH_CHECK_INDEX(sd[d] == ni, "index_add_(): Number of indices (", ni, ") should be equal "
                    "to source.size(dim) (", sd[d], ")");
  std::vector<int64_t> ishape(sd.size(), 1);
  ishape[d] = ni;
  Ref ie = expand(reshape(cast(i.get(), LT_I64).get(), ishape).get(), sd);
  if (!(alpha.toDouble() == 1.0)) s = mul_scalar(s.get(), alpha);
  lt_attrs a = attrs_of({d});
  Ref r = trace(LT_OP_scatter_add, {x.get(), ie.get(), cast(s.get(), x.dtype()).get()}, &a);
  return wrap(reshape(r.get(), self.sizes().vec()));
}

/* ---------------------------------------------- advanced indexing (x[idx]) */

/* The dim of the only index when indices are one integer tensor (the others
 * None), else -1 (bool masks, several indices: CPU fallback). */
int64_t single_int_index(const c10::List<c10::optional<at::Tensor>> &indices) {
  int64_t dim = -1;
  for (size_t k = 0; k < indices.size(); k++) {
    c10::optional<at::Tensor> t = indices.get(k);
    if (!t || !t->defined()) continue;
    if (dim >= 0) return -1;
    if (t->scalar_type() != at::kLong && t->scalar_type() != at::kInt) return -1;
    dim = (int64_t)k;
  }
  return dim;
}

/* x[idx] counts negative indices from the end, as eager does (index_select
 * and gather do not): -size <= idx < 0 ? idx + size : idx. An index out of
 * range either way is left as given, for the kernel's check to name it. */
Ref wrap_negative(Ref i, int64_t size, int core) {
  Ref zero = scalar(core, c10::Scalar((int64_t)0)), n = scalar(core, c10::Scalar(size));
  Ref mn = scalar(core, c10::Scalar(-size));
  Ref neg = trace(LT_OP_logical_and, {trace(LT_OP_lt, {i.get(), zero.get()}).get(),
                                      trace(LT_OP_ge, {i.get(), mn.get()}).get()});
  Ref up = trace(LT_OP_add, {i.get(), n.get()});
  return trace(LT_OP_where, {neg.get(), up.get(), i.get()});
}

/* The one index tensor of x[idx] / x[idx] = v on self's device: eager takes
 * it on the CPU too for a tensor of another device (index, index_put:
 * "indices should be either on cpu or on the same device as the indexed
 * tensor"; Hugging Face's BEiT indexes its bias table with a CPU index);
 * plan_index (ops_dynamic.cpp) does the same for several indices. */
at::Tensor index_on_device(const at::Tensor &self, const at::Tensor &idx) {
  if (idx.dim() > 0 && !is_lt_device_type(idx.device().type())) return idx.to(self.device());
  return idx;
}

at::Tensor lt_index(const at::Tensor &self, const c10::List<c10::optional<at::Tensor>> &indices) {
  int64_t k = single_int_index(indices);
  if (k < 0 || k >= self.dim()) {
    at::Tensor r = advanced_index(self, indices);   /* masks, several indices */
    if (r.defined()) return r;
    return at::native::call_fallback_fn<&cpu_fallback_boxed, at::_ops::index_Tensor>::call(
        self, indices);
  }
  at::Tensor idx = index_on_device(self, *indices.get(k));
  int core = common_core({&self, &idx});
  Ref x = operand(self, core), i = operand(idx, core);
  i = wrap_negative(std::move(i), self.size(k), core);
  std::vector<int64_t> idims = dims_of(i.shape());
  Ref flat = reshape(i.get(), {lt_shape_numel(&i.shape())});
  lt_attrs a = attrs_of({k});
  Ref rows = trace(LT_OP_index_select, {x.get(), flat.get()}, &a);
  std::vector<int64_t> out(self.sizes().begin(), self.sizes().begin() + k);
  out.insert(out.end(), idims.begin(), idims.end());
  out.insert(out.end(), self.sizes().begin() + k + 1, self.sizes().end());
  return wrap(reshape(rows.get(), out));
}

/* roll: per (shift, dim), the last `shift` entries moved to the front (a cat
 * of two slices); no dims = over the flattened tensor */
at::Tensor lt_roll(const at::Tensor &self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  lt_tensor *x = handle_of(self);
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                ", dims:0");
    int64_t n = self.numel();
    Ref f = reshape(x, {n});
    at::Tensor flat = wrap(std::move(f));
    at::Tensor r = lt_roll(flat, shifts, {0});
    return wrap(reshape(handle_of(r), self.sizes().vec()));
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ",
              shifts.size(), ", dims:", dims.size());
  Ref r = Ref::borrow(x);
  for (size_t k = 0; k < dims.size(); k++) {
    int64_t d = c10::maybe_wrap_dim(dims[k], std::max<int64_t>(self.dim(), 1));
    if (self.dim() == 0) continue;
    int64_t n = self.size(d);
    if (n == 0) continue;
    int64_t sh = ((shifts[k] % n) + n) % n;
    if (sh == 0) continue;
    lt_attrs tail = attrs_of({d, n - sh, n, 1}), head = attrs_of({d, 0, n - sh, 1});
    Ref a = trace(LT_OP_slice, {r.get()}, &tail), b = trace(LT_OP_slice, {r.get()}, &head);
    lt_attrs ad = attrs_of({d});
    r = trace_n(LT_OP_cat, {a.get(), b.get()}, &ad);
  }
  return wrap(fresh(std::move(r), {x}));
}

/* take(x, idx) = x.flatten()[idx] (negative indices count from the end) */
at::Tensor lt_take(const at::Tensor &self, const at::Tensor &index) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, "
              "but got ", index.scalar_type());
  int core = common_core({&self, &index});
  int64_t n = self.numel();
  TORCH_CHECK_INDEX(n > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
  if (index.numel() == 0) return wrap(zeros(core, index.sizes().vec(), to_lt_dtype(self.scalar_type())));
  Ref x = reshape(operand(self, core).get(), {n});
  Ref i = wrap_negative(reshape(operand(index, core).get(), {index.numel()}), n, core);
  lt_attrs a = attrs_of({0});
  return wrap(reshape(trace(LT_OP_index_select, {x.get(), i.get()}, &a).get(), index.sizes().vec()));
}

/* put(x, idx, src, accumulate): x.flatten()[idx] = / += src.flatten() */
at::Tensor lt_put(const at::Tensor &self, const at::Tensor &index, const at::Tensor &source,
                  bool accumulate) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, "
              "but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected "
              "to have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(index.numel() == source.numel(), "put_(): Expected source and index to have the "
              "same number of elements, but got source.numel() = ", source.numel(),
              ", index.numel() = ", index.numel());
  int core = common_core({&self, &index, &source});
  int64_t n = self.numel(), k = index.numel();
  Ref x = operand(self, core);
  if (k == 0) return wrap(fresh(std::move(x), {handle_of(self)}));
  TORCH_CHECK_INDEX(n > 0, "put_(): Tried to put elements into an empty tensor");
  Ref xf = reshape(x.get(), {n});
  Ref i = wrap_negative(reshape(operand(index, core).get(), {k}), n, core);
  Ref s = reshape(operand(source, core).get(), {k});
  lt_attrs a = attrs_of({0});
  Ref r = trace(accumulate ? LT_OP_scatter_add : LT_OP_scatter, {xf.get(), i.get(), s.get()}, &a);
  return wrap_as(reshape(r.get(), self.sizes().vec()), self);
}

}  // namespace

/* self with rows idx (along dim k) replaced by / accumulated with values */
at::Tensor index_put_dim(const at::Tensor &self, int64_t k, const at::Tensor &idx,
                         const at::Tensor &values, bool accumulate) {
  int core = common_core({&self, &idx, &values});
  Ref x = operand(self, core), i = operand(idx, core), v = operand(values, core);
  i = wrap_negative(std::move(i), self.size(k), core);
  int64_t n = lt_shape_numel(&i.shape());
  std::vector<int64_t> whole(self.sizes().begin(), self.sizes().begin() + k);
  std::vector<int64_t> idims = dims_of(i.shape());
  whole.insert(whole.end(), idims.begin(), idims.end());
  whole.insert(whole.end(), self.sizes().begin() + k + 1, self.sizes().end());
  std::vector<int64_t> flat(self.sizes().begin(), self.sizes().begin() + k);
  flat.push_back(n);
  flat.insert(flat.end(), self.sizes().begin() + k + 1, self.sizes().end());
  /* values broadcast to the indexed shape, then the index dims flattened */
  std::vector<int64_t> vd = dims_of(v.shape());
  if (vd.size() < whole.size()) {
    std::vector<int64_t> pad(whole.size() - vd.size(), 1);
    pad.insert(pad.end(), vd.begin(), vd.end());
    v = reshape(v.get(), pad);
  }
  v = reshape(expand(cast(v.get(), x.dtype()).get(), whole).get(), flat);
  std::vector<int64_t> ishape(flat.size(), 1);
  ishape[k] = n;
  Ref ie = expand(reshape(cast(i.get(), LT_I64).get(), ishape).get(), flat);
  lt_attrs a = attrs_of({k});
  /* duplicate indices: accumulated, or the last one wins (eager's CPU order) */
  return wrap_as(trace(accumulate ? LT_OP_scatter_add : LT_OP_scatter, {x.get(), ie.get(), v.get()},
                       &a), self);
}

namespace {

/* eager's dtype rule for index_put: the values' dtype must be self's,
 * except when the op is a masked fill (one bool or byte mask, one value,
 * no accumulation: eager runs masked_fill_, which casts; a program doing
 * x[mask] = torch.tensor(v) on the CPU does that) */
void check_index_put_dtypes(const at::Tensor &self,
                            const c10::List<c10::optional<at::Tensor>> &indices,
                            const at::Tensor &values, bool accumulate) {
  if (self.scalar_type() == values.scalar_type()) return;
  int masks = 0, others = 0;
  for (size_t k = 0; k < indices.size(); k++) {
    c10::optional<at::Tensor> t = indices.get(k);
    if (!t || !t->defined()) continue;
    if (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte) masks++;
    else others++;
  }
  if (!accumulate && values.numel() == 1 && masks == 1 && others == 0) return;
  TORCH_CHECK(false, "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
}

at::Tensor lt_index_put(const at::Tensor &self, const c10::List<c10::optional<at::Tensor>> &indices,
                        const at::Tensor &values, bool accumulate) {
  check_index_put_dtypes(self, indices, values, accumulate);
  int64_t k = single_int_index(indices);
  if (k < 0 || k >= self.dim()) {
    at::Tensor r = advanced_index_put(self, indices, values, accumulate);
    if (r.defined()) return r;
    return at::native::call_fallback_fn<&cpu_fallback_boxed, at::_ops::index_put>::call(
        self, indices, values, accumulate);
  }
  return index_put_dim(self, k, index_on_device(self, *indices.get(k)), values, accumulate);
}
at::Tensor lt_index_put_impl(const at::Tensor &self,
                             const c10::List<c10::optional<at::Tensor>> &indices,
                             const at::Tensor &values, bool accumulate, bool unsafe) {
  check_index_put_dtypes(self, indices, values, accumulate);
  int64_t k = single_int_index(indices);
  if (k < 0 || k >= self.dim()) {
    at::Tensor r = advanced_index_put(self, indices, values, accumulate);
    if (r.defined()) return r;
    return at::native::call_fallback_fn<&cpu_fallback_boxed, at::_ops::_index_put_impl>::call(
        self, indices, values, accumulate, unsafe);
  }
  return index_put_dim(self, k, index_on_device(self, *indices.get(k)), values, accumulate);
}
at::Tensor &lt_index_put_impl_(at::Tensor &self,
                               const c10::List<c10::optional<at::Tensor>> &indices,
                               const at::Tensor &values, bool accumulate, bool unsafe) {
  at::Tensor r = lt_index_put_impl(self, indices, values, accumulate, unsafe);
  assign_value(self, handle_of(r));
  return self;
}

/* index_copy / index_fill: rows `index` (a vector, or a scalar) along dim
 * replaced by source's rows / by a value (index_put along one dim) */
at::Tensor lt_index_copy(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                         const at::Tensor &source) {
  check_index_dtype(index, "index_copy");
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_copy_(): Index should have dimension 1 or 0 (got ",
                    index.dim(), ")");
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "index_copy_(): self and source "
              "expected to have the same dtype, but got (self) ", self.scalar_type(),
              " and (source) ", source.scalar_type());
  if (self.dim() == 0) throw_unsupported("index_copy of a 0-dim tensor");
  int64_t d = wrapd(dim, self.dim());
  at::Tensor idx = index.dim() == 0 ? index.reshape({1}) : index;
  at::Tensor src = source.dim() == self.dim() ? source : source.unsqueeze(d);
  TORCH_CHECK_INDEX(src.dim() == self.dim() && src.size(d) == idx.numel(), "index_copy_(): "
                    "Source/destination tensor must have same slice shapes and the number of "
                    "indices must match the source size along dim");
  return index_put_dim(self, d, idx, src, false);
}
at::Tensor lt_index_fill(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                         const c10::Scalar &value) {
  check_index_dtype(index, "index_fill");
  if (self.dim() == 0) throw_unsupported("index_fill of a 0-dim tensor");
  int64_t d = wrapd(dim, self.dim());
  at::Tensor idx = index.dim() == 0 ? index.reshape({1}) : index;
  lt_tensor *x = handle_of(self);
  at::Tensor v = wrap(full(lt_tensor_core(x), {}, value.toDouble(), lt_tensor_dtype(x)));
  return index_put_dim(self, d, idx, v, false);
}
at::Tensor lt_index_fill_t(const at::Tensor &self, int64_t dim, const at::Tensor &index,
                           const at::Tensor &value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but "
              "got tensor with ", value.dim(), " dimension(s).");
  if (self.dim() == 0) throw_unsupported("index_fill of a 0-dim tensor");
  check_index_dtype(index, "index_fill");
  int64_t d = wrapd(dim, self.dim());
  at::Tensor idx = index.dim() == 0 ? index.reshape({1}) : index;
  return index_put_dim(self, d, idx, value, false);
}

/* repeat: [s0, s1] x [r0, r1] -> view [1, s0, 1, s1] expanded to [r0, s0, r1, s1] */
at::Tensor lt_repeat(const at::Tensor &self, c10::SymIntArrayRef repeats) {
  std::vector<int64_t> r = sym_to_ints(repeats);
  TORCH_CHECK(r.size() >= (size_t)self.dim(), "Number of dimensions of repeat dims can not be "
              "smaller than number of dimensions of tensor");
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> s(r.size() - self.dim(), 1);
  for (int64_t d : self.sizes()) s.push_back(d);
  std::vector<int64_t> inter, big, out;
  for (size_t i = 0; i < r.size(); i++) {
    inter.push_back(1); inter.push_back(s[i]);
    big.push_back(r[i]); big.push_back(s[i]);
    out.push_back(r[i] * s[i]);
  }
  Ref v = reshape(x, inter);
  Ref e = expand(v.get(), big);
  return out_fresh(reshape(e.get(), out), x);
}

at::Tensor lt_embedding(const at::Tensor &weight, const at::Tensor &indices,
                        int64_t padding_idx, bool scale_grad_by_freq, bool sparse) {
  TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  check_index_dtype(indices, "embedding");
  int core = common_core({&weight, &indices});
  Ref w = operand(weight, core), i = operand(indices, core);
  std::vector<int64_t> idims = dims_of(i.shape());
  Ref flat = reshape(i.get(), {lt_shape_numel(&i.shape())});
  lt_attrs a = attrs_of({0});
  Ref rows = trace(LT_OP_index_select, {w.get(), flat.get()}, &a);
  idims.push_back(weight.size(1));
  return wrap(reshape(rows.get(), idims));
}
at::Tensor lt_embedding_dense_backward(const at::Tensor &grad, const at::Tensor &indices,
                                       c10::SymInt num_weights, c10::SymInt padding_idx_sym,
                                       bool scale_grad_by_freq) {
  int64_t padding_idx = padding_idx_sym.expect_int();
  TORCH_CHECK(!scale_grad_by_freq, "lazytpu: embedding(scale_grad_by_freq=True) is not "
              "supported on the device");
  int core = common_core({&grad, &indices});
  Ref g = operand(grad, core), i = operand(indices, core);
  lt_attrs a = attrs_of({num_weights.expect_int(), padding_idx});
  return wrap(trace(LT_OP_embedding_backward, {g.get(), i.get()}, &a));
}

/* complex <-> (re, im) pairs: the table's bitcasts (a layout like eager's:
 * the pairs' strides are the complex strides doubled, plus 1) */
at::Tensor lt_view_as_real_copy(const at::Tensor &self) {
  TORCH_CHECK(self.is_complex(), "view_as_real is only supported for complex tensors");
  return wrap(trace(LT_OP_view_as_real, {handle_of(self)}));
}
at::Tensor lt_view_as_complex_copy(const at::Tensor &self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble ||
              self.scalar_type() == at::kHalf,
              "view_as_complex is only supported for half, float and double tensors, but got "
              "a tensor of scalar type: ", self.scalar_type());
  TORCH_CHECK(self.dim() > 0 && self.size(-1) == 2, "Tensor must have a last dimension of "
              "size 2");
  return wrap(trace(LT_OP_view_as_complex, {handle_of(self)}));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "view_as_real_copy", TORCH_FN(lt_view_as_real_copy));
  reg(m, "view_as_complex_copy", TORCH_FN(lt_view_as_complex_copy));
  reg(m, "view_copy", TORCH_FN(lt_view_copy));
  reg(m, "_reshape_alias_copy", TORCH_FN(lt_reshape_alias_copy));
  reg(m, "_unsafe_view", TORCH_FN(lt_view_copy));
  reg(m, "unsqueeze_copy", TORCH_FN(lt_unsqueeze_copy));
  reg(m, "squeeze_copy", TORCH_FN(lt_squeeze_copy));
  reg(m, "squeeze_copy.dim", TORCH_FN(lt_squeeze_copy_dim));
  reg(m, "expand_copy", TORCH_FN(lt_expand_copy));
  reg(m, "permute_copy", TORCH_FN(lt_permute_copy));
  reg(m, "transpose_copy.int", TORCH_FN(lt_transpose_copy));
  reg(m, "t_copy", TORCH_FN(lt_t_copy));
  reg(m, "select_copy.int", TORCH_FN(lt_select_copy));
  reg(m, "slice_copy.Tensor", TORCH_FN(lt_slice_copy));
  reg(m, "narrow_copy", TORCH_FN(lt_narrow_copy));
  reg(m, "diagonal_copy", TORCH_FN(lt_diagonal_copy));
  reg(m, "as_strided_copy", TORCH_FN(lt_as_strided_copy));
  reg(m, "select_scatter", TORCH_FN(lt_select_scatter));
  reg(m, "slice_scatter", TORCH_FN(lt_slice_scatter));
  reg(m, "diagonal_scatter", TORCH_FN(lt_diagonal_scatter));
  reg(m, "as_strided_scatter", TORCH_FN(lt_as_strided_scatter));
  reg(m, "select_backward", TORCH_FN(lt_select_backward));
  reg(m, "slice_backward", TORCH_FN(lt_slice_backward));
  reg(m, "diagonal_backward", TORCH_FN(lt_diagonal_backward));
  reg(m, "cat", TORCH_FN(lt_cat));
  reg(m, "stack", TORCH_FN(lt_stack));
  reg(m, "split_copy.Tensor", TORCH_FN(lt_split));
  reg(m, "unsafe_split.Tensor", TORCH_FN(lt_split));
  reg(m, "split_with_sizes_copy", TORCH_FN(lt_split_with_sizes));
  reg(m, "unsafe_split_with_sizes", TORCH_FN(lt_split_with_sizes));
  reg(m, "unbind_copy.int", TORCH_FN(lt_unbind));
  reg(m, "index_select", TORCH_FN(lt_index_select));
  reg(m, "gather", TORCH_FN(lt_gather));
  reg(m, "scatter_add", TORCH_FN(lt_scatter_add));
  reg(m, "scatter.src", TORCH_FN(lt_scatter_src));
  reg(m, "scatter.value", TORCH_FN(lt_scatter_value));
  reg(m, "index_add", TORCH_FN(lt_index_add));
  reg(m, "index_copy", TORCH_FN(lt_index_copy));
  reg(m, "index_fill.int_Scalar", TORCH_FN(lt_index_fill));
  reg(m, "index_fill.int_Tensor", TORCH_FN(lt_index_fill_t));
  reg(m, "embedding", TORCH_FN(lt_embedding));
  reg(m, "index.Tensor", TORCH_FN(lt_index));
  reg(m, "index_put", TORCH_FN(lt_index_put));
  reg(m, "_index_put_impl", TORCH_FN(lt_index_put_impl));
  reg(m, "_index_put_impl_", TORCH_FN(lt_index_put_impl_));
  reg(m, "repeat", TORCH_FN(lt_repeat));
  reg(m, "embedding_dense_backward", TORCH_FN(lt_embedding_dense_backward));
  reg(m, "flip", TORCH_FN(lt_flip));
  reg(m, "take", TORCH_FN(lt_take));
  reg(m, "roll", TORCH_FN(lt_roll));
  reg(m, "put", TORCH_FN(lt_put));
}

}  // namespace lazytpu
