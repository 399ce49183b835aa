/*
 * lazy/compile_plan.c — step order, buffer planning, donation.
 *
 * 1. Steps are ordered topologically (Kahn); among the ready steps the one
 *    whose anchor node was traced first runs first (lt_node.seq, the
 *    user's program order), so each value is consumed when the program
 *    consumed it and liveness stays as short as in eager: a backward's
 *    weight gradients run beside the gradient they read, not after the
 *    whole input-gradient chain (the graph's post-order, which roots the
 *    chain at the first layer's weight gradient, would put them last and
 *    keep every activation and gradient alive to the end).
 * 2. Every intermediate buffer lives from its producing step to its last
 *    reader and gets an offset in one scratch arena (first fit over a free
 *    list, 64-byte aligned, freed ranges reused). Output buffers are the
 *    caller's out_bufs.
 *    An alias buffer (an optimization barrier's value) has no storage: its
 *    readers keep the storage it names alive and are ordered after its
 *    fence (lt_cc_step_edges); finally its views become views of that
 *    storage.
 * 3. Donation: output k written by a fused step that reads parameter j at
 *    the identical index (contiguous, same shape and dtype) while no later
 *    step reads j may be written into j's buffer (in a horizontal fusion:
 *    j read by the writing segment only).
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"

/* ---- binary min-heap of step indices keyed by program order ---- */
typedef struct heap { int *a; int n; const uint64_t *key; } heap;

static void heap_push(heap *h, int v)
{
    int i = h->n++;
    h->a[i] = v;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h->key[h->a[p]] < h->key[h->a[i]] ||
            (h->key[h->a[p]] == h->key[h->a[i]] && h->a[p] < h->a[i]))
            break;
        int t = h->a[p]; h->a[p] = h->a[i]; h->a[i] = t;
        i = p;
    }
}

static int heap_pop(heap *h)
{
    int top = h->a[0];
    h->a[0] = h->a[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && (h->key[h->a[l]] < h->key[h->a[m]] ||
                         (h->key[h->a[l]] == h->key[h->a[m]] && h->a[l] < h->a[m])))
            m = l;
        if (r < h->n && (h->key[h->a[r]] < h->key[h->a[m]] ||
                         (h->key[h->a[r]] == h->key[h->a[m]] && h->a[r] < h->a[m])))
            m = r;
        if (m == i)
            break;
        int t = h->a[m]; h->a[m] = h->a[i]; h->a[i] = t;
        i = m;
    }
    return top;
}

/* The steps reading pv (in step s) must follow: the producer of its buffer,
 * or for an alias (an optimization barrier's value) the producer of the
 * storage it names and of every buffer of its fence. Each one q != s is
 * counted (a == NULL: off[q + 1]++) or recorded (a[off[q] + fill[q]++] = s,
 * indeg[s]++). */
static void pv_edges(const lt_cctx *c, const int *prod, const lt_pview *pv, int s,
                     int *off, int *a, int *fill, int *indeg)
{
    if (pv->base != LT_BASE_BUF)
        return;
    const lt_cbuf *b = &c->bufs[pv->index];
    int n = b->is_alias ? b->n_after + 1 : 1;
    for (int k = 0; k < n; k++) {
        int buf = !b->is_alias ? pv->index : k < b->n_after ? b->after[k]
                  : b->al_base == LT_BASE_BUF ? b->al_index : -1;
        int q = buf >= 0 ? prod[buf] : -1;
        if (q < 0 || q == s)
            continue;
        if (!a) {
            off[q + 1]++;
        } else {
            a[off[q] + fill[q]++] = s;
            indeg[s]++;
        }
    }
}

lt_status lt_cc_step_edges(const lt_cctx *c, const int *prod, int *off, int *indeg, int **adj)
{
    int ns = c->n_steps;
    *adj = NULL;
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < c->steps[s].n_in; k++)
            pv_edges(c, prod, &c->steps[s].in[k], s, off, NULL, NULL, NULL);
    for (int s = 0; s < ns; s++)
        off[s + 1] += off[s];
    int *a = malloc((off[ns] ? off[ns] : 1) * sizeof(int));
    int *fill = calloc(ns ? ns : 1, sizeof(int));
    if (!a || !fill) {
        free(a);
        free(fill);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < c->steps[s].n_in; k++)
            pv_edges(c, prod, &c->steps[s].in[k], s, off, a, fill, indeg);
    free(fill);
    *adj = a;
    return LT_OK;
}

static lt_status order_steps(lt_cctx *c, int *prod)
{
    int ns = c->n_steps;
    int n1 = ns ? ns : 1;
    int *indeg = calloc(n1, sizeof(int));
    int *off = calloc(ns + 1, sizeof(int));
    int *order = malloc(n1 * sizeof(int));
    int *hp = malloc(n1 * sizeof(int));
    int *adj = NULL;
    lt_step *sorted = malloc(n1 * sizeof *sorted);
    int *sorted_anchor = malloc(n1 * sizeof(int));
    uint64_t *key = malloc(n1 * sizeof *key);
    lt_status st = LT_OK;
    if (!indeg || !off || !order || !hp || !sorted || !sorted_anchor || !key) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    /* program order of the anchor node; output copies (anchored past the
     * nodes) last, in output order */
    for (int s = 0; s < ns; s++) {
        int a = c->step_anchor[s];
        key[s] = a < c->n ? lt_cc_node(c, a)->seq : ((uint64_t)1 << 63) + (uint64_t)(a - c->n);
    }
    st = lt_cc_step_edges(c, prod, off, indeg, &adj);
    if (st != LT_OK)
        goto done;
    heap h = {hp, 0, key};
    for (int s = 0; s < ns; s++)
        if (indeg[s] == 0)
            heap_push(&h, s);
    int no = 0;
    while (h.n) {
        int s = heap_pop(&h);
        order[no++] = s;
        for (int e = off[s]; e < off[s + 1]; e++)
            if (--indeg[adj[e]] == 0)
                heap_push(&h, adj[e]);
    }
    if (no != ns) {
        st = lt_set_error(LT_ERR_INTERNAL, "compile: step graph has a cycle");
        goto done;
    }
    for (int t = 0; t < ns; t++) {
        sorted[t] = c->steps[order[t]];
        sorted_anchor[t] = c->step_anchor[order[t]];
    }
    if (ns > 0) {       /* a graph of leaves only has no steps (NULL arrays) */
        memcpy(c->steps, sorted, ns * sizeof *sorted);
        memcpy(c->step_anchor, sorted_anchor, ns * sizeof(int));
    }
    for (int t = 0; t < ns; t++)
        c->steps[t].node = c->step_anchor[t] < c->n ? c->step_anchor[t] : -1;
done:
    free(indeg);
    free(off);
    free(order);
    free(hp);
    free(adj);
    free(sorted);
    free(sorted_anchor);
    free(key);
    return st;
}

/* ---- scratch arena: first fit over a sorted free list ---- */
typedef struct range { int64_t off, size; } range;
typedef struct arena { range *fr; int n, cap; int64_t top; } arena;

static int64_t arena_alloc(arena *a, int64_t size)
{
    size = (size + 63) & ~(int64_t)63;
    if (size == 0)
        size = 64;
    for (int k = 0; k < a->n; k++)
        if (a->fr[k].size >= size) {
            int64_t o = a->fr[k].off;
            a->fr[k].off += size;
            a->fr[k].size -= size;
            if (a->fr[k].size == 0) {
                memmove(&a->fr[k], &a->fr[k + 1], (a->n - k - 1) * sizeof(range));
                a->n--;
            }
            return o;
        }
    /* extend the arena: merge with a free range at the top if any */
    if (a->n && a->fr[a->n - 1].off + a->fr[a->n - 1].size == a->top) {
        int64_t o = a->fr[a->n - 1].off;
        a->top = o + size;
        a->n--;
        return o;
    }
    int64_t o = a->top;
    a->top += size;
    return o;
}

static int arena_free(arena *a, int64_t off, int64_t size)
{
    size = (size + 63) & ~(int64_t)63;
    if (size == 0)
        size = 64;
    if (a->n == a->cap) {
        int nc = a->cap ? 2 * a->cap : 16;
        range *nr = realloc(a->fr, nc * sizeof *nr);
        if (!nr)
            return -1;
        a->fr = nr;
        a->cap = nc;
    }
    int k = 0;
    while (k < a->n && a->fr[k].off < off)
        k++;
    memmove(&a->fr[k + 1], &a->fr[k], (a->n - k) * sizeof(range));
    a->fr[k] = (range){off, size};
    a->n++;
    if (k + 1 < a->n && a->fr[k].off + a->fr[k].size == a->fr[k + 1].off) {
        a->fr[k].size += a->fr[k + 1].size;
        memmove(&a->fr[k + 1], &a->fr[k + 2], (a->n - k - 2) * sizeof(range));
        a->n--;
    }
    if (k > 0 && a->fr[k - 1].off + a->fr[k - 1].size == a->fr[k].off) {
        a->fr[k - 1].size += a->fr[k].size;
        memmove(&a->fr[k], &a->fr[k + 1], (a->n - k - 1) * sizeof(range));
        a->n--;
    }
    return 0;
}

static lt_status plan_scratch(lt_cctx *c, int *prod)
{
    int ns = c->n_steps;
    for (int b = 0; b < c->n_bufs; b++)
        c->bufs[b].first = c->bufs[b].last = -1;
    for (int s = 0; s < ns; s++) {
        const lt_step *st = &c->steps[s];
        for (int k = 0; k < st->n_out; k++)
            if (st->out[k].base == LT_BASE_BUF) {
                prod[st->out[k].index] = s;
                c->bufs[st->out[k].index].first = s;
            }
        for (int k = 0; k < st->n_in; k++) {
            lt_pview pv = st->in[k];
            lt_cc_resolve_alias(c, &pv);   /* a barrier's value: its storage */
            if (pv.base == LT_BASE_BUF)
                c->bufs[pv.index].last = s;
        }
    }
    /* per step: buffers born here, buffers dying here (linked lists) */
    int n1 = c->n_bufs ? c->n_bufs : 1;
    int *born = malloc((ns + 1) * sizeof(int)), *dies = malloc((ns + 1) * sizeof(int));
    int *nb = malloc(n1 * sizeof(int)), *nd = malloc(n1 * sizeof(int));
    arena a = {0};
    lt_status ret = LT_OK;
    if (!born || !dies || !nb || !nd) {
        ret = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    for (int s = 0; s <= ns; s++)
        born[s] = dies[s] = -1;
    for (int b = 0; b < c->n_bufs; b++) {
        lt_cbuf *cb = &c->bufs[b];
        if (cb->output >= 0 || cb->first < 0 || cb->is_alias)
            continue;
        if (cb->last < cb->first)
            cb->last = cb->first;
        nb[b] = born[cb->first];
        born[cb->first] = b;
        nd[b] = dies[cb->last];
        dies[cb->last] = b;
    }
    for (int s = 0; s < ns; s++) {
        for (int b = born[s]; b >= 0; b = nb[b])
            c->bufs[b].offset = arena_alloc(&a, c->bufs[b].bytes);
        for (int b = dies[s]; b >= 0; b = nd[b])
            if (arena_free(&a, c->bufs[b].offset, c->bufs[b].bytes) < 0) {
                ret = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
                goto done;
            }
    }
    c->prog->scratch_bytes = (size_t)a.top;
done:
    free(born);
    free(dies);
    free(nb);
    free(nd);
    free(a.fr);
    return ret;
}

static void finalize_pview(lt_cctx *c, lt_pview *pv)
{
    lt_cc_resolve_alias(c, pv);
    if (pv->base != LT_BASE_BUF)
        return;
    const lt_cbuf *b = &c->bufs[pv->index];
    if (b->output >= 0) {
        pv->base = LT_BASE_OUTPUT;
        pv->index = b->output;
        pv->byte_off = 0;
    } else {
        pv->base = LT_BASE_SCRATCH;
        pv->byte_off = b->offset;
        pv->index = 0;
    }
}

static int param_class(const lt_cctx *c, int j)
{
    int a = c->g->param_alias ? c->g->param_alias[j] : -1;
    return a >= 0 ? a : j;
}

static int same_view(const lt_pview *a, const lt_pview *b)
{
    if (a->v.offset != b->v.offset || a->v.dtype != b->v.dtype ||
        !lt_shape_equal(&a->v.shape, &b->v.shape))
        return 0;
    for (int k = 0; k < a->v.shape.ndim; k++)
        if (a->v.shape.dims[k] != 1 && a->v.strides[k] != b->v.strides[k])
            return 0;
    return 1;
}

static void plan_donation(lt_cctx *c)
{
    lt_program *p = c->prog;
    int np = c->g->n_params;
    for (int k = 0; k < p->n_outputs; k++) {
        /* the step writing output k */
        int ws = -1, wk = -1;
        for (int s = 0; s < c->n_steps && ws < 0; s++)
            for (int q = 0; q < c->steps[s].n_out; q++)
                if (c->steps[s].out[q].base == LT_BASE_OUTPUT &&
                    c->steps[s].out[q].index == k) {
                    ws = s;
                    wk = q;
                    break;
                }
        /* fused steps, and the stores of a reduction's producer (out[0]
         * is the reduction's result): a store is made per evaluated block
         * after that block's loads, blocks are disjoint, and stores only
         * exist in natural iteration order (identity permutation), so an
         * input of the same view may be overwritten in place */
        /* likewise the stores of a GEMM's epilogue (out[1..]): made per
         * block after the GEMM of that block, from the program's inputs
         * (in[nm..]); a parameter the GEMM itself reads is never donated */
        int epi = ws >= 0 && c->steps[ws].kind == LT_STEP_GEMM_EPI && wk >= 1;
        if (ws < 0 || !(c->steps[ws].kind == LT_STEP_FUSED || epi ||
                        (c->steps[ws].kind == LT_STEP_REDUCE && wk >= 1)))
            continue;
        const lt_step *st = &c->steps[ws];
        int nm = epi ? (st->op == LT_OP_addmm ? 3 : 2) : 0;
        int hint = st->hint ? st->hint[wk] : -1;
        /* a horizontal fusion: only the writing segment's inputs, read
         * by no other segment (those run at other times) */
        int lo, hi;
        lt_step_seg_inputs(st, wk, &lo, &hi);
        for (int qq = -1; qq < st->n_in && p->out_donor[k] < 0; qq++) {
            int q = qq < 0 ? hint : qq;
            if (q < nm || q < lo || q >= hi || (qq >= 0 && q == hint))
                continue;
            const lt_pview *pv = &st->in[q];
            if (pv->base != LT_BASE_PARAM || pv->v.offset != 0 ||
                pv->v.dtype != p->out_dtype[k] ||
                !lt_shape_equal(&pv->v.shape, &p->out_shape[k]) ||
                !lt_view_is_contiguous(&pv->v))
                continue;
            int j = pv->index, cls = param_class(c, j);
            const lt_node *pn = lt_cc_node(c, c->g->param_pos[j]);
            if (lt_shape_numel(&pn->shape) != lt_shape_numel(&p->out_shape[k]))
                continue;
            int ok = 1;
            for (int q2 = 0; q2 < st->n_in && ok; q2++) {
                const lt_pview *o = &st->in[q2];
                if (o->base == LT_BASE_PARAM && param_class(c, o->index) == cls
                    && (q2 < nm || !same_view(o, pv) || q2 < lo || q2 >= hi))
                    ok = 0;
            }
            for (int s = ws + 1; s < c->n_steps && ok; s++)
                for (int q2 = 0; q2 < c->steps[s].n_in; q2++)
                    if (c->steps[s].in[q2].base == LT_BASE_PARAM &&
                        param_class(c, c->steps[s].in[q2].index) == cls)
                        ok = 0;
            for (int k2 = 0; k2 < p->n_outputs && ok; k2++) {
                if (p->out_alias[k2] >= 0 && param_class(c, p->out_alias[k2]) == cls)
                    ok = 0;
                if (k2 != k && p->out_donor[k2] >= 0 &&
                    param_class(c, p->out_donor[k2]) == cls)
                    ok = 0;
            }
            if (ok && j < np)
                p->out_donor[k] = j;
        }
    }
}

lt_status lt_cc_plan(lt_cctx *c)
{
    lt_program *p = c->prog;
    int *prod = malloc((c->n_bufs ? c->n_bufs : 1) * sizeof(int));
    if (!prod)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    for (int b = 0; b < c->n_bufs; b++)
        prod[b] = -1;
    for (int s = 0; s < c->n_steps; s++)
        for (int k = 0; k < c->steps[s].n_out; k++)
            if (c->steps[s].out[k].base == LT_BASE_BUF)
                prod[c->steps[s].out[k].index] = s;
    lt_status st = order_steps(c, prod);
    if (st == LT_OK)
        st = plan_scratch(c, prod);
    free(prod);
    if (st != LT_OK)
        return st;
    for (int s = 0; s < c->n_steps; s++) {
        for (int k = 0; k < c->steps[s].n_in; k++)
            finalize_pview(c, &c->steps[s].in[k]);
        for (int k = 0; k < c->steps[s].n_out; k++)
            finalize_pview(c, &c->steps[s].out[k]);
    }
    plan_donation(c);
    /* parameters */
    int np = c->g->n_params;
    p->n_params = np;
    p->param_scalar = calloc(np ? np : 1, 1);
    p->param_dtype = calloc(np ? np : 1, 1);
    if (!p->param_scalar || !p->param_dtype)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    for (int j = 0; j < np; j++) {
        const lt_node *nd = lt_cc_node(c, c->g->param_pos[j]);
        p->param_scalar[j] = nd->op == LT_OP_scalar;
        p->param_dtype[j] = nd->dtype;
    }
    /* move steps and constants into the program */
    p->steps = c->steps;
    p->n_steps = c->n_steps;
    p->n_kernels = c->n_steps;
    p->consts = c->consts;
    p->n_consts = c->n_consts;
    c->consts = NULL;
    return LT_OK;
}
