/*
 * spawn/world_int.h — internals shared by world.c (segment, barrier,
 * failure detection) and collectives.c (the data movement).
 */
#ifndef LT_WORLD_INT_H
#define LT_WORLD_INT_H

#include <stdatomic.h>
#include "world.h"

#define LT_WORLD_MAGIC 0x6c617a7974707531ULL  /* "lazytpu1" */
#define LT_WORLD_TAG_MAX 48

typedef enum lt_wop {
    LT_WOP_BARRIER = 1, LT_WOP_ALL_REDUCE, LT_WOP_ALL_GATHER,
    LT_WOP_REDUCE_SCATTER, LT_WOP_BROADCAST, LT_WOP_EXCHANGE
} lt_wop;

/* What a rank is about to do; compared across ranks before data moves. */
typedef struct lt_wdesc {
    int32_t op;             /* lt_wop */
    int32_t dtype;
    int32_t reduce;         /* reduce type, or -1 */
    int32_t arg;            /* root (broadcast), or 0 */
    int64_t count;          /* elements (payload bytes for exchange) */
    int64_t outer, block;   /* gather / scatter views */
    uint64_t seq;           /* per-process collective counter */
    lt_shape shape;
    char tag[LT_WORLD_TAG_MAX];
    int32_t abstain;        /* 1: this rank cannot take part (bad = why) */
    char bad[384];          /* non-empty: this rank's arguments are invalid,
                               or (abstain) why it cannot take part */
} lt_wdesc;

typedef struct lt_whdr {
    uint64_t magic;
    int32_t size;
    int32_t pad0;
    uint64_t total_bytes;
    uint64_t slot_bytes;
    uint64_t chunk_bytes;   /* <= slot_bytes: per-rank piece per round */
    uint64_t data_off;
    _Alignas(64) atomic_uint bar_count;
    _Alignas(64) atomic_uint bar_gen;      /* futex word */
    _Alignas(64) atomic_uint aborted;      /* futex-woken with bar_gen */
    atomic_uint abort_claim;
    char abort_msg[512];
    atomic_int pid[LT_WORLD_MAX_RANKS];    /* 0 = not attached yet */
    atomic_uint arrived[LT_WORLD_MAX_RANKS]; /* last barrier gen + 1 reached */
    lt_wdesc desc[LT_WORLD_MAX_RANKS];
} lt_whdr;

struct lt_world {
    lt_whdr *hdr;
    unsigned char *base;      /* mapping */
    size_t bytes;
    int rank, size;
    int creator;
    int unlinked;
    double timeout_s;
    int spin;                 /* busy-wait polls before sleeping in a barrier */
    uint64_t seq;
    char name[64];
};

/* Slot k (0..size-1: ranks; size: the shared result slot). */
static inline unsigned char *lt_world_slot(lt_world *w, int k)
{
    return w->base + w->hdr->data_off + (size_t)k * w->hdr->slot_bytes;
}

/* One barrier episode. `what` names the collective for messages. Returns
 * LT_OK, or LT_ERR_COLLECTIVE after aborting the world (peer died, timeout)
 * or finding it aborted. */
lt_status lt_world_wait_all(lt_world *w, const char *what);
/* LT_ERR_COLLECTIVE with the abort message if the world is aborted. */
lt_status lt_world_check(lt_world *w, const char *what);
/* Publishes d (seq filled in), waits for all ranks, compares descriptors.
 * On disagreement every rank returns the same LT_ERR_COLLECTIVE message. */
lt_status lt_world_agree(lt_world *w, lt_wdesc *d, const char *what);
/* Publishes d without waiting (to overlap with the first chunk's copy),
 * then lt_world_verify after the first barrier (same
 * result on every rank). */
void lt_world_publish(lt_world *w, lt_wdesc *d);
/* On disagreement, also waits for all ranks once more (so nobody overwrites
 * a descriptor another rank still reads) and returns the error. Callers
 * must pass at least one more barrier before the next publish on success. */
lt_status lt_world_verify(lt_world *w, const char *what);

#endif
