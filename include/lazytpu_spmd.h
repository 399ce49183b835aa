/*
 * lazytpu_spmd.h — the SPMD part of lazytpu's public C API (DESIGN.md §8,
 * docs/spmd.md): shardings of values over a mesh of cores. Kept beside
 * lazytpu.h (which it includes) so that the shim's files that do not use
 * it do not depend on it.
 */
#ifndef LAZYTPU_SPMD_H
#define LAZYTPU_SPMD_H

#include "lazytpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------- SPMD */

/* A sharding: how a value is laid out over a mesh of cores (DESIGN.md §8,
 * docs/spmd.md). Immutable, refcounted. */
typedef struct lt_sharding lt_sharding;

/* Makes a sharding over a mesh of mesh_ndim (1..8) axes of sizes
 * mesh_shape, whose positions (row-major) are the cores device_ids
 * [prod(mesh_shape)] (distinct, each in [0, 64)), for a tensor of ndim dims:
 * dim d is split over the mesh axes packed in dim_axes[d] (axis k is the
 * nibble value k + 1, the first nibble the major axis, at most 4 axes; 0 =
 * not split). A mesh axis may split at most one dim. `frame` (may be NULL)
 * is the user's line of the annotation, kept for the report. LT_ERR_ARG
 * naming the bad entry otherwise; *out gets one reference. */
LT_API lt_status lt_sharding_new(int mesh_ndim, const int64_t *mesh_shape,
                                 const int64_t *device_ids, int ndim,
                                 const int64_t *dim_axes, const char *frame,
                                 lt_sharding **out);
LT_API lt_sharding *lt_sharding_retain(lt_sharding *s);   /* NULL-safe, returns s */
LT_API void lt_sharding_release(lt_sharding *s);          /* NULL-safe */
/* Writes s as integers into buf (at most cap; returns the count needed):
 * mesh_ndim, mesh_shape[mesh_ndim], n_devices, device_ids[n], ndim,
 * dim_axes[ndim] — the arguments of lt_sharding_new — then -1 for a
 * MANUAL sharding ("{manual}"). */
LT_API int lt_sharding_encode(const lt_sharding *s, int64_t *buf, int cap);

/* XLA's text of a sharding ("{devices=[4,2]0,1,2,3,4,5,6,7}", with
 * " last_tile_dim_replicate" when some mesh axes split no dim;
 * "{replicated}" when no dim is split) into buf (always NUL-terminated,
 * "..." when cut); returns buf. */
LT_API char *lt_sharding_str(const lt_sharding *s, char *buf, size_t cap);

/* Annotates t with s (NULL: removes its sharding): t's value, pending or
 * data, is replaced by an equal value carrying s (nothing is computed or
 * copied; the value's graph is unchanged). The annotation is part of the
 * graph key, and propagates to the values computed from t. LT_ERR_SHAPE
 * when s's ndim is not t's rank, or a split dim of size 0. */
LT_API lt_status lt_tensor_set_sharding(lt_tensor *t, lt_sharding *s);
/* t's sharding (annotated, or propagated from its inputs), or NULL; one
 * new reference. */
LT_API lt_sharding *lt_tensor_sharding(lt_tensor *t);
/* An in-place update whose result t replaces from's value (functionalization
 * swaps the tensor's value for t) keeps from's sharding, as torch_xla
 * re-shards an in-place result to the tensor's spec: t is annotated with
 * from's sharding when from has one (not manual) of t's rank and t another
 * or none. LT_OK and nothing done otherwise; errors as lt_tensor_set_sharding. */
LT_API lt_status lt_tensor_keep_sharding(lt_tensor *t, lt_tensor *from);

/* Manual sharding (torch_xla's enable/disable_manual_sharding; lazy/spmd_manual.c).
 * lt_tensor_spmd_full_to_shard: *out is a new tensor holding, on each core
 * of t's mesh, that core's block of t (its shape is the block's shape),
 * sharding {manual}; ops on it run per core on the core's values.
 * LT_ERR_ARG when t has no sharding or is manual already, LT_ERR_SHAPE when
 * a dim is not divisible by its shards (uneven shards are not supported). */
LT_API lt_status lt_tensor_spmd_full_to_shard(lt_tensor *t, lt_tensor **out);
/* The per-core values of manual t as one value of shape dims[ndim] laid out
 * by s (NULL or no split dim: replicated, the first core's block is the
 * value). LT_ERR_ARG when t is not manual, LT_ERR_SHAPE when dims split by s
 * do not give t's shape. */
LT_API lt_status lt_tensor_spmd_shard_to_full(lt_tensor *t, lt_sharding *s, const int64_t *dims,
                                              int ndim, lt_tensor **out);
/* Marks t's computed value {manual} (on mesh's mesh, else t's sharding's,
 * else all cores); LT_ERR_ARG when t holds device data (not computed). */
LT_API lt_status lt_tensor_spmd_mark_manual(lt_tensor *t, const lt_sharding *mesh);
/* 1 when t's value is device data a sync produced (a step's output, which
 * torch_xla's SPMD mode gives a sharding, "{replicated}" when none is
 * planned); 0 otherwise. */
LT_API int lt_tensor_from_step(lt_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* LAZYTPU_SPMD_H */
