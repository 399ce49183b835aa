/* tests/c/support_ref_nn.c — the reference evaluator's convolutions (2-D
 * and 3-D, forward and both backwards) and pooling (see support_ref.h).
 * Obviously-correct loops over doubles; nothing here is shared with lazy/. */
#include <math.h>
#include <string.h>
#include "support_ref_int.h"

/* ---------------------------------------------------------------- conv */

typedef struct conv_p {
    int64_t sh, sw, ph, pw, dh, dw, g;
} conv_p;

static conv_p conv_params(const lt_attrs *at)
{
    conv_p p = {at->i[0], at->i[1], at->i[2], at->i[3], at->i[4], at->i[5], at->i[6]};
    if (p.sh <= 0) p.sh = 1;
    if (p.sw <= 0) p.sw = 1;
    if (p.dh <= 0) p.dh = 1;
    if (p.dw <= 0) p.dw = 1;
    if (p.g <= 0) p.g = 1;
    return p;
}

/* The one loop all three conv ops share: for every (n, o, oh, ow, c, ki, kj)
 * with a valid input position call back with the three linear indices. */
#define CONV_LOOP(N, C, H, W, O, KH, KW, OH, OW, p, BODY)                       \
    for (int64_t n = 0; n < N; n++)                                             \
        for (int64_t o = 0; o < O; o++)                                         \
            for (int64_t oh = 0; oh < OH; oh++)                                 \
                for (int64_t ow = 0; ow < OW; ow++) {                           \
                    int64_t Cg = C / p.g, Og = O / p.g, grp = o / Og;           \
                    for (int64_t c = 0; c < Cg; c++)                            \
                        for (int64_t ki = 0; ki < KH; ki++)                     \
                            for (int64_t kj = 0; kj < KW; kj++) {               \
                                int64_t ih = oh * p.sh - p.ph + ki * p.dh;      \
                                int64_t iw = ow * p.sw - p.pw + kj * p.dw;      \
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)     \
                                    continue;                                   \
                                int64_t xi = ((n * C + grp * Cg + c) * H + ih) * W + iw; \
                                int64_t wi = ((o * Cg + c) * KH + ki) * KW + kj; \
                                int64_t yi = ((n * O + o) * OH + oh) * OW + ow; \
                                BODY;                                           \
                            }                                                   \
                }

/* conv3d*: i = {stride[3], pad[3], dil[3], groups, extra[3]}; a grad may be
 * shorter than the forward output (the missing positions count as zero). */
static int eval_conv3d(lt_op op, const lt_attrs *at, const ref_array *in, ref_array *out)
{
    int64_t s[3], p[3], dl[3], g = at->i[9];
    for (int j = 0; j < 3; j++) {
        s[j] = at->i[j];
        p[j] = at->i[3 + j];
        dl[j] = at->i[6 + j];
    }
    lt_dtype od = ref_result_type(in, 2);
    const ref_array *x = NULL, *w = NULL, *gy = NULL;
    int64_t N, C, O, sp[3], k[3], o[3];
    if (in[0].shape.ndim != 5 || in[1].shape.ndim != 5) return ref_fail("ref %s: bad ranks", "conv3d");
    if (op == LT_OP_conv3d) {
        x = &in[0]; w = &in[1];
    } else if (op == LT_OP_conv3d_backward_input) {
        gy = &in[0]; w = &in[1];
    } else {
        gy = &in[0]; x = &in[1];
    }
    N = (x ? x : gy)->shape.dims[0];
    O = w ? w->shape.dims[0] : gy->shape.dims[1];
    C = x ? x->shape.dims[1] : w->shape.dims[1] * g;
    for (int j = 0; j < 3; j++) {
        sp[j] = x ? x->shape.dims[2 + j] : at->i[10 + j];
        k[j] = w ? w->shape.dims[2 + j] : at->i[10 + j];
        o[j] = gy ? gy->shape.dims[2 + j]
                  : (sp[j] + 2 * p[j] - dl[j] * (k[j] - 1) - 1) / s[j] + 1;
    }
    int64_t Cg = C / g, Og = O / g;
    int64_t yd[5] = {N, O, o[0], o[1], o[2]}, xd[5] = {N, C, sp[0], sp[1], sp[2]};
    int64_t wd[5] = {O, Cg, k[0], k[1], k[2]};
    lt_shape os = ref_mkshape(5, op == LT_OP_conv3d ? yd : op == LT_OP_conv3d_backward_input ? xd : wd);
    if (ref_array_init(out, od, &os)) return -1;
    for (int64_t n = 0; n < N; n++)
    for (int64_t oc = 0; oc < O; oc++)
    for (int64_t z = 0; z < o[0]; z++)
    for (int64_t y = 0; y < o[1]; y++)
    for (int64_t xx = 0; xx < o[2]; xx++)
    for (int64_t c = 0; c < Cg; c++)
    for (int64_t a = 0; a < k[0]; a++)
    for (int64_t b = 0; b < k[1]; b++)
    for (int64_t e = 0; e < k[2]; e++) {
        int64_t iz = z * s[0] - p[0] + a * dl[0], iy = y * s[1] - p[1] + b * dl[1];
        int64_t ix = xx * s[2] - p[2] + e * dl[2];
        if (iz < 0 || iz >= sp[0] || iy < 0 || iy >= sp[1] || ix < 0 || ix >= sp[2]) continue;
        int64_t xi = (((n * C + (oc / Og) * Cg + c) * sp[0] + iz) * sp[1] + iy) * sp[2] + ix;
        int64_t wi = (((oc * Cg + c) * k[0] + a) * k[1] + b) * k[2] + e;
        int64_t yi = (((n * O + oc) * o[0] + z) * o[1] + y) * o[2] + xx;
        if (op == LT_OP_conv3d) out->v[yi] += in[0].v[xi] * in[1].v[wi];
        else if (op == LT_OP_conv3d_backward_input) out->v[xi] += in[0].v[yi] * in[1].v[wi];
        else out->v[wi] += in[0].v[yi] * in[1].v[xi];
    }
    for (int64_t i = 0; i < ref_numel(&out->shape); i++) out->v[i] = ref_round(out->v[i], od);
    return 0;
}

int ref_eval_conv(lt_op op, const lt_attrs *at, const ref_array *in,
                     ref_array *out)
{
    if (op == LT_OP_conv3d || op == LT_OP_conv3d_backward_input || op == LT_OP_conv3d_backward_weight)
        return eval_conv3d(op, at, in, out);
    conv_p p = conv_params(at);
    lt_dtype od = ref_result_type(in, 2);
    if (op == LT_OP_conv2d) {
        const lt_shape *x = &in[0].shape, *w = &in[1].shape;
        if (x->ndim != 4 || w->ndim != 4 || w->dims[1] * p.g != x->dims[1] ||
            w->dims[0] % p.g)
            return ref_fail("ref conv2d: bad shapes");
        int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
        int64_t O = w->dims[0], KH = w->dims[2], KW = w->dims[3];
        int64_t OH = (H + 2 * p.ph - p.dh * (KH - 1) - 1) / p.sh + 1;
        int64_t OW = (W + 2 * p.pw - p.dw * (KW - 1) - 1) / p.sw + 1;
        int64_t d[4] = {N, O, OH, OW};
        lt_shape os = ref_mkshape(4, d);
        if (ref_array_init(out, od, &os)) return -1;
        CONV_LOOP(N, C, H, W, O, KH, KW, OH, OW, p,
                  out->v[yi] += in[0].v[xi] * in[1].v[wi])
    } else if (op == LT_OP_conv2d_backward_input) {
        const lt_shape *gy = &in[0].shape, *w = &in[1].shape;
        if (gy->ndim != 4 || w->ndim != 4 || gy->dims[1] != w->dims[0])
            return ref_fail("ref conv2d_backward_input: bad shapes");
        int64_t N = gy->dims[0], O = w->dims[0], C = w->dims[1] * p.g;
        int64_t H = at->i[7], W = at->i[8], KH = w->dims[2], KW = w->dims[3];
        int64_t OH = gy->dims[2], OW = gy->dims[3];
        int64_t d[4] = {N, C, H, W};
        lt_shape os = ref_mkshape(4, d);
        if (ref_array_init(out, od, &os)) return -1;
        CONV_LOOP(N, C, H, W, O, KH, KW, OH, OW, p,
                  out->v[xi] += in[0].v[yi] * in[1].v[wi])
    } else {
        const lt_shape *gy = &in[0].shape, *x = &in[1].shape;
        if (gy->ndim != 4 || x->ndim != 4 || gy->dims[0] != x->dims[0])
            return ref_fail("ref conv2d_backward_weight: bad shapes");
        int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
        int64_t O = gy->dims[1], KH = at->i[7], KW = at->i[8];
        int64_t OH = gy->dims[2], OW = gy->dims[3];
        int64_t d[4] = {O, C / p.g, KH, KW};
        lt_shape os = ref_mkshape(4, d);
        if (ref_array_init(out, od, &os)) return -1;
        CONV_LOOP(N, C, H, W, O, KH, KW, OH, OW, p,
                  out->v[wi] += in[0].v[yi] * in[1].v[xi])
    }
    for (int64_t i = 0; i < ref_numel(&out->shape); i++)
        out->v[i] = ref_round(out->v[i], od);
    return 0;
}

/* ---------------------------------------------------------------- pool */

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                        int ceil_mode)
{
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

typedef struct pool_geo {
    int64_t NC, H, W, OH, OW;
    int nd;
    int64_t lead[2];
} pool_geo;

static int pool_geometry(const lt_shape *x, pool_geo *g)
{
    if (x->ndim != 3 && x->ndim != 4) return ref_fail("ref pool: input must be 3-d or 4-d");
    g->nd = x->ndim;
    g->NC = 1;
    for (int d = 0; d < x->ndim - 2; d++) {
        g->NC *= x->dims[d];
        g->lead[d] = x->dims[d];
    }
    g->H = x->dims[x->ndim - 2];
    g->W = x->dims[x->ndim - 1];
    return 0;
}

static lt_shape pool_shape(const pool_geo *g)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = g->nd;
    for (int d = 0; d < g->nd - 2; d++) s.dims[d] = g->lead[d];
    s.dims[g->nd - 2] = g->OH;
    s.dims[g->nd - 1] = g->OW;
    return s;
}

/* max pool over plane `pl` of x at (oh, ow): the argmax flat index h*W+w */
static int64_t max_at(const double *x, const pool_geo *g, const int64_t *a,
                      int64_t oh, int64_t ow, double *val)
{
    int64_t best = -1;
    double bv = -INFINITY;
    for (int64_t ki = 0; ki < a[0]; ki++)
        for (int64_t kj = 0; kj < a[1]; kj++) {
            int64_t h = oh * a[2] - a[4] + ki * a[6];
            int64_t w = ow * a[3] - a[5] + kj * a[7];
            if (h < 0 || h >= g->H || w < 0 || w >= g->W) continue;
            double v = x[h * g->W + w];
            if (best < 0 || v > bv || isnan(v)) {
                if (best >= 0 && isnan(bv)) continue;
                best = h * g->W + w;
                bv = v;
            }
        }
    *val = bv;
    return best;
}

/* avg pool window at (oh, ow): bounds and divisor (PyTorch's rule) */
static double avg_window(const pool_geo *g, const int64_t *a, int64_t oh,
                         int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0,
                         int64_t *w1)
{
    int64_t hs = oh * a[2] - a[4], ws = ow * a[3] - a[5];
    int64_t he = hs + a[0], we = ws + a[1];
    if (he > g->H + a[4]) he = g->H + a[4];
    if (we > g->W + a[5]) we = g->W + a[5];
    int64_t pool = (he - hs) * (we - ws);
    if (hs < 0) hs = 0;
    if (ws < 0) ws = 0;
    if (he > g->H) he = g->H;
    if (we > g->W) we = g->W;
    *h0 = hs; *h1 = he; *w0 = ws; *w1 = we;
    if (a[8]) return (double)a[8];
    if (a[7]) return (double)pool;
    return (double)((he - hs) * (we - ws));
}

int ref_eval_pool(lt_op op, const lt_attrs *at, const ref_array *in,
                     ref_array *out)
{
    const int64_t *a = at->i;
    if (op == LT_OP_max_pool2d_backward_idx || op == LT_OP_adaptive_max_pool2d_backward) {
        /* dx[plane, idx] += grad, x only for the shape */
        pool_geo g;
        if (pool_geometry(&in[1].shape, &g)) return -1;
        int64_t HW = g.H * g.W, per = g.NC ? ref_numel(&in[0].shape) / g.NC : 0;
        if (ref_numel(&in[2].shape) != ref_numel(&in[0].shape))
            return ref_fail("ref max_pool2d_backward_idx: indices shape");
        if (ref_array_init(out, in[0].dtype, &in[1].shape)) return -1;
        for (int64_t pl = 0; pl < g.NC; pl++)
            for (int64_t o = 0; o < per; o++) {
                int64_t k = (int64_t)in[2].v[pl * per + o];
                if (k < 0 || k >= HW) return ref_fail("ref max_pool2d_backward_idx: index range");
                out->v[pl * HW + k] += in[0].v[pl * per + o];
            }
        return 0;
    }
    int bwd = op == LT_OP_max_pool2d_backward || op == LT_OP_avg_pool2d_backward ||
              op == LT_OP_adaptive_avg_pool2d_backward;
    const ref_array *x = bwd ? &in[1] : &in[0];
    pool_geo g;
    if (pool_geometry(&x->shape, &g)) return -1;
    int is_max = op == LT_OP_max_pool2d || op == LT_OP_max_pool2d_indices ||
                 op == LT_OP_max_pool2d_backward;
    int is_adapt = op == LT_OP_adaptive_avg_pool2d ||
                   op == LT_OP_adaptive_avg_pool2d_backward;
    int is_amax = op == LT_OP_adaptive_max_pool2d || op == LT_OP_adaptive_max_pool2d_indices;
    is_adapt |= is_amax;
    int64_t ma[8];
    if (is_max) {
        for (int k = 0; k < 8; k++) ma[k] = a[k];
        if (ma[6] <= 0) ma[6] = 1;
        if (ma[7] <= 0) ma[7] = 1;
        g.OH = pool_out(g.H, a[0], a[2], a[4], ma[6], (int)a[8]);
        g.OW = pool_out(g.W, a[1], a[3], a[5], ma[7], (int)a[8]);
    } else if (is_adapt) {
        g.OH = a[0];
        g.OW = a[1];
    } else {
        g.OH = pool_out(g.H, a[0], a[2], a[4], 1, (int)a[6]);
        g.OW = pool_out(g.W, a[1], a[3], a[5], 1, (int)a[6]);
    }
    lt_shape os = bwd ? x->shape : pool_shape(&g);
    if (bwd) {
        lt_shape gs = pool_shape(&g);
        if (ref_numel(&gs) != ref_numel(&in[0].shape)) return ref_fail("ref pool backward: grad shape");
    }
    lt_dtype od = op == LT_OP_max_pool2d_indices || op == LT_OP_adaptive_max_pool2d_indices
                  ? LT_I64 : in[0].dtype;
    if (ref_array_init(out, od, &os)) return -1;
    int64_t HW = g.H * g.W, OHW = g.OH * g.OW;
    for (int64_t pl = 0; pl < g.NC; pl++) {
        const double *xp = x->v + pl * HW;
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t oi = pl * OHW + oh * g.OW + ow;
                double gv = bwd ? in[0].v[oi] : 0;
                if (is_max) {
                    double v;
                    int64_t k = max_at(xp, &g, ma, oh, ow, &v);
                    if (op == LT_OP_max_pool2d) out->v[oi] = v;
                    else if (op == LT_OP_max_pool2d_indices) out->v[oi] = (double)k;
                    else if (k >= 0) out->v[pl * HW + k] += gv;
                    continue;
                }
                int64_t h0, h1, w0, w1;
                double div;
                if (is_adapt) {
                    h0 = oh * g.H / g.OH;
                    h1 = ((oh + 1) * g.H + g.OH - 1) / g.OH;
                    w0 = ow * g.W / g.OW;
                    w1 = ((ow + 1) * g.W + g.OW - 1) / g.OW;
                    div = (double)((h1 - h0) * (w1 - w0));
                    if (is_amax) {   /* eager: the last NaN, else the first maximum */
                        int64_t best = h0 * g.W + w0;
                        double bv = -INFINITY;
                        for (int64_t h = h0; h < h1; h++)
                            for (int64_t w = w0; w < w1; w++)
                                if (xp[h * g.W + w] > bv || isnan(xp[h * g.W + w])) {
                                    bv = xp[h * g.W + w];
                                    best = h * g.W + w;
                                }
                        out->v[oi] = op == LT_OP_adaptive_max_pool2d ? bv : (double)best;
                        continue;
                    }
                } else {
                    div = avg_window(&g, a, oh, ow, &h0, &h1, &w0, &w1);
                }
                double s = 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        if (bwd) out->v[pl * HW + h * g.W + w] += gv / div;
                        else s += xp[h * g.W + w];
                    }
                if (!bwd) out->v[oi] = s / div;
            }
    }
    for (int64_t i = 0; i < ref_numel(&os); i++) out->v[i] = ref_round(out->v[i], od);
    return 0;
}

