/*
 * lazy/compile_emit.c — turns classified, fused nodes into program steps:
 * one fused step per elementwise group (not absorbed by a reduction), one
 * reduce step per reduction (with its absorbed producer group), one kernel
 * step per library op or materialising copy, and a copy step per output that
 * is neither produced in place, an alias of a parameter, nor the buffer of
 * an earlier output (the same value reached twice).
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"

typedef struct emit_state {
    int *head, *nxt;   /* group member lists (ascending positions) */
    int *val;          /* position -> SSA value in the current program */
    int *loadval;      /* position -> SSA value of its load */
} emit_state;

/* Pushes pv onto a growable pview array. */
static int push_pv(lt_pview **arr, int *n, int *cap, const lt_pview *pv)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 4;
        lt_pview *na = realloc(*arr, nc * sizeof *na);
        if (!na)
            return -1;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = *pv;
    return 0;
}

/* Builds the fused program of group `root`. With red >= 0 it becomes the
 * producer of reduction `red` (iteration order of plan; result = the
 * reduce's input). */
static lt_status build_group(lt_cctx *c, emit_state *es, int root, int red,
                             const lt_reduce_plan *plan, lt_step *s)
{
    const lt_node *rn = lt_cc_node(c, root);
    lt_shape shape = rn->shape;
    if (red >= 0) {
        lt_pview tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.v.shape = shape;
        lt_reduce_permute_view(plan, &tmp.v);
        shape = tmp.v.shape;
    }
    lt_fused *f = lt_fused_new(c->cn[root].ctype, &shape, 0);
    if (!f)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    s->fused = f;
    int cap_in = 0, cap_out = 0;
#define oom lt_set_error(LT_ERR_OOM, "compile: out of host memory")
    for (int m = es->head[root]; m >= 0; m = es->nxt[m]) {
        const lt_node *nd = lt_cc_node(c, m);
        int ops[3] = {-1, -1, -1};
        int na = lt_cc_nin(c, m);
        for (int k = 0; k < na && k < 3; k++) {
            int q = lt_cc_in(c, m, k);
            if (c->cn[q].kind == CN_EW && lt_cc_group(c, q) == root &&
                es->val[q] >= 0) {
                ops[k] = es->val[q];
                continue;
            }
            if (es->loadval[q] < 0) {
                if (!c->cn[q].has_pv)
                    return lt_set_error(LT_ERR_INTERNAL, "compile: operand %d "
                                        "of %s has no buffer", q,
                                        lt_op_name(nd->op));
                lt_pview pv = lt_cc_broadcast(&c->cn[q].pv, &rn->shape);
                if (red >= 0)
                    lt_reduce_permute_view(plan, &pv.v);
                if (push_pv(&s->in, &s->n_in, &cap_in, &pv) < 0)
                    return oom;
                f->n_in = s->n_in;
                es->loadval[q] = lt_fused_load(f, s->n_in - 1);
                if (es->loadval[q] < 0)
                    return oom;
            }
            ops[k] = es->loadval[q];
        }
        es->val[m] = lt_fused_op(f, nd->op, nd->dtype, ops[0], ops[1], ops[2]);
        if (es->val[m] < 0)
            return oom;
        if (c->cn[m].stored) {
            if (lt_fused_store(f, es->val[m]) < 0 ||
                push_pv(&s->out, &s->n_out, &cap_out, &c->cn[m].pv) < 0)
                return oom;
        }
    }
    if (red >= 0)
        lt_fused_set_result(f, es->val[lt_cc_in(c, red, 0)]);
    /* donation hints: follow operand 0 from each stored member to the input
     * it updates (p - lr * g -> p; m * b + g * (1 - b) -> m) */
    if (s->n_out) {
        s->hint = malloc(s->n_out * sizeof *s->hint);
        if (!s->hint)
            return oom;
        int k = 0;
        for (int m = es->head[root]; m >= 0; m = es->nxt[m]) {
            if (!c->cn[m].stored)
                continue;
            int q = m, guard = 0;
            while (c->cn[q].kind == CN_EW && lt_cc_group(c, q) == root &&
                   lt_cc_nin(c, q) > 0 && guard++ < c->n)
                q = lt_cc_in(c, q, 0);
            int hint = -1;
            if (es->loadval[q] >= 0)
                hint = f->ins[es->loadval[q]].a;
            s->hint[k++] = hint;
        }
    }
    /* reset the maps touched by this group */
    for (int m = es->head[root]; m >= 0; m = es->nxt[m]) {
        es->val[m] = -1;
        for (int k = 0; k < lt_cc_nin(c, m); k++)
            es->loadval[lt_cc_in(c, m, k)] = -1;
    }
    return lt_fused_finish(f);
#undef oom
}

static lt_status emit_reduce(lt_cctx *c, emit_state *es, int i)
{
    const lt_node *nd = lt_cc_node(c, i);
    int p = lt_cc_in(c, i, 0);
    const lt_node *pn = lt_cc_node(c, p);
    lt_step s;
    memset(&s, 0, sizeof s);
    s.kind = LT_STEP_REDUCE;
    s.op = nd->op;
    s.attrs = nd->attrs;
    lt_status st = lt_reduce_plan_make(nd->op, &nd->attrs, &pn->shape, &s.plan);
    if (st != LT_OK)
        return st;
    /* out[0] is the result; producer stores follow */
    s.out = malloc(sizeof *s.out);
    if (!s.out)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    s.out[0] = c->cn[i].pv;
    s.n_out = 1;
    int root = c->cn[p].kind == CN_EW ? lt_cc_group(c, p) : -1;
    if (root >= 0 && c->cn[root].absorbed_by == i) {
        lt_step g;
        memset(&g, 0, sizeof g);
        st = build_group(c, es, root, i, &s.plan, &g);
        if (st == LT_OK) {
            s.fused = g.fused;
            s.in = g.in;
            s.n_in = g.n_in;
            if (g.n_out) {
                lt_pview *no = realloc(s.out, (1 + g.n_out) * sizeof *no);
                if (!no)
                    st = lt_set_error(LT_ERR_OOM, "compile: out of memory");
                else {
                    s.out = no;
                    memcpy(s.out + 1, g.out, g.n_out * sizeof *no);
                    s.n_out = 1 + g.n_out;
                }
                /* donation hints of the stores (out[0]: the result) */
                if (st == LT_OK && g.hint &&
                    (s.hint = malloc((1 + g.n_out) * sizeof *s.hint))) {
                    s.hint[0] = -1;
                    memcpy(s.hint + 1, g.hint, g.n_out * sizeof *s.hint);
                }
            }
            free(g.out);
            free(g.hint);
        } else {
            free(g.in);
            free(g.out);
            free(g.hint);
            lt_fused_free(g.fused);
        }
    } else {
        if (!c->cn[p].has_pv)
            st = lt_set_error(LT_ERR_INTERNAL, "compile: reduce input %d "
                              "not materialised", p);
        else {
            s.in = malloc(sizeof *s.in);
            lt_dtype dt = pn->dtype;
            lt_pview pv = c->cn[p].pv;
            lt_reduce_permute_view(&s.plan, &pv.v);
            s.fused = lt_fused_new(lt_fused_ctype(&dt, 1), &pv.v.shape, 1);
            if (!s.in || !s.fused)
                st = lt_set_error(LT_ERR_OOM, "compile: out of memory");
            else {
                s.in[0] = pv;
                s.n_in = 1;
                int x = lt_fused_load(s.fused, 0);
                lt_fused_set_result(s.fused, x);
                st = x < 0 ? lt_set_error(LT_ERR_OOM, "compile: out of memory")
                           : lt_fused_finish(s.fused);
            }
        }
    }
    if (st == LT_OK && lt_cc_add_step(c, &s, i) < 0)
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    if (st != LT_OK) {
        free(s.in);
        free(s.out);
        free(s.hint);
        lt_fused_free(s.fused);
    }
    return st;
}

/* The kernel step of node i (not added) into *out. */
static lt_status emit_kernel_step(lt_cctx *c, int i, lt_step *out)
{
    lt_cnode *cn = &c->cn[i];
    lt_step s;
    memset(&s, 0, sizeof s);
    s.kind = LT_STEP_KERNEL;
    /* a folded pattern (compile_pattern.c): run src's op on its operands */
    int src = cn->fold_src ? cn->fold_src - 1 : i;
    const lt_node *sn = lt_cc_node(c, src);
    s.op = sn->op;
    s.attrs = sn->attrs;
    int na = cn->copy_src ? 1 : lt_cc_nin(c, src) + (cn->fold_scale != 0);
    s.in = malloc((na ? na : 1) * sizeof *s.in);
    s.out = malloc(sizeof *s.out);
    if (!s.in || !s.out) {
        free(s.in);
        free(s.out);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    s.n_in = na;
    s.n_out = 1;
    if (cn->copy_src) {
        s.fn = lt_kernel_view;
        s.in[0] = cn->copy_in;
        s.out[0] = lt_cc_buf_view(cn->buf, &cn->copy_in.v.shape,
                                  cn->copy_in.v.dtype);
    } else {
        s.fn = lt_kernel_for(sn->op);
        for (int k = 0; k < na; k++) {
            int q = cn->fold_scale && k == na - 1 ? cn->fold_scale - 1
                    : cn->fold_in0 && k == 0     ? cn->fold_in0 - 1
                                                 : lt_cc_in(c, src, k);
            if (!c->cn[q].has_pv) {
                free(s.in);
                free(s.out);
                return lt_set_error(LT_ERR_INTERNAL, "compile: input %d of %s "
                                    "not materialised", k, lt_op_name(sn->op));
            }
            s.in[k] = c->cn[q].pv;
        }
        s.out[0] = cn->pv;
    }
    *out = s;
    return LT_OK;
}

static lt_status emit_kernel(lt_cctx *c, int i)
{
    lt_step s;
    lt_status st = emit_kernel_step(c, i, &s);
    if (st != LT_OK)
        return st;
    if (lt_cc_add_step(c, &s, i) < 0) {
        free(s.in);
        free(s.out);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    return LT_OK;
}

/* An mm / addmm kernel i with its epilogue group (compile_pattern.c
 * lt_cc_epilogues): one step, the GEMM's operands then the group's
 * inputs, the GEMM's result then the group's stores; anchored at the
 * group's last member. */
static lt_status emit_gemm_epi(lt_cctx *c, emit_state *es, int i, int anchor)
{
    lt_step k, g;
    memset(&g, 0, sizeof g);
    lt_status st = emit_kernel_step(c, i, &k);
    if (st != LT_OK)
        return st;
    st = build_group(c, es, c->cn[i].epi_group - 1, -1, NULL, &g);
    lt_pview *in = NULL, *out = NULL;
    if (st == LT_OK) {
        in = malloc((k.n_in + g.n_in) * sizeof *in);
        out = malloc((1 + g.n_out) * sizeof *out);
        if (!in || !out)
            st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    if (st == LT_OK) {
        memcpy(in, k.in, k.n_in * sizeof *in);
        if (g.n_in)
            memcpy(in + k.n_in, g.in, g.n_in * sizeof *in);
        out[0] = k.out[0];
        if (g.n_out)
            memcpy(out + 1, g.out, g.n_out * sizeof *out);
        lt_step s = k;
        s.kind = LT_STEP_GEMM_EPI;
        s.in = in;
        s.n_in = k.n_in + g.n_in;
        s.out = out;
        s.n_out = 1 + g.n_out;
        s.fused = g.fused;
        /* donation hints of the stores (out[0]: the GEMM's result) */
        s.hint = g.n_out && g.hint ? malloc((1 + g.n_out) * sizeof *s.hint) : NULL;
        for (int q = 0; s.hint && q <= g.n_out; q++)
            s.hint[q] = q == 0 || g.hint[q - 1] < 0 ? -1 : g.hint[q - 1] + k.n_in;
        if (lt_cc_add_step(c, &s, anchor) < 0)
            st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        else
            g.fused = NULL, in = out = NULL, s.hint = NULL;
        free(s.hint);
    }
    free(in);
    free(out);
    free(k.in);
    free(k.out);
    free(g.in);
    free(g.out);
    free(g.hint);
    lt_fused_free(g.fused);
    return st;
}

/* Output k: produced in place, an alias of a parameter, or copied. */
static lt_status emit_output(lt_cctx *c, int k)
{
    lt_program *p = c->prog;
    int pos = c->cn[c->g->output_pos[k]].canon;
    const lt_node *nd = lt_cc_node(c, pos);
    lt_cnode *cn = &c->cn[pos];
    p->out_shape[k] = nd->shape;
    p->out_dtype[k] = nd->dtype;
    p->out_alias[k] = -1;
    p->out_donor[k] = -1;
    p->out_same[k] = -1;
    lt_pview rpv = cn->pv;
    lt_cc_resolve_alias(c, &rpv);   /* a barrier's value: the storage it names */
    const lt_pview *pv = &rpv;
    int contig = cn->has_pv && pv->v.offset == 0 &&
                 lt_view_is_contiguous(&pv->v);
    int64_t bytes = lt_shape_numel(&nd->shape) * (int64_t)lt_cc_esize(nd->dtype);
    if (contig && pv->base == LT_BASE_BUF && c->bufs[pv->index].bytes == bytes) {
        if (c->bufs[pv->index].output < 0) {
            c->bufs[pv->index].output = k;
            return LT_OK;
        }
        if (c->bufs[pv->index].output < k) {  /* an earlier output's buffer */
            p->out_same[k] = c->bufs[pv->index].output;
            return LT_OK;
        }
    }
    if (contig && pv->base == LT_BASE_PARAM) {
        const lt_node *pn = lt_cc_node(c, c->g->param_pos[pv->index]);
        if (lt_shape_numel(&pn->shape) == lt_shape_numel(&nd->shape) &&
            pn->dtype == nd->dtype) {
            p->out_alias[k] = pv->index;
            return LT_OK;
        }
    }
    if (!cn->has_pv)
        return lt_set_error(LT_ERR_INTERNAL, "compile: output %d has no value",
                            k);
    lt_step s;
    memset(&s, 0, sizeof s);
    s.kind = LT_STEP_KERNEL;
    s.op = LT_OP_copy;
    s.fn = lt_kernel_view;
    s.in = malloc(sizeof *s.in);
    s.out = malloc(sizeof *s.out);
    if (!s.in || !s.out) {
        free(s.in);
        free(s.out);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    s.n_in = s.n_out = 1;
    s.in[0] = *pv;
    s.out[0] = lt_cc_buf_view(0, &nd->shape, nd->dtype);
    s.out[0].base = LT_BASE_OUTPUT;
    s.out[0].index = k;
    if (lt_cc_add_step(c, &s, c->n + k) < 0) {
        free(s.in);
        free(s.out);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    return LT_OK;
}

lt_status lt_cc_emit(lt_cctx *c)
{
    int n1 = c->n ? c->n : 1;
    emit_state es;
    es.head = malloc(n1 * sizeof(int));
    es.nxt = malloc(n1 * sizeof(int));
    es.val = malloc(n1 * sizeof(int));
    es.loadval = malloc(n1 * sizeof(int));
    int *tail = malloc(n1 * sizeof(int));
    lt_program *p = c->prog;
    int no = c->g->n_outputs ? c->g->n_outputs : 1;
    p->n_outputs = c->g->n_outputs;
    p->out_shape = calloc(no, sizeof *p->out_shape);
    p->out_dtype = calloc(no, 1);
    p->out_alias = malloc(no * sizeof(int));
    p->out_same = malloc(no * sizeof(int));
    p->out_donor = malloc(no * sizeof(int));
    lt_status st = LT_OK;
    if (!es.head || !es.nxt || !es.val || !es.loadval || !tail ||
        !p->out_shape || !p->out_dtype || !p->out_alias || !p->out_donor ||
        !p->out_same) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    for (int i = 0; i < c->n; i++) {
        es.head[i] = es.nxt[i] = es.val[i] = es.loadval[i] = tail[i] = -1;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->cn[i].kind != CN_EW)
            continue;
        int r = lt_cc_group(c, i);
        if (es.head[r] < 0)
            es.head[r] = i;
        else
            es.nxt[tail[r]] = i;
        tail[r] = i;
    }
    for (int i = 0; i < c->n && st == LT_OK; i++) {
        lt_cnode *cn = &c->cn[i];
        if (cn->kind == CN_EW && tail[i] >= 0 && cn->absorbed_by < 0 && !cn->epi_of) {
            /* i is a group root; the step is anchored at its last member
             * and lt_cc_plan orders steps topologically */
            lt_step s;
            memset(&s, 0, sizeof s);
            s.kind = LT_STEP_FUSED;
            st = build_group(c, &es, i, -1, NULL, &s);
            if (st == LT_OK && s.n_out == 0) {   /* nothing needed */
                free(s.in);
                lt_fused_free(s.fused);
                continue;
            }
            if (st == LT_OK && lt_cc_add_step(c, &s, tail[i]) < 0)
                st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
            if (st != LT_OK) {
                free(s.in);
                free(s.out);
                lt_fused_free(s.fused);
            }
        } else if (cn->kind == CN_REDUCE) {
            st = emit_reduce(c, &es, i);
        } else if (cn->kind == CN_KERNEL && cn->epi_group) {
            int t = tail[cn->epi_group - 1];
            st = emit_gemm_epi(c, &es, i, t > i ? t : i);
        } else if (cn->kind == CN_KERNEL) {
            st = emit_kernel(c, i);
        }
    }
    for (int k = 0; k < c->g->n_outputs && st == LT_OK; k++)
        st = emit_output(c, k);
done:
    free(es.head);
    free(es.nxt);
    free(es.val);
    free(es.loadval);
    free(tail);
    return st;
}
