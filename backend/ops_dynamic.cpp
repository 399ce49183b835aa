/*
 * backend/ops_dynamic.cpp — ops whose output shape depends on values, and
 * advanced indexing built on them.
 *
 * nonzero, masked_select and boolean-mask indexing (x[mask], x[mask] = v)
 * need the mask's values to know their shape: the mask is synced with cause
 * LT_SYNC_DYNAMIC_SHAPE (counter SyncCause::dynamic_shape, a named sync, not
 * a fallback), read to the host, and the positions are uploaded as an int64
 * index. Everything else stays on the device.
 *
 * tensor_split with a tensor of indices or sections: eager insists on a CPU
 * tensor; a device one is read on the host the same way (a named sync and a
 * host read, as torch_xla pays), then the split is the int-list one. It is
 * registered on the autograd key (aten's op is CompositeImplicitAutograd),
 * so the slices keep their gradients.
 *
 * Advanced indexing with several index tensors (ints and/or masks, a mask
 * standing for its nonzero() columns): the indexed dims are made adjacent
 * (moved to the front when they are not, as eager orders the result), the
 * indices broadcast and combined into one linear index over those dims
 * (negative indices wrapped), and the op becomes index_select (x[...]) or
 * the one-dim index_put (ops_shape.cpp) on x with those dims flattened.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/tensor_split.h>

#include <numeric>

namespace lazytpu {

at::Tensor index_put_dim(const at::Tensor &self, int64_t k, const at::Tensor &idx,
                         const at::Tensor &values, bool accumulate);   /* ops_shape.cpp */

namespace {

/* the host values of a device mask (synced as a dynamic shape) */
std::vector<uint8_t> read_mask(lt_tensor *m) {
  check(lt_sync(&m, 1, LT_SYNC_DYNAMIC_SHAPE, 1));
  std::vector<uint8_t> v((size_t)lt_shape_numel(lt_tensor_shape(m)));
  check(lt_tensor_to_host(m, v.data(), LT_BOOL));
  return v;
}

Ref upload_i64(int core, const std::vector<int64_t> &v, const std::vector<int64_t> &dims) {
  lt_shape s = to_shape(dims);
  lt_tensor *t = nullptr;
  check(lt_tensor_from_host(core, v.data(), LT_I64, &s, &t));
  return Ref(t);
}

/* coordinates of the set elements of m: one int64 vector per dim */
std::vector<Ref> mask_positions(lt_tensor *m) {
  const lt_shape *s = lt_tensor_shape(m);
  std::vector<uint8_t> v = read_mask(m);
  int nd = s->ndim;
  std::vector<std::vector<int64_t>> coords(nd);
  for (size_t i = 0; i < v.size(); i++) {
    if (!v[i]) continue;
    int64_t r = (int64_t)i;
    for (int d = nd - 1; d >= 0; d--) {
      coords[d].push_back(s->dims[d] ? r % s->dims[d] : 0);
      r = s->dims[d] ? r / s->dims[d] : 0;
    }
  }
  std::vector<Ref> out;
  int core = lt_tensor_core(m);
  for (int d = 0; d < nd; d++)
    out.push_back(upload_i64(core, coords[d], {(int64_t)coords[d].size()}));
  return out;
}

at::Tensor lt_nonzero(const at::Tensor &self) {
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  Ref m = lt_tensor_dtype(x) == LT_BOOL ? Ref::borrow(x)
                                         : trace(LT_OP_ne, {x, scalar(core, 0).get()});
  const lt_shape *s = lt_tensor_shape(m.get());
  std::vector<uint8_t> v = read_mask(m.get());
  int nd = s->ndim;
  std::vector<int64_t> flat;
  int64_t n = 0;
  for (size_t i = 0; i < v.size(); i++) {
    if (!v[i]) continue;
    int64_t r = (int64_t)i;
    std::vector<int64_t> c(nd);
    for (int d = nd - 1; d >= 0; d--) { c[d] = r % s->dims[d]; r /= s->dims[d]; }
    flat.insert(flat.end(), c.begin(), c.end());
    n++;
  }
  return wrap(upload_i64(core, flat, {n, nd}));
}

/* ------------------------------------------------------ advanced indexing */

struct Plan {
  std::vector<int64_t> perm;     /* x's dims, the indexed ones first if moved */
  int64_t k = 0;                 /* first indexed dim (after perm) */
  int64_t m = 0;                 /* number of indexed dims */
  std::vector<int64_t> B;        /* broadcast index shape */
  Ref lin;                       /* i64 [B]: linear index over the m dims */
};

/* false when an index the device cannot take is present (then: fallback) */
bool plan_index(const at::Tensor &self, const c10::List<c10::optional<at::Tensor>> &indices,
                int core, Plan *p) {
  std::vector<Ref> idx(self.dim());   /* per dim of x: its index, or null */
  int64_t d = 0;
  for (size_t i = 0; i < indices.size(); i++) {
    c10::optional<at::Tensor> t = indices.get(i);
    if (!t || !t->defined()) { d++; continue; }
    if (t->dim() > 0 && !is_lt_device_type(t->device().type()))
      t = t->to(self.device());   /* CPU indices: eager accepts them too */
    at::ScalarType st = t->scalar_type();
    if (st == at::kBool || st == at::kByte) {
      TORCH_CHECK_INDEX(d + t->dim() <= self.dim(), "too many indices for tensor of dimension ",
                        self.dim());
      for (int64_t j = 0; j < t->dim(); j++)
        TORCH_CHECK_INDEX(t->size(j) == self.size(d + j), "The shape of the mask ", t->sizes(),
                          " at index ", j, " does not match the shape of the indexed tensor ",
                          self.sizes(), " at index ", d + j);
      Ref mk = operand(*t, core);
      if (st == at::kByte) mk = cast(mk.get(), LT_BOOL);
      if (t->dim() == 0) return false;   /* x[True]: a new dim; eager */
      std::vector<Ref> pos = mask_positions(mk.get());
      for (auto &r : pos) idx[d++] = std::move(r);
    } else if (st == at::kLong || st == at::kInt) {
      TORCH_CHECK_INDEX(d < self.dim(), "too many indices for tensor of dimension ", self.dim());
      idx[d++] = operand(*t, core);
    } else {
      return false;
    }
  }
  std::vector<int64_t> P;
  for (int64_t j = 0; j < self.dim(); j++)
    if (idx[j]) P.push_back(j);
  if (P.empty()) return false;
  bool adjacent = P.back() - P.front() + 1 == (int64_t)P.size();
  p->perm.clear();
  if (adjacent) {
    for (int64_t j = 0; j < self.dim(); j++) p->perm.push_back(j);
    p->k = P.front();
  } else {
    p->perm = P;
    for (int64_t j = 0; j < self.dim(); j++)
      if (!idx[j]) p->perm.push_back(j);
    p->k = 0;
  }
  p->m = (int64_t)P.size();
  std::vector<int64_t> B;
  for (int64_t j : P) B = at::infer_size(B, dims_of(idx[j].shape()));
  p->B = B;
  /* linear index, row-major over the indexed dims, negatives wrapped */
  Ref lin;
  int64_t stride = 1;
  for (int64_t q = (int64_t)P.size() - 1; q >= 0; q--) {
    int64_t size = self.size(P[q]);
    Ref i = expand(cast(idx[P[q]].get(), LT_I64).get(), B);
    Ref zero = scalar_typed(core, 0, LT_I64), sz = scalar_typed(core, (double)size, LT_I64);
    Ref neg = trace(LT_OP_lt, {i.get(), zero.get()});
    i = trace(LT_OP_where, {neg.get(), trace(LT_OP_add, {i.get(), sz.get()}).get(), i.get()});
    if (stride != 1) i = trace(LT_OP_mul, {i.get(), scalar_typed(core, (double)stride, LT_I64).get()});
    lin = lin ? trace(LT_OP_add, {lin.get(), i.get()}) : std::move(i);
    stride *= size;
  }
  p->lin = std::move(lin);
  return true;
}

/* x permuted by the plan and its indexed dims flattened into one */
Ref flattened(lt_tensor *x, const Plan &p, std::vector<int64_t> *pdims) {
  const lt_shape *s = lt_tensor_shape(x);
  Ref xp = permute(x, p.perm);
  pdims->clear();
  for (int64_t j : p.perm) pdims->push_back(s->dims[j]);
  std::vector<int64_t> f(pdims->begin(), pdims->begin() + p.k);
  int64_t n = 1;
  for (int64_t j = p.k; j < p.k + p.m; j++) n *= (*pdims)[j];
  f.push_back(n);
  f.insert(f.end(), pdims->begin() + p.k + p.m, pdims->end());
  return reshape(xp.get(), f);
}

}  // namespace

/* x[indices] when it is not one integer index (ops_shape.cpp handles that):
 * masks and several index tensors. Returns an undefined tensor when the
 * device cannot take these indices (the caller falls back). */
at::Tensor advanced_index(const at::Tensor &self,
                          const c10::List<c10::optional<at::Tensor>> &indices) {
  int core = common_core({&self});
  Plan p;
  if (!plan_index(self, indices, core, &p)) return at::Tensor();
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> pdims;
  Ref xf = flattened(x, p, &pdims);
  int64_t nb = 1;
  for (int64_t b : p.B) nb *= b;
  Ref flat = reshape(p.lin.get(), {nb});
  lt_attrs a = attrs_of({p.k});
  Ref rows = trace(LT_OP_index_select, {xf.get(), flat.get()}, &a);
  std::vector<int64_t> out(pdims.begin(), pdims.begin() + p.k);
  out.insert(out.end(), p.B.begin(), p.B.end());
  out.insert(out.end(), pdims.begin() + p.k + p.m, pdims.end());
  return wrap(reshape(rows.get(), out));
}

/* index_put for the same cases; undefined when not taken */
at::Tensor advanced_index_put(const at::Tensor &self,
                              const c10::List<c10::optional<at::Tensor>> &indices,
                              const at::Tensor &values, bool accumulate) {
  int core = common_core({&self, &values});
  Plan p;
  if (!plan_index(self, indices, core, &p)) return at::Tensor();
  lt_tensor *x = handle_of(self);
  std::vector<int64_t> pdims;
  Ref xf = flattened(x, p, &pdims);
  at::Tensor xt = wrap(std::move(xf)), it = wrap(std::move(p.lin));
  at::Tensor r = index_put_dim(xt, p.k, it, values, accumulate);
  Ref back = reshape(handle_of(r), pdims);
  std::vector<int64_t> inv(p.perm.size());
  for (size_t j = 0; j < p.perm.size(); j++) inv[p.perm[j]] = (int64_t)j;
  return wrap_as(permute(back.get(), inv), self);
}

namespace {

at::Tensor lt_masked_select(const at::Tensor &self, const at::Tensor &mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  int core = common_core({&self, &mask});
  std::vector<int64_t> out = at::infer_size(self.sizes(), mask.sizes());
  int64_t n = std::accumulate(out.begin(), out.end(), (int64_t)1, std::multiplies<int64_t>());
  Ref x = reshape(expand(operand(self, core).get(), out).get(), {n});
  Ref m = reshape(expand(operand(mask, core).get(), out).get(), {n});
  std::vector<Ref> pos = mask_positions(m.get());
  lt_attrs a = attrs_of({0});
  return wrap(trace(LT_OP_index_select, {x.get(), pos[0].get()}, &a));
}

}  // namespace

namespace {

std::vector<at::Tensor> lt_tensor_split_t(const at::Tensor &self, const at::Tensor &ios,
                                          int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "tensor_split expected at least a 1-dimensional tensor, but got a "
              "tensor with ", self.dim(), " dims");
  TORCH_CHECK(ios.scalar_type() == at::kLong, "tensor_split expected tensor_indices_or_sections "
              "to have dtype of long, but got ", ios.scalar_type());
  TORCH_CHECK(ios.dim() == 0 || ios.dim() == 1, "tensor_split expected "
              "tensor_indices_or_sections to be a zero-dimensional or one-dimensional tensor, but "
              "got a tensor with ", ios.dim(), " dims");
  std::vector<int64_t> v((size_t)ios.numel());
  if (impl_of(ios)) {
    lt_tensor *t = handle_of(ios);
    check(lt_sync(&t, 1, LT_SYNC_DYNAMIC_SHAPE, 1));
    if (!v.empty()) check_read(lt_tensor_to_host(t, v.data(), LT_I64));
  } else {
    at::Tensor c = ios.contiguous();
    std::copy(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + v.size(), v.begin());
  }
  if (ios.dim() == 0) return at::tensor_split(self, v[0], dim);
  return at::tensor_split(self, at::IntArrayRef(v), dim);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  const char *name = "tensor_split.tensor_indices_or_sections";
  if (xla_compat())
    mirror_library("aten", c10::DispatchKey::AutogradXLA).impl(name, TORCH_FN(lt_tensor_split_t));
  m.impl(name, TORCH_FN(lt_tensor_split_t));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "nonzero", TORCH_FN(lt_nonzero));
  reg(m, "masked_select", TORCH_FN(lt_masked_select));
}

}  // namespace lazytpu
