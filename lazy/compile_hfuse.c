/*
 * lazy/compile_hfuse.c — horizontal fusion: independent fused elementwise
 * steps that run the same program become one step (one kernel).
 *
 * An optimizer update traced per parameter (torch.optim's for-loop, or its
 * foreach ops decomposed) leaves one fused group per parameter, all with the
 * same instructions and only the shapes differing. Each would be a kernel of
 * its own, paying dispatch and a helper-pool wake-up; merged, the program
 * runs over all of them in one pass (lt_fused_run_multi), the elements of
 * all segments shared out over the helpers together.
 *
 * Which steps: LT_STEP_FUSED steps (not reductions: their plans differ per
 * shape) whose finished programs are identical (compute type,
 * instructions, registers, stores; input dtypes and shapes may differ).
 * Dependencies: the step graph (a step reads a buffer another writes) gets
 * a height per step, the longest path to a step nobody reads. A step's
 * readers all have smaller heights, so merging only steps of equal height
 * cannot put two merged steps on a path to each other, and the merged step
 * graph stays acyclic: a step reading another's output is never merged
 * with it. Equal height puts the updates of all parameters together (they
 * are read by nobody: height 0) wherever their gradients were produced.
 * Donation (compile_plan.c) treats each segment's inputs on their own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"

/* Segments per merged step: bounds the step's view arrays. */
#define LT_HFUSE_MAX_SEG 4096

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0x100000001b3ull;
}

static uint64_t prog_hash(const lt_fused *f)
{
    uint64_t h = mix(0, (uint64_t)f->ctype);
    h = mix(h, (uint64_t)f->n_in);
    h = mix(h, (uint64_t)f->n_out);
    h = mix(h, (uint64_t)f->n_ins);
    h = mix(h, (uint64_t)f->n_regs);
    for (int k = 0; k < f->n_ins; k++) {
        const lt_fused_ins *in = &f->ins[k];
        h = mix(h, (uint64_t)in->op | (uint64_t)in->narrow << 16 |
                   (uint64_t)in->direct << 24 | (uint64_t)(uint32_t)in->dst << 32);
        h = mix(h, (uint64_t)(uint32_t)in->a | (uint64_t)(uint32_t)in->b << 32);
        h = mix(h, (uint64_t)(uint32_t)in->c);
    }
    for (int k = 0; k < f->n_out; k++)
        h = mix(h, (uint64_t)(uint32_t)f->out_val[k]);
    return h;
}

static int same_prog(const lt_fused *a, const lt_fused *b)
{
    if (a->ctype != b->ctype || a->n_in != b->n_in || a->n_out != b->n_out ||
        a->n_ins != b->n_ins || a->n_regs != b->n_regs ||
        a->result != b->result || a->compute_bound != b->compute_bound)
        return 0;
    for (int k = 0; k < a->n_ins; k++) {
        const lt_fused_ins *x = &a->ins[k], *y = &b->ins[k];
        if (x->op != y->op || x->narrow != y->narrow || x->direct != y->direct ||
            x->dst != y->dst || x->a != y->a || x->b != y->b || x->c != y->c)
            return 0;
    }
    for (int k = 0; k < a->n_out; k++)
        if (a->out_val[k] != b->out_val[k])
            return 0;
    return 1;
}

static int candidate(const lt_step *s)
{
    return s->kind == LT_STEP_FUSED && s->fused && s->n_seg <= 1 &&
           s->fused->result < 0 && s->n_out > 0 &&
           s->n_in == s->fused->n_in && s->n_out == s->fused->n_out;
}

/* height[s] = longest path from step s to a step no other step reads. */
static lt_status step_heights(lt_cctx *c, int *height)
{
    int ns = c->n_steps;
    int n1 = ns ? ns : 1;
    int nb = c->n_bufs ? c->n_bufs : 1;
    int *prod = malloc(nb * sizeof(int));
    int *off = calloc(ns + 1, sizeof(int));
    int *indeg = calloc(n1, sizeof(int));
    int *order = malloc(n1 * sizeof(int));
    int *adj = NULL;
    lt_status st = LT_OK;
    if (!prod || !off || !indeg || !order) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    for (int b = 0; b < c->n_bufs; b++)
        prod[b] = -1;
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < c->steps[s].n_out; k++)
            if (c->steps[s].out[k].base == LT_BASE_BUF)
                prod[c->steps[s].out[k].index] = s;
    /* edges producer -> reader, CSR by producer (duplicates harmless) */
    st = lt_cc_step_edges(c, prod, off, indeg, &adj);
    if (st != LT_OK)
        goto done;
    /* Kahn's order, then heights from the back */
    int head = 0, tail = 0;
    for (int s = 0; s < ns; s++)
        if (indeg[s] == 0)
            order[tail++] = s;
    while (head < tail) {
        int s = order[head++];
        for (int e = off[s]; e < off[s + 1]; e++)
            if (--indeg[adj[e]] == 0)
                order[tail++] = adj[e];
    }
    if (tail != ns) {
        st = lt_set_error(LT_ERR_INTERNAL, "compile: step graph has a cycle");
        goto done;
    }
    for (int t = ns - 1; t >= 0; t--) {
        int s = order[t], h = 0;
        for (int e = off[s]; e < off[s + 1]; e++)
            if (height[adj[e]] + 1 > h)
                h = height[adj[e]] + 1;
        height[s] = h;
    }
done:
    free(prod);
    free(off);
    free(indeg);
    free(order);
    free(adj);
    return st;
}

typedef struct cand {
    int height;
    uint64_t hash;
    int anchor;
    int step;
} cand;

static int cand_cmp(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    if (a->height != b->height)
        return a->height < b->height ? -1 : 1;
    if (a->hash != b->hash)
        return a->hash < b->hash ? -1 : 1;
    if (a->anchor != b->anchor)
        return a->anchor < b->anchor ? -1 : 1;
    return a->step < b->step ? -1 : a->step > b->step;
}

/* Builds in *m the merged step of steps mem[0..n) (in that order) and
 * frees their view arrays; the programs move into m->seg. */
static lt_status merge_steps(lt_cctx *c, const int *mem, int n, lt_step *m)
{
    memset(m, 0, sizeof *m);
    const lt_step *s0 = &c->steps[mem[0]];
    int per_in = s0->n_in, per_out = s0->n_out;
    m->kind = LT_STEP_FUSED;
    m->op = s0->op;
    m->attrs = s0->attrs;
    m->n_in = per_in * n;
    m->n_out = per_out * n;
    m->n_seg = n;
    m->in = malloc((m->n_in ? m->n_in : 1) * sizeof *m->in);
    m->out = malloc(m->n_out * sizeof *m->out);
    m->hint = malloc(m->n_out * sizeof *m->hint);
    m->seg = malloc(n * sizeof *m->seg);
    if (!m->in || !m->out || !m->hint || !m->seg) {
        free(m->in);
        free(m->out);
        free(m->hint);
        free(m->seg);
        memset(m, 0, sizeof *m);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    for (int k = 0; k < n; k++) {
        lt_step *s = &c->steps[mem[k]];
        memcpy(m->in + k * per_in, s->in, per_in * sizeof *m->in);
        memcpy(m->out + k * per_out, s->out, per_out * sizeof *m->out);
        for (int q = 0; q < per_out; q++) {
            int h = s->hint ? s->hint[q] : -1;
            m->hint[k * per_out + q] = h >= 0 ? h + k * per_in : -1;
        }
        m->seg[k] = s->fused;
        free(s->in);
        free(s->out);
        free(s->hint);
        memset(s, 0, sizeof *s);
        s->kind = -1;           /* merged away */
    }
    m->fused = m->seg[0];
    return LT_OK;
}

lt_status lt_cc_hfuse(lt_cctx *c)
{
    int ns = c->n_steps;
    if (c->no_hfuse || ns < 2)
        return LT_OK;
    int *height = calloc(ns, sizeof(int));
    cand *cd = malloc(ns * sizeof *cd);
    int *mem = malloc(ns * sizeof(int));
    uint8_t *taken = calloc(ns, 1);
    lt_step *nsteps = NULL;
    int *nanchor = NULL;
    lt_status st = LT_OK;
    if (!height || !cd || !mem || !taken) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    st = step_heights(c, height);
    if (st != LT_OK)
        goto done;
    int nc = 0;
    for (int s = 0; s < ns; s++)
        if (candidate(&c->steps[s]))
            cd[nc++] = (cand){height[s], prog_hash(c->steps[s].fused),
                              c->step_anchor[s], s};
    if (nc < 2)
        goto done;
    qsort(cd, nc, sizeof *cd, cand_cmp);
    /* merged steps are appended after the survivors: at most ns / 2 */
    nsteps = malloc((ns + ns / 2 + 1) * sizeof *nsteps);
    nanchor = malloc((ns + ns / 2 + 1) * sizeof *nanchor);
    if (!nsteps || !nanchor) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    int n_new = 0, merged = 0;
    lt_step *extra = nsteps + ns;   /* scratch tail for merged steps */
    int *extra_anchor = nanchor + ns;
    for (int i = 0; i < nc; ) {
        int j = i;
        while (j < nc && cd[j].height == cd[i].height && cd[j].hash == cd[i].hash)
            j++;
        /* within the run: members identical to the first untaken one */
        for (int a = i; a < j; a++) {
            if (taken[cd[a].step])
                continue;
            const lt_fused *lead = c->steps[cd[a].step].fused;
            int n = 0, anchor = cd[a].anchor;
            for (int b = a; b < j && n < LT_HFUSE_MAX_SEG; b++) {
                const lt_step *sb = &c->steps[cd[b].step];
                if (taken[cd[b].step] || (b > a && !same_prog(lead, sb->fused)))
                    continue;
                mem[n++] = cd[b].step;
                taken[cd[b].step] = 1;
                if (cd[b].anchor > anchor)
                    anchor = cd[b].anchor;
            }
            if (n < 2) {
                taken[mem[0]] = 0;
                continue;
            }
            st = merge_steps(c, mem, n, &extra[merged]);
            if (st != LT_OK)
                goto fail;
            extra_anchor[merged++] = anchor;
        }
        i = j;
    }
    if (merged == 0)
        goto done;
    for (int s = 0; s < ns; s++)
        if (c->steps[s].kind != -1) {
            nanchor[n_new] = c->step_anchor[s];
            nsteps[n_new++] = c->steps[s];
        }
    /* n_new + merged <= ns: move the merged steps behind the survivors */
    memmove(nsteps + n_new, extra, merged * sizeof *nsteps);
    memmove(nanchor + n_new, extra_anchor, merged * sizeof *nanchor);
    n_new += merged;
    memcpy(c->steps, nsteps, n_new * sizeof *nsteps);
    memcpy(c->step_anchor, nanchor, n_new * sizeof *nanchor);
    c->n_steps = n_new;
    goto done;
fail:
    /* keep the context consistent for ctx_free: merged steps become
     * ordinary steps again, steps merged away vanish (their programs
     * live in the merged steps) */
    for (int k = 0; k < merged; k++) {
        lt_step *m = &extra[k];
        for (int q = 1; q < m->n_seg; q++)
            lt_fused_free(m->seg[q]);
        free(m->seg);
        free(m->in);
        free(m->out);
        free(m->hint);
        lt_fused_free(m->fused);
    }
    {
        int w = 0;
        for (int s = 0; s < ns; s++)
            if (c->steps[s].kind != -1)
                c->steps[w++] = c->steps[s];
        c->n_steps = w;
    }
done:
    free(height);
    free(cd);
    free(mem);
    free(taken);
    free(nsteps);
    free(nanchor);
    return st;
}
