/*
 * lazy/compile_pattern.c — kernel epilogues/prologues found in the graph.
 *
 * bmm of merged heads: a reshape [B1, B2, r, c] -> [B1*B2, r, c] that had to
 * be materialised (a transposed source), used only by bmm kernels (directly
 * or with its last two dims swapped) is read in place by the bmms as a 4-D
 * operand (lazy/kernels/matmul.c).
 *
 * bmm into merged heads: a materialising copy of a bmm's result seen
 * through views ([B1*B2, r, c] -> [B1, B2, r, c] -> transposed, e.g. the
 * attention output before it is reshaped to [B, s, H*d]) that is the bmm's
 * only use: the bmm writes the copy's layout directly (a 4-D strided result).
 *
 * cat of reshapes: a reshape that had to be materialised (its source is a
 * strided view, e.g. the transposed per-head gradients of attention) and
 * is used only by a cat is not copied first: the cat reads the source and
 * writes it into its region of the output directly (lazy/kernels/cat.c).
 *
 * Runs after lt_cc_views (every live node classified) and before fusion.
 * A multiplication by a scalar next to a softmax kernel costs a full pass
 * over the (large) attention scores; the softmax kernel applies the scale
 * for free while the row is in registers (lazy/kernels/norm.c takes the
 * scalar as an extra last input):
 *
 *   softmax(mul(x, s))               -> softmax(x, s)          [forward]
 *   mul(softmax_backward(g, y), s)   -> softmax_backward(g, y, s)  [backward]
 *
 * s is a 0-d scalar (constant, scalar parameter or 0-d device tensor); the
 * mul must have x's shape and dtype (no broadcast, no promotion), and the
 * folded node must have no other user and not be a graph output. The
 * folded node becomes CN_DEAD; the kernel step reads its operands instead
 * (lt_cnode.fold_src / fold_scale, used by compile_emit.c). Skipped when
 * fusion is off (LAZYTPU_CHECK_FINITE: one op per step).
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"
#include "kernels/kutil.h"

/* Position of mul node m's 0-d scalar operand (the other one is returned in
 * *x), or -1. */
static int scalar_operand(lt_cctx *c, int m, int *x)
{
    const lt_node *nd = lt_cc_node(c, m);
    if (nd->op != LT_OP_mul || lt_cc_nin(c, m) != 2 || c->cn[m].kind != CN_EW)
        return -1;
    for (int k = 0; k < 2; k++) {
        int s = lt_cc_in(c, m, k), o = lt_cc_in(c, m, 1 - k);
        const lt_node *sn = lt_cc_node(c, s), *on = lt_cc_node(c, o);
        int kind = c->cn[s].kind;
        if (sn->shape.ndim != 0 || !c->cn[s].has_pv ||
            (kind != CN_CONST && kind != CN_SLOT && kind != CN_PARAM))
            continue;
        if (s == o || !lt_shape_equal(&on->shape, &nd->shape) || on->dtype != nd->dtype ||
            !lt_dtype_is_float(nd->dtype))
            continue;
        *x = o;
        return s;
    }
    return -1;
}

static int single_use(const lt_cctx *c, int p)
{
    return c->cn[p].n_users == 1 && c->cn[p].output < 0;
}

/* cat node i reads input q (a materialising reshape copy used only here)
 * from the copy's strided source instead, when its region of the output
 * can be viewed in the source's shape (lazy/kernels/cat.c). */
static void cat_reads_sources(lt_cctx *c, int i)
{
    const lt_node *nd = lt_cc_node(c, i);
    int ndim = nd->shape.ndim;
    int64_t dim = nd->attrs.n > 0 ? nd->attrs.i[0] : 0;
    if (dim < 0)
        dim += ndim;
    if (dim < 0 || dim >= ndim)
        return;
    for (int k = 0; k < lt_cc_nin(c, i); k++) {
        int q = lt_cc_in(c, i, k);
        lt_cnode *cq = &c->cn[q];
        const lt_node *qn = lt_cc_node(c, q);
        if (cq->kind != CN_KERNEL || !cq->copy_src || qn->op != LT_OP_reshape ||
            !single_use(c, q) || qn->shape.ndim != ndim || qn->dtype != nd->dtype ||
            cq->copy_in.v.dtype != qn->dtype)
            continue;
        lt_view r;
        memset(&r, 0, sizeof r);
        r.dtype = nd->dtype;
        r.shape = nd->shape;
        lt_contiguous_strides(&nd->shape, r.strides);
        r.shape.dims[dim] = qn->shape.dims[dim];
        int64_t st[LT_MAX_DIMS];
        if (!lt_kutil_reshape_strides(&r, &cq->copy_in.v.shape, st))
            continue;
        /* q becomes a view of its source, in the source's shape; its
         * buffer is never produced */
        cq->kind = CN_VIEW;
        cq->copy_src = 0;
        cq->pv = cq->copy_in;
    }
}

/* 1 if every live use of node q is as an operand of a bmm kernel; with
 * allow_t, also through views that swap q's last two dims (permute
 * [0, 2, 1], not outputs) used only by bmm kernels, which are listed in
 * tv[] (*ntv, at most cap). */
static int bmm_only_users(lt_cctx *c, int q, int allow_t, int *tv, int *ntv, int cap)
{
    int seen = 0;
    for (int j = q + 1; j < c->n; j++) {
        lt_cnode *cj = &c->cn[j];
        if (cj->kind == CN_DEAD)
            continue;
        for (int k = 0; k < lt_cc_nin(c, j); k++) {
            if (lt_cc_in(c, j, k) != q)
                continue;
            seen++;
            const lt_node *jn = lt_cc_node(c, j);
            if (cj->kind == CN_KERNEL && !cj->copy_src && !cj->fold_src && jn->op == LT_OP_bmm)
                continue;
            if (!allow_t || cj->kind != CN_VIEW || cj->output >= 0 || jn->op != LT_OP_permute ||
                jn->attrs.n != 3 || jn->attrs.i[0] != 0 || jn->attrs.i[1] != 2 ||
                jn->attrs.i[2] != 1 || *ntv >= cap || !bmm_only_users(c, j, 0, NULL, NULL, 0))
                return 0;
            tv[(*ntv)++] = j;
        }
    }
    return seen == c->cn[q].n_users;
}

/* A materialising reshape [B1, B2, r, c] -> [B1*B2, r, c] (the attention's
 * heads merged into the batch) read only by bmm kernels, directly or
 * transposed: the bmms read the strided 4-D source in place instead
 * (lazy/kernels/matmul.c), and the copy is not made. */
static void bmm_reads_source(lt_cctx *c, int q)
{
    lt_cnode *cq = &c->cn[q];
    const lt_node *qn = lt_cc_node(c, q);
    const lt_view *src = &cq->copy_in.v;
    if (qn->op != LT_OP_reshape || cq->output >= 0 || qn->shape.ndim != 3 ||
        src->shape.ndim != 4 || !lt_dtype_is_float(qn->dtype) || src->dtype != qn->dtype ||
        lt_dtype_is_complex(qn->dtype) ||
        src->shape.dims[0] * src->shape.dims[1] != qn->shape.dims[0] ||
        src->shape.dims[2] != qn->shape.dims[1] || src->shape.dims[3] != qn->shape.dims[2])
        return;
    int tv[8], ntv = 0;
    if (!bmm_only_users(c, q, 1, tv, &ntv, 8))
        return;
    cq->kind = CN_VIEW;
    cq->copy_src = 0;
    cq->pv = cq->copy_in;
    for (int t = 0; t < ntv; t++) {
        lt_pview *pv = &c->cn[tv[t]].pv;
        *pv = cq->copy_in;
        int64_t d = pv->v.shape.dims[2], st = pv->v.strides[2];
        pv->v.shape.dims[2] = pv->v.shape.dims[3];
        pv->v.strides[2] = pv->v.strides[3];
        pv->v.shape.dims[3] = d;
        pv->v.strides[3] = st;
    }
}

/* A materialising copy q whose source is the result of a bmm kernel m,
 * reached only through views ([B1*B2, M, N] -> [B1, B2, M, N] -> a
 * permutation: the attention's heads merged back into the width), used by
 * nothing else: m writes its result straight into q's buffer as a 4-D
 * strided result [B1, B2, M, N] (lazy/kernels/matmul.c) and q becomes a
 * view of that buffer; the copy is not made. */
static void bmm_writes_dest(lt_cctx *c, int q)
{
    lt_cnode *cq = &c->cn[q];
    const lt_node *qn = lt_cc_node(c, q);
    const lt_view *src = &cq->copy_in.v;
    if (cq->copy_in.base != LT_BASE_BUF || cq->copy_in.byte_off != 0 || src->offset != 0 ||
        src->shape.ndim != 4 || src->dtype != qn->dtype ||
        (qn->dtype != LT_F32 && qn->dtype != LT_F64))
        return;
    int m = lt_cc_in(c, q, 0);
    while (c->cn[m].kind == CN_VIEW && single_use(c, m))
        m = lt_cc_in(c, m, 0);
    lt_cnode *cm = &c->cn[m];
    const lt_node *mn = lt_cc_node(c, m);
    if (cm->kind != CN_KERNEL || cm->copy_src || cm->fold_src || mn->op != LT_OP_bmm ||
        !single_use(c, m) || cm->buf != cq->copy_in.index || mn->dtype != qn->dtype ||
        mn->shape.ndim != 3 || lt_cc_node(c, lt_cc_in(c, m, 0))->shape.ndim < 3 ||
        lt_cc_node(c, lt_cc_in(c, m, 0))->shape.dims[2] == 0)
        return;
    /* src's dims ordered by stride (outermost first) must be m's
     * contiguous [B1, B2, M, N] */
    int perm[4] = {0, 1, 2, 3};
    for (int a = 0; a < 4; a++) {
        if (src->shape.dims[a] < 2)
            return;
        for (int b = a + 1; b < 4; b++)
            if (src->strides[perm[b]] > src->strides[perm[a]]) {
                int t = perm[a]; perm[a] = perm[b]; perm[b] = t;
            }
    }
    int64_t want = 1;
    for (int a = 3; a >= 0; a--) {
        if (src->strides[perm[a]] != want)
            return;
        want *= src->shape.dims[perm[a]];
    }
    const int64_t *md = mn->shape.dims;
    if (src->shape.dims[perm[0]] * src->shape.dims[perm[1]] != md[0] ||
        src->shape.dims[perm[2]] != md[1] || src->shape.dims[perm[3]] != md[2])
        return;
    /* q's buffer holds src's shape contiguously */
    int64_t cs[4];
    lt_contiguous_strides(&src->shape, cs);
    if (cs[perm[3]] != 1)
        return;
    lt_pview out = lt_cc_buf_view(cq->buf, &src->shape, src->dtype);
    for (int a = 0; a < 4; a++) {
        out.v.shape.dims[a] = src->shape.dims[perm[a]];
        out.v.strides[a] = cs[perm[a]];
    }
    if (out.v.strides[2] < md[2])
        return;
    cm->pv = out;
    cm->buf = cq->buf;
    cq->kind = CN_VIEW;
    cq->copy_src = 0;
}

lt_status lt_cc_patterns(lt_cctx *c)
{
    if (c->no_fuse)
        return LT_OK;
    for (int i = 0; i < c->n; i++) {
        lt_cnode *cn = &c->cn[i];
        const lt_node *nd = lt_cc_node(c, i);
        int x, s;
        if (cn->kind == CN_KERNEL && cn->copy_src) {
            bmm_reads_source(c, i);
            if (cn->kind == CN_KERNEL && cn->copy_src)
                bmm_writes_dest(c, i);
        } else if (cn->kind == CN_KERNEL && !cn->copy_src && nd->op == LT_OP_cat) {
            cat_reads_sources(c, i);
        } else if (cn->kind == CN_KERNEL && !cn->copy_src && nd->op == LT_OP_softmax &&
            lt_cc_nin(c, i) == 1) {
            int m = lt_cc_in(c, i, 0);
            if (!single_use(c, m) || (s = scalar_operand(c, m, &x)) < 0)
                continue;
            /* x and s lose the mul as a user and gain the softmax step: their
             * counts stay (an elementwise x is stored: its user is outside) */
            c->cn[m].kind = CN_DEAD;
            cn->fold_src = i + 1;
            cn->fold_scale = s + 1;
            cn->fold_in0 = x + 1;
        } else if (cn->kind == CN_EW && (s = scalar_operand(c, i, &x)) >= 0) {
            const lt_node *xn = lt_cc_node(c, x);
            if (c->cn[x].kind != CN_KERNEL || c->cn[x].copy_src || xn->op != LT_OP_softmax_backward ||
                !single_use(c, x) || lt_cc_nin(c, x) != 2)
                continue;
            /* the mul becomes the softmax_backward step, writing its own buffer */
            c->cn[x].kind = CN_DEAD;
            cn->kind = CN_KERNEL;
            cn->fold_src = x + 1;
            cn->fold_scale = s + 1;
            lt_status st = lt_cc_materialise(c, i);
            if (st != LT_OK)
                return st;
        }
    }
    return LT_OK;
}


/* ---- GEMM epilogues (after fusion) ----
 *
 * An elementwise group that reads the result of an mm / addmm kernel m
 * (2-D, f32 or bf16, in a buffer of its own) at the same linear index,
 * directly or through views that keep m's row-major order (the reshape
 * of a Linear on 3-D input), runs inside m's step: each worker evaluates
 * the group on the block of rows it has just computed, while the block is
 * in its cache (lazy/kernels/matmul.c lt_kernel_matmul_epi), instead of a
 * second kernel reading the whole result back from memory. m keeps its
 * buffer (the backward may read the pre-activation; bf16: the group reads
 * the rounded values, as unfused). Conditions: every member has the
 * group's shape (no broadcast-inlined producer), the group is not
 * absorbed by a reduction and stores something, and no input of the GEMM
 * or of the group depends on the unit they form (the step would wait on
 * itself, or two GEMM steps on each other: reaches_unit). */

/* 1 if q is m or a view chain over m whose view reads m's buffer in m's
 * row-major order in shape `shape` (contiguous, offset 0). */
static int reads_in_order(lt_cctx *c, int q, int m, const lt_shape *shape)
{
    int r = q;
    while (r != m && c->cn[r].kind == CN_VIEW && lt_cc_nin(c, r) == 1)
        r = lt_cc_in(c, r, 0);
    if (r != m)
        return 0;
    const lt_pview *pv = &c->cn[q].pv, *mv = &c->cn[m].pv;
    return c->cn[q].has_pv && pv->base == mv->base && pv->index == mv->index &&
           pv->byte_off == mv->byte_off && pv->v.offset == 0 &&
           pv->v.dtype == mv->v.dtype && lt_shape_equal(&pv->v.shape, shape) &&
           lt_view_is_contiguous(&pv->v);
}

/* Scratch of one lt_cc_epilogues pass: the elementwise members of each
 * group root (CSR: members of root r are mem[moff[r] .. moff[r + 1])) and a
 * mark per group root. */
typedef struct {
    int *moff, *mem, *gmark;
} epi_units;

/* Pushes position q (if unmarked) on the search stack. */
static void push_pos(lt_cctx *c, int q, int gen, int *sp)
{
    if (c->mark[q] != gen && *sp < c->n) {
        c->mark[q] = gen;
        c->stack[(*sp)++] = q;
    }
}

/* 1 if position x depends on the candidate unit U = GEMM m with group g as
 * its epilogue. A step waits for every input of every node it runs, so the
 * search walks units, not nodes: reaching an elementwise node continues
 * from all members of its group, from the GEMM running that group as its
 * epilogue and from the reduction absorbing it; reaching a GEMM with an
 * epilogue continues from its group. Positions are a topological order of
 * nodes but not of units (a unit's members span positions: a GEMM below
 * U's lowest position may run an epilogue above it that waits on U), so
 * nothing is pruned by position; each node is visited once. */
static int reaches_unit(lt_cctx *c, const epi_units *u, int m, int g, int x)
{
    int gen = ++c->mark_gen, sp = 0;
    push_pos(c, x, gen, &sp);
    while (sp) {
        int v = c->stack[--sp];
        const lt_cnode *cv = &c->cn[v];
        int r = cv->kind == CN_EW ? lt_cc_group(c, v)
                : cv->kind == CN_KERNEL && cv->epi_group ? cv->epi_group - 1 : -1;
        if (v == m || r == g)
            return 1;
        if (r >= 0 && u->gmark[r] != gen) {
            u->gmark[r] = gen;
            for (int k = u->moff[r]; k < u->moff[r + 1]; k++)
                push_pos(c, u->mem[k], gen, &sp);
            if (c->cn[r].epi_of)
                push_pos(c, c->cn[r].epi_of - 1, gen, &sp);
            if (c->cn[r].absorbed_by >= 0)
                push_pos(c, c->cn[r].absorbed_by, gen, &sp);
        }
        for (int k = 0; k < lt_cc_nin(c, v); k++)
            push_pos(c, lt_cc_in(c, v, k), gen, &sp);
    }
    return 0;
}

/* 1 if the group of root g can run as m's epilogue: besides the shape
 * conditions, no input of the GEMM or of the group may depend on the unit
 * they would form (its step would wait on itself, or on a step waiting on
 * it: two GEMMs whose epilogues each read the other's result). */
static int epilogue_fits(lt_cctx *c, const epi_units *u, int m, int g)
{
    const lt_node *gn = lt_cc_node(c, g), *mn = lt_cc_node(c, m);
    if (c->cn[g].absorbed_by >= 0 || c->cn[g].epi_of ||
        lt_shape_numel(&gn->shape) != lt_shape_numel(&mn->shape))
        return 0;
    int stores = 0, reads = 0;
    for (int k = u->moff[g]; k < u->moff[g + 1]; k++) {
        int j = u->mem[k];
        const lt_node *jn = lt_cc_node(c, j);
        if (!lt_shape_equal(&jn->shape, &gn->shape))
            return 0;
        stores |= c->cn[j].stored;
        for (int i = 0; i < lt_cc_nin(c, j); i++) {
            int q = lt_cc_in(c, j, i);
            if (c->cn[q].kind == CN_EW && lt_cc_group(c, q) == g)
                continue;
            if (reads_in_order(c, q, m, &gn->shape))
                reads = 1;
            else if (reaches_unit(c, u, m, g, q))
                return 0;
        }
    }
    for (int i = 0; i < lt_cc_nin(c, m); i++)
        if (reaches_unit(c, u, m, g, lt_cc_in(c, m, i)))
            return 0;
    return stores && reads;
}

lt_status lt_cc_epilogues(lt_cctx *c)
{
    if (c->no_fuse || c->no_epilogue)
        return LT_OK;
    epi_units u;
    u.moff = calloc((size_t)c->n + 1, sizeof(int));
    u.mem = malloc(((size_t)c->n + 1) * sizeof(int));
    u.gmark = calloc((size_t)c->n + 1, sizeof(int));
    if (!u.moff || !u.mem || !u.gmark) {
        free(u.moff);
        free(u.mem);
        free(u.gmark);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    for (int j = 0; j < c->n; j++)
        if (c->cn[j].kind == CN_EW)
            u.moff[lt_cc_group(c, j) + 1]++;
    for (int r = 0; r < c->n; r++)
        u.moff[r + 1] += u.moff[r];
    for (int j = 0, *fill = u.gmark; j < c->n; j++)     /* gmark: fill counts */
        if (c->cn[j].kind == CN_EW) {
            int r = lt_cc_group(c, j);
            u.mem[u.moff[r] + fill[r]++] = j;
        }
    memset(u.gmark, 0, ((size_t)c->n + 1) * sizeof(int));
    for (int m = 0; m < c->n; m++) {
        lt_cnode *cm = &c->cn[m];
        const lt_node *mn = lt_cc_node(c, m);
        if (cm->kind != CN_KERNEL || cm->copy_src || cm->fold_src || cm->epi_group ||
            (mn->op != LT_OP_mm && mn->op != LT_OP_addmm) || mn->shape.ndim != 2 ||
            (mn->dtype != LT_F32 && mn->dtype != LT_BF16) || !cm->has_pv ||
            cm->buf < 0 || cm->pv.base != LT_BASE_BUF || cm->pv.index != cm->buf ||
            cm->pv.byte_off != 0 || cm->pv.v.offset != 0 ||
            !lt_view_is_contiguous(&cm->pv.v))
            continue;
        /* the first elementwise reader (directly or through views) */
        for (int j = m + 1; j < c->n && !cm->epi_group; j++) {
            if (c->cn[j].kind != CN_EW)
                continue;
            int hit = 0;
            for (int k = 0; k < lt_cc_nin(c, j) && !hit; k++)
                hit = reads_in_order(c, lt_cc_in(c, j, k), m, &lt_cc_node(c, j)->shape);
            if (!hit)
                continue;
            int g = lt_cc_group(c, j);
            if (epilogue_fits(c, &u, m, g)) {
                cm->epi_group = g + 1;
                c->cn[g].epi_of = m + 1;
            }
            break;
        }
    }
    free(u.moff);
    free(u.mem);
    free(u.gmark);
    return LT_OK;
}
