/*
 * backend/hooks/rng.cpp — the per-core random state and the generators
 * PyTorch hands out for the device (torch.Generator("lazytpu"), a core's
 * default generator).
 *
 * Each core has a seed (what manual_seed set) and a running state; every
 * random op takes the next seed from its core's state (rng_next_seed), so a
 * step's random ops are graph parameters and replaying a cached graph with a
 * new seed does not recompile. A core's default at::Generator reads and
 * writes the same state; other generators made with
 * torch.Generator("lazytpu") keep their own seed but the kernels always draw
 * from the core's state (the generator argument of random ops is not
 * honoured: lazytpu's random streams differ from the CPU's anyway).
 *
 * This lives in the hooks library (loaded at `import torch`), not in the
 * engine, because PyTorch asks the hooks for generators before any tensor
 * exists on the device.
 */
#include "lt_hooks.h"
#include "rng.h"

#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>

namespace lazytpu {

namespace {
constexpr int kMaxCores = 64;
constexpr uint64_t kDefaultSeed = 101;
std::mutex g_rng_mu;
uint64_t g_rng_seed[kMaxCores];
uint64_t g_rng_state[kMaxCores];
bool g_rng_init[kMaxCores];

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int slot(int core) { return core & (kMaxCores - 1); }

/* g_rng_mu held */
void ensure_init(int c) {
  if (!g_rng_init[c]) {
    g_rng_seed[c] = g_rng_state[c] = kDefaultSeed;
    g_rng_init[c] = true;
  }
}
}  // namespace

int64_t rng_next_seed(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  uint64_t seed = splitmix(g_rng_state[c] * 1000003ull + (uint64_t)c);
  g_rng_state[c] = splitmix(g_rng_state[c]);
  /* a graph parameter: keep it exact in a double and away from 0/+-1 */
  return (int64_t)(seed & ((1ull << 52) - 1)) + 2;
}

void rng_set_state(int core, uint64_t seed) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  g_rng_seed[c] = g_rng_state[c] = seed;
  g_rng_init[c] = true;
}

uint64_t rng_get_seed(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  return g_rng_seed[c];
}

void rng_restore(int core, uint64_t seed, uint64_t state) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  g_rng_seed[c] = seed;
  g_rng_state[c] = state;
  g_rng_init[c] = true;
}

uint64_t rng_get_state(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  return g_rng_state[c];
}

namespace {

/* A core's generator. The default generator of core i (`is_default`) is a
 * view of the core's state above; others hold their own. State as a tensor:
 * 16 uint8 bytes, the seed then the running state (little endian). */
class LtGenerator final : public c10::GeneratorImpl {
 public:
  LtGenerator(c10::DeviceIndex idx, bool is_default)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, idx),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        is_default_(is_default), seed_(kDefaultSeed), state_(kDefaultSeed) {}

  void set_current_seed(uint64_t seed) override {
    if (is_default_) { rng_set_state(device().index(), seed); return; }
    seed_ = state_ = seed;
  }
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(false, "lazytpu: generator offsets (philox) are not supported");
  }
  uint64_t get_offset() const override {
    TORCH_CHECK(false, "lazytpu: generator offsets (philox) are not supported");
  }
  uint64_t current_seed() const override {
    return is_default_ ? rng_get_seed(device().index()) : seed_;
  }
  uint64_t seed() override {
    uint64_t s = std::random_device{}() ^
                 (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl &new_state) override {
    TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.numel() == 16 && new_state.device().is_cpu(),
                "lazytpu: a generator state is a CPU uint8 tensor of 16 bytes, got ",
                new_state.numel(), " elements of ", new_state.dtype().name());
    uint64_t v[2];
    std::memcpy(v, new_state.data(), sizeof v);
    if (is_default_) {
      rng_restore(device().index(), v[0], v[1]);
    } else {
      seed_ = v[0];
      state_ = v[1];
    }
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    uint64_t v[2];
    if (is_default_) {
      std::lock_guard<std::mutex> g(g_rng_mu);
      int c = slot(device().index());
      ensure_init(c);
      v[0] = g_rng_seed[c];
      v[1] = g_rng_state[c];
    } else {
      v[0] = seed_;
      v[1] = state_;
    }
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), v, sizeof v);
    return t.getIntrusivePtr();
  }

 private:
  LtGenerator *clone_impl() const override {
    auto *g = new LtGenerator(device().index(), false);
    g->seed_ = current_seed();
    auto st = get_state();
    std::memcpy(&g->state_, (const char *)st->data() + 8, 8);
    return g;
  }
  bool is_default_;
  uint64_t seed_, state_;
};

}  // namespace

const at::Generator &default_generator(int idx) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  std::call_once(once, [] {
    for (int i = 0; i < kMaxCores; i++)
      gens.push_back(at::make_generator<LtGenerator>((c10::DeviceIndex)i, true));
  });
  return gens[slot(idx)];
}

at::Generator new_generator(int idx) {
  return at::make_generator<LtGenerator>((c10::DeviceIndex)idx, false);
}

}  // namespace lazytpu
