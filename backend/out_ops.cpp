/*
 * backend/out_ops.cpp — `out=` variants of ops that have a device kernel.
 *
 * aten's composite kernels call out= variants (where.self_out inside
 * _safe_softmax, ...), and users do too. Without a kernel of their own they
 * would run on the CPU fallback. For every aten op X.<ov>_out / X.out whose
 * functional sibling (same name, overload without "out") has a PrivateUse1
 * kernel and returns one tensor per out argument, a boxed kernel is
 * registered at module load that runs the sibling on the device and writes
 * each result into its out tensor (cast to out's dtype, resized when the
 * shape differs, as eager's resize_output does). Out tensors that are not
 * raw device tensors (functional wrappers, CPU) keep the CPU fallback. In
 * torch_xla compatibility mode the kernels serve the XLA key too.
 */
#include "lt_aten.h"
#include "lt_guard.h"
#include "lt_register.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace lazytpu {
namespace {

std::mutex g_mu;
/* "name.overload" of an out op -> its functional sibling */
std::unordered_map<std::string, c10::OperatorHandle> g_sibling;

std::string key_of(const c10::OperatorName &n) { return n.name + "." + n.overload_name; }

/* overload name of the functional sibling, or false */
bool sibling_overload(const std::string &ov, std::string *f) {
  if (ov == "out") { *f = ""; return true; }
  const std::string suf = "_out";
  if (ov.size() > suf.size() && ov.compare(ov.size() - suf.size(), suf.size(), suf) == 0) {
    *f = ov.substr(0, ov.size() - suf.size());
    return true;
  }
  return false;
}

bool raw_device(const at::Tensor &t) {
  return t.defined() && is_lt_device_type(t.device().type()) &&
         !at::functionalization::impl::isFunctionalTensor(t) && impl_of(t) != nullptr;
}

/* > 0 while out_kernel runs on this thread: a sibling that calls an out=
 * form again goes to the CPU fallback instead of recursing */
thread_local int t_depth = 0;

void out_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  if (t_depth > 0) {
    cpu_fallback_boxed(op, stack);
    return;
  }
  struct Depth {
    Depth() { t_depth++; }
    ~Depth() { t_depth--; }
  } depth;
  c10::OperatorHandle fn = [&] {
    std::lock_guard<std::mutex> g(g_mu);
    return g_sibling.at(key_of(op.operator_name()));
  }();
  const auto &args = op.schema().arguments();
  size_t base = stack->size() - args.size();
  std::vector<at::Tensor> outs;
  bool native = true;
  for (size_t i = 0; i < args.size(); i++)
    if (args[i].is_out()) {
      at::Tensor o = (*stack)[base + i].toTensor();
      native = native && raw_device(o);
      outs.push_back(o);
    }
  if (!native) {
    cpu_fallback_boxed(op, stack);
    return;
  }
  torch::jit::Stack fs;
  for (size_t i = 0; i < args.size(); i++)
    if (!args[i].is_out()) fs.push_back(std::move((*stack)[base + i]));
  stack->resize(base);
  fn.callBoxedForDispatchKey(c10::DispatchKey::PrivateUse1, fs);
  TORCH_CHECK(fs.size() == outs.size(), "lazytpu: internal: ", fn.operator_name().name,
              " returned ", fs.size(), " values for ", outs.size(), " out tensors");
  for (size_t k = 0; k < outs.size(); k++) {
    at::Tensor r = fs[k].toTensor();
    at::Tensor &o = outs[k];
    if (r.scalar_type() != o.scalar_type()) r = r.to(o.scalar_type());
    LtTensorImpl *oi = impl_of(o);
    assign_value(o, handle_of(r));
    if (o.sizes() != r.sizes()) oi->refresh_metadata();
    stack->push_back(o);
  }
}

}  // namespace

/* Registers out_kernel for every eligible op (see the top); run once, after
 * every static registration and before the late composite / fallback
 * registrations (fallback.cpp: lazytpu_register_late), so that siblings are
 * the shim's own kernels. */
void register_out_variants() {
  static bool done = false;
  if (done) return;
  done = true;
  torch::Library &lib = mirror_library("aten", c10::DispatchKey::PrivateUse1);
  auto &d = c10::Dispatcher::singleton();
  for (const c10::OperatorName &name : d.getAllOpNames()) {
    if (name.name.compare(0, 6, "aten::") != 0) continue;
    std::string fov;
    if (!sibling_overload(name.overload_name, &fov)) continue;
    auto op = d.findOp(name);
    if (!op || !op->hasSchema() || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
      continue;
    auto fn = d.findOp(c10::OperatorName(name.name, fov));
    if (!fn || !fn->hasSchema() || !fn->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
      continue;
    const auto &os = op->schema();
    const auto &fs = fn->schema();
    size_t nout = 0;
    for (const auto &a : os.arguments()) nout += a.is_out();
    if (nout == 0 || fs.returns().size() != nout ||
        fs.arguments().size() + nout != os.arguments().size() || fs.is_mutable())
      continue;
    bool ok = true;
    for (const auto &r : fs.returns())
      ok = ok && r.type()->kind() == c10::TypeKind::TensorType && !r.alias_info();
    /* the non-out arguments must match the sibling's, in order */
    size_t j = 0;
    for (const auto &a : os.arguments()) {
      if (a.is_out()) continue;
      ok = ok && j < fs.arguments().size() && fs.arguments()[j].name() == a.name() &&
           *fs.arguments()[j].type() == *a.type();
      j++;
    }
    if (!ok) continue;
    {
      std::lock_guard<std::mutex> g(g_mu);
      g_sibling.emplace(key_of(name), *fn);
    }
    std::string full = name.name.substr(6) + "." + name.overload_name;
    lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&out_kernel>());
    if (xla_compat())
      mirror_library("aten", c10::DispatchKey::XLA)
          .impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&out_kernel>());
  }
}

}  // namespace lazytpu
