/*
 * backend/functionalize_util.h — what the unboxed Functionalize kernels
 * (functionalize_fast.cpp, functionalize_inplace.cpp) do with a functional
 * tensor argument, as PyTorch's boxed fallback does it.
 */
#ifndef LT_FUNCTIONALIZE_UTIL_H
#define LT_FUNCTIONALIZE_UTIL_H

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>

namespace lazytpu {

/* t is a functional wrapper (has the Functionalize key). */
inline bool is_functional(const at::Tensor &t) {
  return t.defined() && t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Functionalize);
}

/* The value below functionalization of a functional tensor t, its wrapper
 * synced first (pending updates of its storage applied). */
inline const at::Tensor &synced_value(const at::Tensor &t) {
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  w->sync_();
  return w->value();
}

/* Syncs the functional tensor t about to be mutated and, when it is a view
 * covering its whole base (same shape, strides, offset and dtype: detach,
 * alias) whose storage no other tensor shares any more, makes it its own
 * base. That is a Parameter (nn.Parameter detaches the `.to()` result, which
 * is then dropped) or an optimizer's `clone().detach()` momentum buffer: as
 * a view, each of their in-place updates went to the base and the view was
 * regenerated from it (alias_copy twice and the view replay, per update,
 * every step). No tensor can tell the difference: none shares the storage
 * (each alias, the base included, holds a reference to it). */
inline void sync_for_mutation(const at::Tensor &t) {
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  w->sync_();
  if (w->isBaseTensor() || w->storage().use_count() != 1) return;
  auto *s = static_cast<at::functionalization::FunctionalStorageImpl *>(
      w->storage().unsafeGetStorageImpl());
  const at::Tensor &b = s->base();
  const at::Tensor &v = w->value();
  if (!b.defined() || b.scalar_type() != v.scalar_type() || b.sizes() != v.sizes() ||
      b.strides() != v.strides() || b.storage_offset() != v.storage_offset())
    return;
  w->_unsafe_reset_storage();
}

/* Makes the functional tensor t hold out, the result of an in-place op on
 * it: replace_ and commit_update, then t is synced and its storage's update
 * list flushed (the applied updates are dropped, see functionalize.cpp's
 * file comment). Not done here: giving a base tensor no other tensor
 * shares a fresh storage, so that views taken later (each linear's
 * weight.t()) start current instead of being regenerated at first use
 * (FunctionalTensorWrapper's view constructor starts them at generation
 * 0). Tried (811f575): the MLP step's t_copy calls went 13 -> 9, but
 * torch.compile's replays of graphs that write batch-norm running stats,
 * and the SPMD data-parallel plan's per-parameter accounting, went wrong. */
inline void finish_mutation(const at::Tensor &t, const at::Tensor &out) {
  at::functionalization::impl::replace_(t, out);
  at::functionalization::impl::commit_update(t);
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  w->sync_();
  static_cast<at::functionalization::FunctionalStorageImpl *>(
      w->storage().unsafeGetStorageImpl())->apply_updates();
}

}  // namespace lazytpu

#endif
