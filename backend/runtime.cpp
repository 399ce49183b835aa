/*
 * backend/runtime.cpp — the engine's side of the device runtime: which
 * device type and dispatch key device tensors carry, the mirror libraries
 * of torch_xla compatibility mode, and attaching the engine to the hooks
 * library.
 *
 * What PyTorch asks of a PrivateUse1 device besides kernels (the
 * PrivateUse1HooksInterface, the device guard, generators, pinned memory,
 * the per-core random state) lives in the hooks library, backend/hooks/,
 * which PyTorch's autoloading loads at `import torch`, before and without
 * the engine. When this module (lazytpu._C) loads, it attaches the engine to
 * it: from then on the hooks report the engine's core count, init() starts
 * the engine and the device is available.
 *
 * torch_xla compatibility mode (LAZYTPU_XLA_COMPAT=1): device tensors are
 * XLA tensors (DeviceType::XLA, DispatchKey::XLA) so that libraries written
 * for torch_xla, which build torch.device("xla", i) and test
 * device.type == "xla", get lazytpu tensors; every registration is mirrored
 * onto the XLA keys (lt_register.h) and the device guard serves XLA too.
 */
#include "lt_aten.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "lt_register.h"
#include "lt_shim.h"
#include "../base/options.h"

namespace lazytpu {

/* "lazytpu:N" ("xla:N" in compatibility mode) for messages; tensor_impl.cpp */
std::string core_name(int core);


/* --------------------------------------------------------- device identity */

bool xla_compat() {
  static const bool on = lt_opt_int(LT_OPT_XLA_COMPAT) != 0;   /* once per process */
  return on;
}

c10::DeviceType lt_device_type(void) {
  return xla_compat() ? c10::DeviceType::XLA : c10::DeviceType::PrivateUse1;
}

c10::DispatchKey lt_dispatch_key(void) {
  return xla_compat() ? c10::DispatchKey::XLA : c10::DispatchKey::PrivateUse1;
}

bool is_lt_device_type(c10::DeviceType t) {
  return t == c10::DeviceType::PrivateUse1 || (t == c10::DeviceType::XLA && xla_compat());
}

torch::Library &mirror_library(const char *ns, c10::DispatchKey k) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, torch::Library *> libs;
  std::lock_guard<std::mutex> g(mu);
  auto key = std::make_pair(std::string(ns), (int)k);
  auto it = libs.find(key);
  if (it != libs.end()) return *it->second;
  auto *lib = new torch::Library(torch::Library::IMPL, std::string(ns), k, __FILE__, __LINE__);
  libs.emplace(key, lib);
  return *lib;
}

/* ------------------------------------------------ attach to the hooks */

namespace {

int engine_num_cores(void) { return lt_num_cores(); }
void engine_init(void) { lt_init(); }

const hooks_engine g_engine = {engine_num_cores, engine_init};

struct AttachEngine {
  AttachEngine() {
    hooks_attach_engine(&g_engine);
    if (xla_compat()) hooks_register_xla_guard();
  }
} attach_engine;

}  // namespace

}  // namespace lazytpu

void lazytpu_rng_set_state(int core, uint64_t seed) { lazytpu::rng_set_state(core, seed); }
uint64_t lazytpu_rng_get_state(int core) { return lazytpu::rng_get_state(core); }
uint64_t lazytpu_rng_get_seed(int core) { return lazytpu::rng_get_seed(core); }
void lazytpu_rng_restore(int core, uint64_t seed, uint64_t state) {
  lazytpu::rng_restore(core, seed, state);
}
