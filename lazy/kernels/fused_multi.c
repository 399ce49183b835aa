/*
 * lazy/kernels/fused_multi.c — lt_fused_run_multi: several fused programs
 * (the segments of a horizontal fusion, lazy/compile_hfuse.c) run as one
 * kernel.
 *
 * Each segment is bound on its own views (lt_fused_bind_run); the work is
 * the blocks of all segments laid end to end, cut into chunks that never
 * cross a segment, and handed to the core's helpers in one lt_par_for. So
 * an optimizer step over 62 parameters is one dispatch (one helper wake-up)
 * instead of 62, and the small tensors (biases, norms) are shared out with
 * the large ones; a kernel of only small segments runs on the calling
 * thread alone, as each of them would.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "fused.h"
#include "par.h"

/* A segment is bound by the worker that claims its first chunk and unbound
 * by the one finishing its last: only about one segment per worker is
 * bound at a time, so its load descriptors and broadcast blocks (lt_fused_
 * bind_run: a few KiB per broadcast input) reuse the memory the previous
 * segment freed, hot in cache, as separate kernels would. Binding all
 * segments up front measured 10-25% slower (an AdamW step over 52
 * parameters): megabytes of fresh blocks, page faults on every run. */
enum { SEG_UNBOUND = 0, SEG_BINDING, SEG_BOUND, SEG_FAILED, SEG_DONE };

typedef struct mseg {
    const lt_fused *f;
    const lt_view *in, *out;
    lt_fused_bound *b;          /* valid when state is SEG_BOUND */
    atomic_int state;
    _Atomic int64_t left;       /* chunks not finished yet */
    int64_t total;              /* elements */
    int64_t chunk0;             /* first chunk index of this segment */
} mseg;

typedef struct mjob {
    mseg *segs;
    int n_seg;
    int64_t cblk;               /* blocks per chunk */
    void **regs;                /* per worker */
} mjob;

/* Segment s bound (binding it if nobody has); NULL if binding failed. */
static lt_fused_bound *seg_acquire(mseg *s)
{
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == SEG_UNBOUND &&
        atomic_compare_exchange_strong(&s->state, &st, SEG_BINDING)) {
        s->b = lt_fused_bind_run(s->f, s->in, s->out);
        atomic_store_explicit(&s->state, s->b ? SEG_BOUND : SEG_FAILED,
                              memory_order_release);
        return s->b;
    }
    while ((st = atomic_load_explicit(&s->state, memory_order_acquire)) ==
           SEG_BINDING)
        sched_yield();
    return st == SEG_BOUND ? s->b : NULL;
}

static void multi_chunk(void *arg, int64_t c, int w)
{
    const mjob *j = arg;
    /* the segment holding chunk c: last with chunk0 <= c */
    int lo = 0, hi = j->n_seg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->segs[mid].chunk0 <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    mseg *s = &j->segs[lo];
    lt_fused_bound *b = seg_acquire(s);
    if (b) {
        int64_t i = (c - s->chunk0) * j->cblk * LT_FUSED_RUN_BLOCK;
        int64_t e = i + j->cblk * LT_FUSED_RUN_BLOCK;
        if (e > s->total)
            e = s->total;
        for (; i < e; i += LT_FUSED_RUN_BLOCK)
            lt_fused_eval(b, i, (int)(e - i < LT_FUSED_RUN_BLOCK ? e - i :
                                      LT_FUSED_RUN_BLOCK), j->regs[w]);
    }
    /* the last chunk unbinds, unless the segment failed (an integer
     * division by zero: the issuer reads its message and unbinds) */
    if (atomic_fetch_sub(&s->left, 1) == 1 && b) {
        lt_status st = lt_fused_bound_status(b);
        if (st == LT_OK) {
            lt_fused_unbind(b);
            s->b = NULL;
            atomic_store_explicit(&s->state, SEG_DONE, memory_order_release);
        }
    }
}

/* Splits the blocks of all segments into chunks and runs them. */
static lt_status run_chunks(mseg *segs, int n_seg, int64_t all, int64_t big,
                            int64_t nblk, size_t rb, const lt_kernel_ctx *ctx)
{
    /* lt_fused_run's thread count and chunk size rule over the elements of
     * all segments, but threads only when one segment alone would have
     * had them: many small segments (biases, norms; 160 of <= 16384
     * elements) measured 1.4x slower split over the helpers than on the
     * core's thread, with the host tracing the next step on the other
     * core of this 2-core machine */
    int nt = ctx && ctx->nthreads > 0 ? ctx->nthreads : 1;
    if (all < 32768 || big < 32768)
        nt = 1;
    if (nt > nblk)
        nt = (int)nblk;
    if (nt < 1)
        nt = 1;
    int64_t cblk = nblk / ((int64_t)nt * 16);
    cblk = cblk < 4 ? 4 : cblk > 64 ? 64 : cblk;
    if (nt == 1)     /* one chunk per segment */
        for (int k = 0; k < n_seg; k++) {
            int64_t b = (segs[k].total + LT_FUSED_RUN_BLOCK - 1) / LT_FUSED_RUN_BLOCK;
            if (b > cblk)
                cblk = b;
        }
    int64_t n_chunks = 0;
    for (int k = 0; k < n_seg; k++) {
        int64_t b = (segs[k].total + LT_FUSED_RUN_BLOCK - 1) / LT_FUSED_RUN_BLOCK;
        segs[k].chunk0 = n_chunks;
        atomic_init(&segs[k].left, (b + cblk - 1) / cblk);
        n_chunks += (b + cblk - 1) / cblk;
    }
    void *regs[nt];
    int failed = 0;
    for (int w = 0; w < nt; w++)
        failed |= !(regs[w] = lt_fused_regs_alloc(rb ? rb : 64));
    if (!failed && n_chunks > 0) {
        mjob j = {segs, n_seg, cblk, regs};
        lt_par_for(ctx, nt, n_chunks, multi_chunk, &j);
    }
    for (int w = 0; w < nt; w++)
        lt_fused_regs_free(regs[w]);
    if (failed)
        return lt_set_error(LT_ERR_OOM, "fused: cannot allocate %zu bytes of "
                            "registers", rb);
    return LT_OK;
}

lt_status lt_fused_run_multi(lt_fused *const *seg, int n_seg, const lt_view *in,
                             const lt_view *out, const lt_kernel_ctx *ctx)
{
    if (n_seg <= 0)
        return LT_OK;
    mseg *segs = calloc((size_t)n_seg, sizeof *segs);
    if (!segs)
        return lt_set_error(LT_ERR_OOM, "fused: out of host memory");
    int64_t all = 0, big = 0, nblk = 0;    /* big: the largest segment */
    size_t rb = 0;
    int io = 0, oo = 0;
    for (int k = 0; k < n_seg; k++) {
        const lt_fused *f = seg[k];
        segs[k].f = f;
        segs[k].in = in + io;
        segs[k].out = out + oo;
        atomic_init(&segs[k].state, SEG_UNBOUND);
        io += f->n_in;
        oo += f->n_out;
        segs[k].total = lt_shape_numel(&f->shape);
        all += segs[k].total;
        if (segs[k].total > big)
            big = segs[k].total;
        nblk += (segs[k].total + LT_FUSED_RUN_BLOCK - 1) / LT_FUSED_RUN_BLOCK;
        size_t r = lt_fused_regs_bytes(f) / LT_FUSED_BLOCK * LT_FUSED_RUN_BLOCK;
        if (r > rb)
            rb = r;
    }
    lt_status st = run_chunks(segs, n_seg, all, big, nblk, rb, ctx);
    /* the first failed segment in order names the error */
    for (int k = 0; k < n_seg; k++) {
        int state = atomic_load(&segs[k].state);
        if (state == SEG_FAILED && st == LT_OK)
            st = lt_set_error(LT_ERR_OOM, "fused: out of host memory");
        if (state == SEG_BOUND) {
            lt_status s2 = lt_fused_bound_status(segs[k].b);
            if (st == LT_OK)
                st = s2;
            lt_fused_unbind(segs[k].b);
        }
    }
    free(segs);
    return st;
}
