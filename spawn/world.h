/*
 * spawn/world.h — the multi-process world: N processes (ranks), one per
 * simulated core, sharing one POSIX shared-memory segment on this host.
 *
 * Life cycle
 *   The launcher (spawn/launcher.h, `lazytpu-run`) calls lt_world_create()
 *   before starting the workers and lt_world_unlink()/lt_world_close() after
 *   reaping them. Each worker finds the segment through its environment
 *   (LAZYTPU_SHM_NAME, LAZYTPU_ORDINAL, LAZYTPU_WORLD_SIZE) and attaches with
 *   lt_world_attach_from_env(), or lazily through lt_world_default().
 *
 * Segment layout: a header (barrier words, abort flag + message, per-rank pid
 *   and op descriptor), then N+1 equal data slots: one per rank (its input)
 *   and one shared result slot. Data larger than a slot is processed in
 *   chunks, so any size works with any segment size (LAZYTPU_SHM_BYTES,
 *   default 256 MiB; pages of /dev/shm are only allocated when touched).
 *
 * Collectives (all ranks must call the same ones in the same order):
 *   Before each collective every rank publishes a descriptor (op, dtype,
 *   shape, reduce type, dim/root, tag, sequence number). After the first
 *   barrier every rank compares all descriptors with rank 0's; on any
 *   disagreement EVERY rank returns LT_ERR_COLLECTIVE with the same message,
 *   e.g. "all_reduce: rank 3 sent f32 [1024] but rank 0 sent f32 [512]", and
 *   the world stays usable.
 *   all_reduce is bandwidth-optimal within a host: each rank copies its
 *   input into its slot, reduces 1/N of the elements across all slots into
 *   the result slot, and after a barrier copies the whole result out.
 *
 * Failure: barriers wait with futexes, checking every ~50 ms whether the
 *   world was aborted (lt_world_abort, e.g. by the launcher when a worker
 *   died) or a peer process died, and giving up after the timeout
 *   (LAZYTPU_COLLECTIVE_TIMEOUT seconds, default 300). Any of these aborts
 *   the world: the current and every later collective on every rank returns
 *   LT_ERR_COLLECTIVE with the abort message ("rank 3 (pid 1234) died during
 *   all_reduce", "barrier timed out after 5 s: rank 2 did not arrive").
 *
 * Several hosts (spawn/hostlink.h, docs/multihost.md): under MPI each host
 *   runs one launcher and its own segment for its C local ranks; global rank
 *   = host index * C + local rank. Every collective is then hierarchical:
 *   inside the host over the segment as above, across hosts by the host's
 *   launcher (the proxy: the only process that uses MPI) working on the
 *   segment's result slot. The API is the same: lt_world_rank/size are
 *   global, collectives take global ranks (broadcast root) and global sizes
 *   (gather/scatter views), and descriptors are compared across hosts too
 *   ("all_reduce: rank 4 (host 1) sent f32 [8] but rank 0 (host 0) sent f32
 *   [4]" on every rank of every host).
 *
 * Thread-safety: a world is used by one thread at a time per process (the
 * core's worker thread, or Python's main thread for rendezvous).
 *
 * Exported: the functions marked LT_API are the world API the Python
 * binding (backend/world_py.cpp) calls; liblazytpu.so exports nothing else
 * of this header.
 */
#ifndef LT_WORLD_H
#define LT_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include "lazytpu.h"

#define LT_WORLD_MAX_RANKS 64      /* ranks per host */
#define LT_WORLD_MAX_HOSTS 64
#define LT_WORLD_MAX_GLOBAL (LT_WORLD_MAX_RANKS * LT_WORLD_MAX_HOSTS)
#define LT_WORLD_DEFAULT_SHM_BYTES ((size_t)256 << 20)
#define LT_WORLD_DEFAULT_TIMEOUT_S 300.0
/* Per-rank bytes moved per round (LAZYTPU_COLLECTIVE_CHUNK_BYTES): small
 * enough that N slots' chunks stay in the last-level cache between the
 * copy-in, reduce and copy-out phases. Fixed by the creator for everyone. */
#define LT_WORLD_DEFAULT_CHUNK_BYTES ((size_t)128 << 10)

typedef struct lt_world lt_world;

/* Creates a new segment "/lazytpu-<pid>-<random>" for `size` ranks
 * (1..LT_WORLD_MAX_RANKS) of about `bytes` bytes (0 = LAZYTPU_SHM_BYTES or
 * the default; at least 1 MiB) and maps it. The creator is not a rank
 * (lt_world_rank returns -1); it can abort the world and must finally call
 * lt_world_unlink() and lt_world_close(). Caller owns *out.
 * Fails with LT_ERR_ARG (bad size) or LT_ERR_INTERNAL (shm_open/ftruncate/
 * mmap failed; message has strerror). */
lt_status lt_world_create(int size, size_t bytes, lt_world **out);

/* Like lt_world_create, for host `host_index` of `num_hosts`
 * (1..LT_WORLD_MAX_HOSTS) with `size` ranks on this host. With
 * num_hosts > 1 collectives wait for this host's proxy (hostlink.h), which
 * the creator must start. Fails like lt_world_create, or LT_ERR_ARG for a
 * bad host index / count. */
lt_status lt_world_create_host(int size, size_t bytes, int host_index,
                               int num_hosts, lt_world **out);

/* Attaches to an existing segment as `rank` of `size`. The segment's size
 * must match. Records this process's pid for peer-death detection.
 * Fails with LT_ERR_ARG (bad rank/size, size mismatch, not a lazytpu
 * segment) or LT_ERR_INTERNAL (shm_open/mmap). Caller owns *out. */
lt_status lt_world_attach(const char *shm_name, int rank, int size,
                          lt_world **out);

/* Attaches using LAZYTPU_SHM_NAME and LAZYTPU_LOCAL_ORDINAL /
 * LAZYTPU_LOCAL_WORLD_SIZE (LAZYTPU_ORDINAL / LAZYTPU_WORLD_SIZE when the
 * local ones are unset), checking LAZYTPU_HOST_INDEX / LAZYTPU_NUM_HOSTS
 * (default 0 / 1) and LAZYTPU_ORDINAL against the segment.
 * *out = NULL and LT_OK when LAZYTPU_SHM_NAME is unset (a world of 1).
 * Fails like lt_world_attach, or LT_ERR_ARG for malformed variables or a
 * segment of another host. */
lt_status lt_world_attach_from_env(lt_world **out);

/* The calling process's world, attached from the environment on first use
 * (thread-safe, once). *out = NULL with LT_OK when not running under the
 * launcher. The world lives until the process exits: do not close it.
 * In a fork child of a process that had attached: LT_ERR_COLLECTIVE naming
 * both pids (the parent is the rank). */
LT_API lt_status lt_world_default(lt_world **out);
/* Global world size from LAZYTPU_WORLD_SIZE without attaching (1 if
 * unset). For shape rules at trace time. */
int lt_world_default_size(void);
/* This process's global ordinal from LAZYTPU_ORDINAL (0 if unset). */
int lt_world_default_rank(void);

/* Unmaps (and frees the handle). NULL-safe. Does not unlink. */
void lt_world_close(lt_world *w);
/* Removes the segment name (creator only; idempotent). The mapping stays
 * valid until lt_world_close. */
void lt_world_unlink(lt_world *w);
/* The shm name ("/lazytpu-..."); owned by w. */
const char *lt_world_name(const lt_world *w);

/* Global rank 0..size-1 (-1 for the creator; 0 for NULL) and global size
 * (hosts x local size; 1 for NULL). */
LT_API int lt_world_rank(const lt_world *w);
LT_API int lt_world_size(const lt_world *w);
/* Rank on this host (slot index; -1 for the creator) and ranks per host. */
int lt_world_local_rank(const lt_world *w);
int lt_world_local_size(const lt_world *w);
/* This host's index and the number of hosts (0 and 1 for NULL). */
int lt_world_host_index(const lt_world *w);
int lt_world_num_hosts(const lt_world *w);
/* Nanoseconds this process spent in the inter-host part of collectives
 * (waiting for its host proxy) since attaching; 0 on one host. */
int64_t lt_world_inter_ns(const lt_world *w);
/* Bytes per data slot (the chunk size of collectives). */
size_t lt_world_slot_bytes(const lt_world *w);
/* Sets this handle's barrier timeout in seconds (<= 0: default). */
void lt_world_set_timeout(lt_world *w, double seconds);

/* Marks the world aborted with `msg` (first abort wins) and wakes every
 * waiter: every pending and later collective fails with LT_ERR_COLLECTIVE
 * and that message. Safe from any process attached or creating. */
void lt_world_abort(lt_world *w, const char *msg);
/* 1 if aborted; copies the message into buf (may be NULL). */
int lt_world_aborted(const lt_world *w, char *buf, size_t cap);

/* Takes part in this rank's next collective (`what`: "all_reduce",
 * "all_gather", "reduce_scatter", "broadcast", "barrier") without data, as a
 * failure: after the first barrier every rank's collective returns
 * LT_ERR_COLLECTIVE "<what>: rank R could not take part: <reason>" (R the
 * lowest rank that abstained or passed bad arguments) and the world stays
 * usable. For a rank whose operand does not exist (its program failed, its
 * input is poisoned). reason is truncated to ~380 chars. LT_OK for w NULL. */
lt_status lt_world_abstain(lt_world *w, const char *what, const char *reason);

/* Waits until every rank called lt_world_barrier (a collective: checked
 * against the other ranks' descriptors like the others). */
LT_API lt_status lt_world_barrier(lt_world *w);

/* Element-wise reduction of n elements over all ranks; every rank gets
 * result * scale (scale ignored for bool; for integers the scaled value is
 * truncated toward zero). send == recv is allowed (in place). bf16 is
 * accumulated in f32 and rounded to nearest even once. For integers and/or
 * are bitwise, for floats and bool they are logical (result 0/1).
 * shape may be NULL (reported as [n]); it is only used in messages and in
 * the agreement check. */
LT_API lt_status lt_world_all_reduce(lt_world *w, const void *send, void *recv,
                                     int64_t n, lt_dtype dtype,
                                     lt_reduce_type reduce, double scale,
                                     const lt_shape *shape);

/* Gathers along a dim: the input is viewed as [outer][block] (row-major,
 * contiguous), the output as [outer][size][block], rank r's input landing
 * at [o][r]. Flat gather: outer = 1. recv must hold size*outer*block
 * elements and must not overlap send. */
LT_API lt_status lt_world_all_gather(lt_world *w, const void *send, void *recv,
                                     int64_t outer, int64_t block, lt_dtype dtype,
                                     const lt_shape *shape);

/* The input is viewed as [outer][size][block]; rank r receives
 * reduce over ranks of input[:, r, :] * scale, as [outer][block]. */
LT_API lt_status lt_world_reduce_scatter(lt_world *w, const void *send, void *recv,
                                         int64_t outer, int64_t block, lt_dtype dtype,
                                         lt_reduce_type reduce, double scale,
                                         const lt_shape *shape);

/* Every rank's recv gets root's send (n elements). send == recv allowed. */
LT_API lt_status lt_world_broadcast(lt_world *w, const void *send, void *recv,
                                    int64_t n, lt_dtype dtype, int root,
                                    const lt_shape *shape);

/* Rendezvous with payloads: every rank passes `tag` (<= 47 chars, must be
 * equal on all ranks) and `len` bytes (may differ per rank, may be 0).
 * Returns in *all a malloc'd concatenation of every rank's payload in
 * global rank order (caller frees; NULL when the total is 0) and in
 * lens[0..size) each payload's length (caller-provided array of
 * lt_world_size entries: the global size). */
LT_API lt_status lt_world_exchange(lt_world *w, const char *tag, const void *payload,
                                   size_t len, void **all, size_t *lens);

/* Name of a reduce type: "sum", "mul", "min", "max", "and", "or". */
const char *lt_reduce_type_name(int reduce);

#endif
