/*
 * backend/hooks/lt_hooks.h — liblazytpu_hooks: what PyTorch asks of the
 * PrivateUse1 device besides kernels, loaded at `import torch`.
 *
 * PyTorch's backend autoloading (python/_lazytpu_device.py) loads this small
 * library before the engine: its static initialiser registers the
 * PrivateUse1HooksInterface (availability, device count, default generators,
 * pinned memory, init) and the PrivateUse1 device guard, once per process.
 * Nothing here loads the engine (lazytpu._C, the C core): a program that never
 * uses the device pays for one small dlopen, and `pin_memory()`,
 * `is_pinned()`, autograd's device threads and torch.Generator("lazytpu")
 * work with or without the engine. The engine links this library (so both
 * share one instance: one hooks object, one guard, one random state per core)
 * and attaches itself when it loads (hooks_attach_engine, runtime.cpp).
 *
 * Pinned memory is ordinary host memory from c10's CPU allocator, tracked so
 * that is_pinned() is true exactly for what pin_memory() returned (the cores
 * read host memory directly; there is no DMA to page-lock for).
 */
#ifndef LT_HOOKS_H
#define LT_HOOKS_H

#include <cstdint>

namespace lazytpu {

/* ------------------------------------------------------ engine attachment */

/* What the engine provides once loaded: its core count (initialising the
 * runtime if needed) and its initialisation. Both must be callable from any
 * thread. */
struct hooks_engine {
  int (*num_cores)(void);
  void (*init)(void);
};

/* Called once by the engine when it loads (runtime.cpp's static
 * initialiser). `e` must outlive the process. */
void hooks_attach_engine(const hooks_engine *e);

/* 1 once the engine has attached: lazytpu._C is loaded in this process. */
bool hooks_engine_attached(void);

/* The number of simulated cores: the engine's count once attached; before,
 * LAZYTPU_NUM_CORES read the way the engine will read it (1..64, default 8;
 * an invalid value counts as the default and the engine reports it when it
 * loads). Never loads the engine, never throws. */
int hooks_num_cores(void);

/* Registers the device guard for DeviceType::XLA too (torch_xla
 * compatibility mode, called by the engine); it shares the current core with
 * the PrivateUse1 guard. Idempotent. */
void hooks_register_xla_guard(void);

/* ---------------------------------------------------------- current core */

/* The current core of this thread (the device guard's index) and setting it
 * (throws c10::Error for an index past the cores; a negative index is
 * ignored). */
int current_core(void);
void set_current_core(int idx);

/* ---------------------------------------------------------- random state */

/* Per-core random state (rng.cpp): each core has a seed (what manual_seed
 * set) and a running state; random kernels take rng_next_seed(core), which
 * returns the seed for the next random op and advances the state. A core's
 * default generator reads and writes the same state. Cores are taken modulo
 * 64. Thread-safe. */
int64_t rng_next_seed(int core);
void rng_set_state(int core, uint64_t seed);
uint64_t rng_get_state(int core);
uint64_t rng_get_seed(int core);                 /* what manual_seed set */
void rng_restore(int core, uint64_t seed, uint64_t state);

}  // namespace lazytpu

#endif
