/*
 * backend/hooks/rng.h — the generators of the hooks library (rng.cpp), for
 * hooks.cpp. The per-core random state itself is declared in lt_hooks.h.
 */
#ifndef LT_HOOKS_RNG_H
#define LT_HOOKS_RNG_H

#include <ATen/core/Generator.h>

namespace lazytpu {

/* Core `idx`'s default generator (a view of the core's random state); made
 * on first use, lives for the process. idx must be in 0..63. */
const at::Generator &default_generator(int idx);

/* A new generator for core `idx` with its own seed and state
 * (torch.Generator("lazytpu")). */
at::Generator new_generator(int idx);

}  // namespace lazytpu

#endif
