/*
 * lazy/compile.c — lt_compile: runs the compiler passes (see compile_int.h)
 * and owns the program object (queries, refcount). Shared helpers of the
 * passes live here too.
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"
#include "tensor.h"

size_t lt_cc_esize(lt_dtype dt)
{
    size_t n = lt_dtype_size(dt);
    return n ? n : 1;
}

void lt_slot_store(uint64_t *slot, double value, lt_dtype dt)
{
    *slot = 0;
    if (lt_dtype_size(dt) <= sizeof *slot)   /* saturating, rounding like a cast */
        lt_convert(&value, LT_F64, slot, dt, 1);
}

int lt_cc_group(lt_cctx *c, int p)
{
    while (c->uf[p] != p) {
        c->uf[p] = c->uf[c->uf[p]];
        p = c->uf[p];
    }
    return p;
}

int lt_cc_new_buf(lt_cctx *c, int64_t bytes)
{
    if (c->n_bufs == c->cap_bufs) {
        int nc = c->cap_bufs ? 2 * c->cap_bufs : 16;
        lt_cbuf *nb = realloc(c->bufs, nc * sizeof *nb);
        if (!nb)
            return -1;
        c->bufs = nb;
        c->cap_bufs = nc;
    }
    lt_cbuf *b = &c->bufs[c->n_bufs];
    b->bytes = bytes;
    b->output = -1;
    b->first = b->last = -1;
    b->offset = 0;
    b->is_alias = 0;
    b->al_base = 0;
    b->al_index = -1;
    b->al_off = 0;
    b->after = NULL;
    b->n_after = 0;
    return c->n_bufs++;
}

void lt_cc_resolve_alias(const lt_cctx *c, lt_pview *pv)
{
    if (pv->base != LT_BASE_BUF || !c->bufs[pv->index].is_alias)
        return;
    const lt_cbuf *b = &c->bufs[pv->index];
    pv->base = b->al_base;
    pv->index = b->al_index;
    pv->byte_off = b->al_off;
}

lt_pview lt_cc_buf_view(int buf, const lt_shape *s, lt_dtype dt)
{
    lt_pview pv;
    memset(&pv, 0, sizeof pv);
    pv.base = LT_BASE_BUF;
    pv.index = buf;
    pv.v.dtype = dt;
    pv.v.shape = *s;
    lt_contiguous_strides(s, pv.v.strides);
    return pv;
}

lt_status lt_cc_materialise(lt_cctx *c, int p)
{
    lt_cnode *cn = &c->cn[p];
    if (cn->has_pv)
        return LT_OK;
    const lt_node *nd = lt_cc_node(c, p);
    cn->buf = lt_cc_new_buf(c, lt_shape_numel(&nd->shape) *
                            (int64_t)lt_cc_esize(nd->dtype));
    if (cn->buf < 0)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    cn->pv = lt_cc_buf_view(cn->buf, &nd->shape, nd->dtype);
    cn->has_pv = 1;
    if (cn->kind == CN_EW)
        cn->stored = 1;
    return LT_OK;
}

lt_pview lt_cc_broadcast(const lt_pview *pv, const lt_shape *shape)
{
    lt_pview o = *pv;
    int off = shape->ndim - pv->v.shape.ndim;
    o.v.shape = *shape;
    for (int k = 0; k < LT_MAX_DIMS; k++)
        o.v.strides[k] = 0;
    for (int k = 0; k < shape->ndim; k++) {
        if (k < off)
            continue;
        int64_t d = pv->v.shape.dims[k - off];
        o.v.strides[k] = (d == 1 && shape->dims[k] != 1) ? 0
                         : pv->v.strides[k - off];
    }
    return o;
}

int lt_cc_add_step(lt_cctx *c, const lt_step *s, int anchor)
{
    if (c->n_steps == c->cap_steps) {
        int nc = c->cap_steps ? 2 * c->cap_steps : 16;
        lt_step *ns = realloc(c->steps, nc * sizeof *ns);
        if (!ns)
            return -1;
        c->steps = ns;
        int *na = realloc(c->step_anchor, nc * sizeof *na);
        if (!na)
            return -1;
        c->step_anchor = na;
        c->cap_steps = nc;
    }
    c->steps[c->n_steps] = *s;
    c->step_anchor[c->n_steps] = anchor;
    return c->n_steps++;
}

static void free_step(lt_step *s)
{
    for (int k = 1; k < s->n_seg; k++)
        lt_fused_free(s->seg[k]);
    free(s->seg);
    free(s->in);
    free(s->out);
    free(s->hint);
    lt_fused_free(s->fused);
}

void lt_program_destroy(lt_program *p)
{
    if (!p)
        return;
    for (int k = 0; k < p->n_steps; k++)
        free_step(&p->steps[k]);
    free(p->steps);
    free(p->param_scalar);
    free(p->param_dtype);
    free(p->out_shape);
    free(p->out_dtype);
    free(p->out_donor);
    free(p->out_alias);
    free(p->out_same);
    free(p->consts);
    free(p);
}

static void ctx_free(lt_cctx *c)
{
    free(c->cn);
    free(c->param_of_pos);
    for (int b = 0; b < c->n_bufs; b++)
        free(c->bufs[b].after);
    free(c->bufs);
    free(c->uf);
    free(c->gsize);
    if (c->steps)
        for (int k = 0; k < c->n_steps; k++)
            free_step(&c->steps[k]);
    free(c->steps);
    free(c->step_anchor);
    free(c->consts);
    free(c->const_dtype);
    free(c->mark);
    free(c->stack);
}

lt_status lt_compile_with(const lt_graph *g, const lt_compile_opts *o, lt_program **out)
{
    *out = NULL;
    lt_cctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.n = g->n_nodes;
    int n1 = c.n ? c.n : 1;
    c.cn = calloc(n1, sizeof *c.cn);
    c.param_of_pos = malloc(n1 * sizeof(int));
    c.uf = malloc(n1 * sizeof(int));
    c.gsize = calloc(n1, sizeof(int));
    c.mark = calloc(n1, sizeof(int));
    c.stack = malloc(n1 * sizeof(int));
    c.prog = calloc(1, sizeof *c.prog);
    if (!c.cn || !c.param_of_pos || !c.uf || !c.gsize || !c.mark ||
        !c.stack || !c.prog) {
        free(c.prog);
        ctx_free(&c);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    for (int i = 0; i < c.n; i++) {
        c.param_of_pos[i] = -1;
        c.uf[i] = i;
        c.gsize[i] = 1;
    }
    for (int j = 0; j < g->n_params; j++)
        c.param_of_pos[g->param_pos[j]] = j;
    c.no_fuse = c.prog->check_finite = o && o->check_finite;
    c.no_hfuse = c.no_fuse || (o && o->no_hfuse);
    c.no_epilogue = o && o->no_epilogue;
    c.prog->mm_precision = g->mm_precision;

    lt_status st = lt_cc_cse(&c);
    if (st == LT_OK)
        st = lt_cc_views(&c);
    if (st == LT_OK)
        st = lt_cc_patterns(&c);
    if (st == LT_OK)
        st = lt_cc_fuse(&c);
    if (st == LT_OK)
        st = lt_cc_epilogues(&c);
    if (st == LT_OK)
        st = lt_cc_emit(&c);
    if (st == LT_OK)
        st = lt_cc_hfuse(&c);
    if (st == LT_OK)
        st = lt_cc_plan(&c);
    if (st != LT_OK) {
        lt_program_destroy(c.prog);
        ctx_free(&c);
        return st;
    }
    lt_program *p = c.prog;
    atomic_init(&p->refs, 1);
    /* lt_cc_plan moved the steps and constants into the program */
    c.steps = NULL;
    c.n_steps = 0;
    ctx_free(&c);
    *out = p;
    return LT_OK;
}

lt_program *lt_program_retain(lt_program *p)
{
    if (p)
        atomic_fetch_add(&p->refs, 1);
    return p;
}

void lt_program_release(lt_program *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        lt_program_destroy(p);
}

int lt_program_n_params(const lt_program *p) { return p->n_params; }
int lt_program_n_outputs(const lt_program *p) { return p->n_outputs; }

const lt_shape *lt_program_output_shape(const lt_program *p, int k)
{
    return &p->out_shape[k];
}

lt_dtype lt_program_output_dtype(const lt_program *p, int k)
{
    return (lt_dtype)p->out_dtype[k];
}

int lt_program_output_donor(const lt_program *p, int k)
{
    return p->out_donor[k];
}

int lt_program_output_alias(const lt_program *p, int k)
{
    return p->out_alias[k];
}

int lt_program_output_same(const lt_program *p, int k)
{
    return p->out_same ? p->out_same[k] : -1;
}

size_t lt_program_scratch_bytes(const lt_program *p)
{
    return p->scratch_bytes;
}

int lt_program_n_kernels(const lt_program *p) { return p->n_kernels; }
