/*
 * spawn/world_int.h — internals shared by world.c (segment, barrier,
 * failure detection) and collectives.c (the data movement).
 */
#ifndef LT_WORLD_INT_H
#define LT_WORLD_INT_H

#include <stdatomic.h>
#include "world.h"

#define LT_WORLD_MAGIC 0x6c617a7974707532ULL  /* "lazytpu2" */
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
    char bad[512];          /* non-empty: this rank's arguments are invalid,
                               or (abstain) why it cannot take part */
} lt_wdesc;

/* A request of a host's ranks to their host proxy (the launcher, which
 * talks to the other hosts over MPI; spawn/hostlink.h). Written by local
 * rank 0 only, after a local barrier. */
typedef enum lt_hreq_kind {
    LT_HREQ_AGREE = 1,  /* compare this host's descriptor with the others' */
    LT_HREQ_REDUCE,     /* result slot [count] acc_dtype partials -> dtype */
    LT_HREQ_GATHER,     /* result slot: host blocks of `count` bytes */
    LT_HREQ_RSCATTER,   /* [rows][hosts*local][cols] partials -> own hosts' */
    LT_HREQ_BCAST       /* result slot: `count` bytes from host root_host */
} lt_hreq_kind;

typedef struct lt_hreq {
    int32_t kind;           /* lt_hreq_kind */
    int32_t dtype;          /* REDUCE/RSCATTER: result dtype */
    int32_t acc_dtype;      /* REDUCE/RSCATTER: dtype of the partials */
    int32_t reduce;
    int32_t root_host;      /* BCAST */
    int32_t pad;
    double scale;
    int64_t count;          /* REDUCE: elements; GATHER/BCAST: bytes;
                               RSCATTER: rows */
    int64_t cols;           /* RSCATTER: elements per (row, rank) */
    lt_wdesc desc;          /* AGREE: local rank 0's descriptor */
    char local_err[512];    /* AGREE: this host's own verdict ("" = ok) */
    int64_t counts[LT_WORLD_MAX_RANKS]; /* AGREE: each local rank's count */
} lt_hreq;

/* The proxy's answer to request number seq, in ring entry seq & 1. */
typedef struct lt_hres {
    int32_t status;         /* lt_status */
    int32_t pad;
    char msg[1024];
} lt_hres;

typedef struct lt_whdr {
    uint64_t magic;
    int32_t size;           /* ranks on this host (local world) */
    int32_t pad0;
    int32_t host_index;     /* this segment's host, 0..num_hosts-1 */
    int32_t num_hosts;      /* 1: single host (no proxy) */
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
    /* ---- host proxy mailbox (num_hosts > 1; spawn/hostlink.c) ---- */
    _Alignas(64) atomic_uint proxy_ready;  /* futex word: 1 ready, 2 failed */
    atomic_int proxy_pid;
    uint64_t inter_bytes;   /* usable result-slot bytes, equal on all hosts */
    _Alignas(64) atomic_uint req_seq;      /* futex word the proxy waits on */
    _Alignas(64) atomic_uint done_seq;     /* futex word ranks wait on */
    lt_hreq req;
    lt_hres res[2];
    int64_t gcounts[LT_WORLD_MAX_GLOBAL];  /* AGREE: every rank's count */
} lt_whdr;

struct lt_world {
    lt_whdr *hdr;
    unsigned char *base;      /* mapping */
    size_t bytes;
    int rank, size;           /* LOCAL rank (slot index) and local size */
    int host, hosts;          /* host index, number of hosts */
    int creator;
    int unlinked;
    double timeout_s;
    int spin;                 /* busy-wait polls before sleeping in a barrier */
    uint64_t seq;
    uint32_t hseq;            /* proxy requests made (hostlink.c) */
    int64_t inter_ns;         /* time spent waiting for the proxy */
    char name[64];
};

/* Global rank of local rank k of this host. */
static inline int lt_world_grank(const lt_world *w, int k)
{
    return w->host * w->size + k;
}

/* 1 when the world spans several hosts (collectives go through the proxy). */
static inline int lt_world_multihost(const lt_world *w)
{
    return w && w->hosts > 1;
}

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
/* Helpers shared with hostlink.c: futex wait (up to ns) / wake-all on a
 * process-shared word; 1 if process pid is gone or a zombie; monotonic
 * clock in ns. */
void lt_world_futex_wait(atomic_uint *addr, unsigned val, long ns);
void lt_world_futex_wake(atomic_uint *addr);
int lt_world_pid_dead(int pid);
int64_t lt_world_now_ns(void);
/* "f32 [2, 3]", "tag 'x'" or "(no data)": what a descriptor moves. */
void lt_wdesc_str(const lt_wdesc *d, char *buf, size_t cap);
/* "all_reduce", "rendezvous", ... for an lt_wop. */
const char *lt_wop_name(int op);
/* Compares descriptor d (of rank named dname) with the reference r (named
 * rname): 0 and msg = "" when they agree, else 1 with the error in msg
 * ("all_reduce: rank 4 (host 1) sent f32 [8] but rank 0 (host 0) sent f32
 * [4]"). Used within a host and, by the proxy, across hosts. */
int lt_wdesc_compare(const lt_wdesc *d, const char *dname, const lt_wdesc *r,
                     const char *rname, char *msg, size_t cap);
/* "rank 5" on one host, "rank 5 (host 1)" on several. */
void lt_world_rank_name(const lt_world *w, int local_rank, char *buf,
                        size_t cap);
/* This host's verdict on the published descriptors (no waiting): LT_OK, or
 * LT_ERR_COLLECTIVE with the message set. */
lt_status lt_world_verify_local(lt_world *w);
/* The agreement step after the first barrier of a collective: on one host
 * lt_world_verify; on several, this host's verdict is compared with every
 * other host's through the proxy, so that every rank of every host returns
 * the same verdict. On disagreement waits once more locally (like
 * lt_world_verify) and returns LT_ERR_COLLECTIVE. */
lt_status lt_world_verify_all(lt_world *w, const char *what);
/* ---- shared by collectives.c and collectives_hier.c ---- */

/* A descriptor for op over `count` elements of dt (shape NULL: [count]). */
void lt_wdesc_init(lt_wdesc *d, int op, lt_dtype dt, int64_t count,
                   const lt_shape *shape);
/* Checks common arguments; fills d->bad (so that every rank fails together
 * after the first barrier instead of the others hanging). */
void lt_wdesc_check(lt_wdesc *d, const void *send, const void *recv,
                    int64_t n, lt_dtype dt);

/* Iterates a [outer][block] index space in chunks of at most cap elements:
 * whole rows when a row fits, else pieces of one row. The first
 * lt_chunker_next always yields one (maybe empty) chunk so that the
 * agreement barrier happens; it returns 0 at the end. */
typedef struct lt_chunker {
    int64_t outer, block, rows_per, cols_per;
    int64_t o0, j0, rows, cols;
    int started;
} lt_chunker;
void lt_chunker_init(lt_chunker *c, int64_t outer, int64_t block,
                     int64_t cap);
int lt_chunker_next(lt_chunker *c);

/* The collectives on several hosts (collectives_hier.c); same contracts as
 * the lt_world_* ones in world.h, which call them when w spans hosts. */
lt_status lt_hier_all_reduce(lt_world *w, const void *send, void *recv,
                             int64_t n, lt_dtype dtype, lt_reduce_type reduce,
                             double scale, const lt_shape *shape);
lt_status lt_hier_all_gather(lt_world *w, const void *send, void *recv,
                             int64_t outer, int64_t block, lt_dtype dtype,
                             const lt_shape *shape);
lt_status lt_hier_reduce_scatter(lt_world *w, const void *send, void *recv,
                                 int64_t outer, int64_t block, lt_dtype dtype,
                                 lt_reduce_type reduce, double scale,
                                 const lt_shape *shape);
lt_status lt_hier_broadcast(lt_world *w, const void *send, void *recv,
                            int64_t n, lt_dtype dtype, int root,
                            const lt_shape *shape);
lt_status lt_hier_exchange(lt_world *w, const char *tag, const void *payload,
                           size_t len, void **all, size_t *lens);

/* Publishes d without waiting (to overlap with the first chunk's copy),
 * then lt_world_verify after the first barrier (same
 * result on every rank). */
void lt_world_publish(lt_world *w, lt_wdesc *d);
/* On disagreement, also waits for all ranks once more (so nobody overwrites
 * a descriptor another rank still reads) and returns the error. Callers
 * must pass at least one more barrier before the next publish on success. */
lt_status lt_world_verify(lt_world *w, const char *what);

#endif
