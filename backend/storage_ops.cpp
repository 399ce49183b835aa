/*
 * backend/storage_ops.cpp — the size of a device tensor's storage:
 *   storage_nbytes(Tensor t) -> int   the bytes of the storage t views
 *
 * A device tensor is a functionalization wrapper around a storage-less
 * device value, so torch's UntypedStorage.nbytes() of it reads 0. Libraries
 * that tell tied or aliased weights apart compare storages by identity and
 * size (safetensors' save_model / load_model, accelerate's save_state); the
 * size they need is the storage's base value: its elements times their
 * size. lazytpu/_patches.py attaches it to the storage object Python sees.
 */
#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/library.h>

namespace lazytpu {
namespace {

int64_t value_bytes(const at::Tensor &t) {
  return t.numel() * (int64_t)t.element_size();
}

/* On the Functionalize key the tensor is still the wrapper: its storage is
 * the FunctionalStorageImpl shared by every view and alias of the value. */
int64_t storage_nbytes_functional(const at::Tensor &t) {
  if (!at::functionalization::impl::isFunctionalTensor(t)) return value_bytes(t);
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  auto *st = static_cast<at::functionalization::FunctionalStorageImpl *>(
      w->storage().unsafeGetStorageImpl());
  return value_bytes(st->base());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazytpu, m) {
  m.def("storage_nbytes(Tensor t) -> int");
}

TORCH_LIBRARY_IMPL(lazytpu, Functionalize, m) {
  m.impl("storage_nbytes", TORCH_FN(storage_nbytes_functional));
}

/* A tensor that is not wrapped: its own elements. */
TORCH_LIBRARY_IMPL(lazytpu, CompositeExplicitAutograd, m) {
  m.impl("storage_nbytes", TORCH_FN(value_bytes));
}

}  // namespace lazytpu
