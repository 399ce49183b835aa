/*
 * lazy/shape_conv.c — the shape rules of convolution and pooling (ops.def's
 * conv2d*, conv3d*, pool* rules). See shape.h for the contract.
 */
#include <stdio.h>
#include "shape_int.h"

/* ------------------------------------------------------------ convolution */

/* Convolutions over k = 2 or 3 spatial dims share one layout of attributes:
 * i = {stride[k], pad[k], dil[k], groups, extra[k]} (extra: the input size
 * for *_backward_input, the kernel size for *_backward_weight). */
typedef struct conv_p {
    int k;                    /* spatial dims */
    int64_t s[3], p[3], d[3], g;
} conv_p;

static lt_status conv_params(lt_op op, const lt_operand *in, int n,
                             const lt_attrs *a, int k, int extra, conv_p *p)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 3 * k + 1 + (extra ? k : 0),
                            k == 2 ? "stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, ..."
                                   : "stride[3], pad[3], dil[3], groups, ..."));
    p->k = k;
    for (int j = 0; j < k; j++) {
        p->s[j] = a->i[j];
        p->p[j] = a->i[k + j];
        p->d[j] = a->i[2 * k + j];
        if (p->s[j] <= 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "stride must be > 0");
        if (p->p[j] < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "padding must be >= 0");
        if (p->d[j] <= 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "dilation must be > 0");
    }
    p->g = a->i[3 * k];
    if (p->g <= 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "groups must be > 0");
    for (int i = 0; i < n; i++)
        if (!lt_dtype_is_float(in[i].dtype) || in[i].dtype != in[0].dtype)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "needs tensors of one floating dtype");
    return LT_OK;
}

/* PyTorch's output size: (in + 2p - d*(k-1) - 1) / s + 1 (floor); s > 0. */
static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    i128 num = (i128)in + 2 * (i128)p - (i128)d * ((i128)k - 1) - 1;
    if (num < 0) return 0;
    return clamp64(num / s + 1);
}

/* A gradient's spatial size g fits the forward output size `full` when it is
 * full, or lacks only the trailing positions a transposed convolution's
 * output_padding (< max(stride, dilation)) cuts off: those count as zero. */
static int grad_fits(int64_t g, int64_t full, int64_t s, int64_t d)
{
    int64_t cut = ((s > d ? s : d) - 1) / s;
    return g <= full && g >= full - cut && g > 0;
}

/* "10x9" / "4x10x9" of k sizes into buf */
static const char *sizes_str(const int64_t *v, int k, char *buf, size_t cap)
{
    if (k == 2) snprintf(buf, cap, "%lldx%lld", (long long)v[0], (long long)v[1]);
    else snprintf(buf, cap, "%lldx%lldx%lld", (long long)v[0], (long long)v[1], (long long)v[2]);
    return buf;
}

/* Input [N, C, sp...] of k spatial dims, or unbatched [C, H, W] for 2-D. */
static int spatial_rank_ok(const lt_shape *s, int k)
{
    return s->ndim == k + 2 || (k == 2 && s->ndim == 3);
}

static lt_status conv_fwd(lt_op op, const lt_operand *in, int n, lt_attrs *a, int k, lt_shape *out)
{
    const lt_shape *x = in[0].shape, *w = in[1].shape;
    conv_p p;
    TRY(conv_params(op, in, n, a, k, 0, &p));
    if (!spatial_rank_ok(x, k) || w->ndim != k + 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, k == 2
                             ? "expects input [N, C, H, W] or [C, H, W] and weight [O, C/groups, kh, kw]"
                             : "expects input [N, C, D, H, W] and weight [O, C/groups, kd, kh, kw]");
    int b = x->ndim == k + 2;
    int64_t C = x->dims[b], O = w->dims[0], o[3], pad[3], ks[3];
    if ((i128)w->dims[1] * p.g != C)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                             "input has %lld channels but weight expects %lld (= %lld x groups %lld)",
                             (long long)C, (long long)clamp64((i128)w->dims[1] * p.g),
                             (long long)w->dims[1], (long long)p.g);
    if (O % p.g != 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "out channels %lld not divisible by groups %lld",
                             (long long)O, (long long)p.g);
    int bad = 0;
    for (int j = 0; j < k; j++) {
        o[j] = conv_out(x->dims[b + 1 + j], w->dims[2 + j], p.s[j], p.p[j], p.d[j]);
        pad[j] = clamp64(x->dims[b + 1 + j] + 2 * (i128)p.p[j]);
        ks[j] = w->dims[2 + j];
        bad |= o[j] <= 0;
    }
    if (bad) {
        char kb[64], pb[64], db[64];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                             "kernel %s (dilation %s) is larger than the padded input %s",
                             sizes_str(ks, k, kb, sizeof kb), sizes_str(p.d, k, db, sizeof db),
                             sizes_str(pad, k, pb, sizeof pb));
    }
    out->ndim = x->ndim;
    if (b) out->dims[0] = x->dims[0];
    out->dims[b] = O;
    for (int j = 0; j < k; j++) out->dims[b + 1 + j] = o[j];
    return LT_OK;
}

static lt_status conv_bwd_in(lt_op op, const lt_operand *in, int n, lt_attrs *a, int k, lt_shape *out)
{
    const lt_shape *gr = in[0].shape, *w = in[1].shape;
    conv_p p;
    TRY(conv_params(op, in, n, a, k, 1, &p));
    if (!spatial_rank_ok(gr, k) || w->ndim != k + 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, k == 2
                             ? "expects grad [N, O, oh, ow] and weight [O, C/groups, kh, kw]"
                             : "expects grad [N, O, od, oh, ow] and weight [O, C/groups, kd, kh, kw]");
    int b = gr->ndim == k + 2;
    const int64_t *sz = &a->i[3 * k + 1];
    int64_t o[3], g[3];
    char sb[64], ob[64], gb[64];
    for (int j = 0; j < k; j++)
        if (sz[j] <= 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "input size %s must be positive",
                                 sizes_str(sz, k, sb, sizeof sb));
    if (gr->dims[b] != w->dims[0] || w->dims[0] % p.g != 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                             "grad channels %lld do not match weight out channels %lld",
                             (long long)gr->dims[b], (long long)w->dims[0]);
    int bad = 0;
    for (int j = 0; j < k; j++) {
        o[j] = conv_out(sz[j], w->dims[2 + j], p.s[j], p.p[j], p.d[j]);
        g[j] = gr->dims[b + 1 + j];
        bad |= !grad_fits(g[j], o[j], p.s[j], p.d[j]);
    }
    if (bad)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                             "grad spatial size %s does not match the forward output %s of input %s",
                             sizes_str(g, k, gb, sizeof gb), sizes_str(o, k, ob, sizeof ob),
                             sizes_str(sz, k, sb, sizeof sb));
    out->ndim = gr->ndim;
    if (b) out->dims[0] = gr->dims[0];
    out->dims[b] = clamp64((i128)w->dims[1] * p.g);
    for (int j = 0; j < k; j++) out->dims[b + 1 + j] = sz[j];
    return LT_OK;
}

static lt_status conv_bwd_w(lt_op op, const lt_operand *in, int n, lt_attrs *a, int k, lt_shape *out)
{
    const lt_shape *gr = in[0].shape, *x = in[1].shape;
    conv_p p;
    TRY(conv_params(op, in, n, a, k, 1, &p));
    if (!spatial_rank_ok(gr, k) || gr->ndim != x->ndim)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, k == 2
                             ? "expects grad [N, O, oh, ow] and input [N, C, H, W] of equal rank"
                             : "expects grad [N, O, od, oh, ow] and input [N, C, D, H, W] of equal rank");
    int b = gr->ndim == k + 2;
    if (b && gr->dims[0] != x->dims[0])
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "batch sizes differ");
    const int64_t *ks = &a->i[3 * k + 1];
    int64_t O = gr->dims[b], C = x->dims[b], o[3];
    for (int j = 0; j < k; j++)
        if (ks[j] <= 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "kernel size must be positive");
    if (O % p.g != 0 || C % p.g != 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "channels %lld/%lld not divisible by groups %lld",
                             (long long)O, (long long)C, (long long)p.g);
    int bad = 0;
    for (int j = 0; j < k; j++) {
        o[j] = conv_out(x->dims[b + 1 + j], ks[j], p.s[j], p.p[j], p.d[j]);
        bad |= !grad_fits(gr->dims[b + 1 + j], o[j], p.s[j], p.d[j]);
    }
    if (bad) {
        char ob[64];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                             "grad spatial size does not match the forward output %s",
                             sizes_str(o, k, ob, sizeof ob));
    }
    out->ndim = k + 2;
    out->dims[0] = O;
    out->dims[1] = C / p.g;
    for (int j = 0; j < k; j++) out->dims[2 + j] = ks[j];
    return LT_OK;
}

lt_status lt_shape_rule_conv2d(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_fwd(op, in, n, a, 2, out);
}
lt_status lt_shape_rule_conv2d_bwd_in(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_bwd_in(op, in, n, a, 2, out);
}
lt_status lt_shape_rule_conv2d_bwd_w(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_bwd_w(op, in, n, a, 2, out);
}
lt_status lt_shape_rule_conv3d(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_fwd(op, in, n, a, 3, out);
}
lt_status lt_shape_rule_conv3d_bwd_in(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_bwd_in(op, in, n, a, 3, out);
}
lt_status lt_shape_rule_conv3d_bwd_w(lt_op op, const lt_operand *in, int n, lt_attrs *a, lt_shape *out)
{
    return conv_bwd_w(op, in, n, a, 3, out);
}

static int spatial_ok(const lt_shape *s) { return s->ndim == 4 || s->ndim == 3; }

/* ---------------------------------------------------------------- pooling */

/* PyTorch's pooling_output_shape with ceil_mode: the last window must start
 * inside the input or the left padding. */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil)
{
    i128 num = (i128)in + 2 * (i128)p - (i128)d * ((i128)k - 1) - 1 + (ceil ? (i128)s - 1 : 0);
    i128 o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil && (o - 1) * s >= (i128)in + p) o--;
    return clamp64(o);
}

/* Forward pool output shape of x (op is max_pool2d*, avg_pool2d). */
static lt_status pool_shape(lt_op op, lt_op fwd, const lt_operand *in, int n,
                            const lt_attrs *a, const lt_shape *x, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 9, "kh, kw, sh, sw, ph, pw, ..."));
    int64_t kh = a->i[0], kw = a->i[1], sh = a->i[2], sw = a->i[3], ph = a->i[4], pw = a->i[5];
    int64_t dh = 1, dw = 1, ceil;
    if (fwd == LT_OP_avg_pool2d) {
        ceil = a->i[6] != 0;
    } else {
        dh = a->i[6]; dw = a->i[7];
        ceil = a->i[8] != 0;
    }
    if (!spatial_ok(x))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "expects input [N, C, H, W] or [C, H, W]");
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "kernel, stride and dilation must be > 0");
    i128 ekh = ((i128)kh - 1) * dh + 1, ekw = ((i128)kw - 1) * dw + 1;
    if (ph < 0 || pw < 0 || ph > ekh / 2 || pw > ekw / 2)
        return lt_shape_fail(LT_ERR_ARG, op, in, n,
                    "padding %lldx%lld must be >= 0 and at most half the effective kernel %lldx%lld",
                    (long long)ph, (long long)pw, (long long)clamp64(ekh), (long long)clamp64(ekw));
    int b = x->ndim - 3;
    int64_t oh = pool_out(x->dims[b + 1], kh, sh, ph, dh, (int)ceil);
    int64_t ow = pool_out(x->dims[b + 2], kw, sw, pw, dw, (int)ceil);
    if (oh <= 0 || ow <= 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "output size %lldx%lld is too small",
                    (long long)oh, (long long)ow);
    *out = *x;
    out->dims[b + 1] = oh;
    out->dims[b + 2] = ow;
    return LT_OK;
}

lt_status lt_shape_rule_pool(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    lt_op fwd = op == LT_OP_avg_pool2d ? LT_OP_avg_pool2d : LT_OP_max_pool2d;
    return pool_shape(op, fwd, in, n, a, in[0].shape, out);
}

lt_status lt_shape_rule_pool_bwd(lt_op op, const lt_operand *in, int n,
                                 lt_attrs *a, lt_shape *out)
{
    const lt_shape *gr = in[0].shape, *x = in[1].shape;
    lt_shape expect;
    if (op == LT_OP_adaptive_avg_pool2d_backward || op == LT_OP_adaptive_max_pool2d_backward) {
        if (!spatial_ok(x) || gr->ndim != x->ndim)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "expects grad and input of equal rank 3 or 4");
        for (int d = 0; d < x->ndim - 2; d++)
            if (gr->dims[d] != x->dims[d])
                return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad and input differ in leading dims");
    } else {
        lt_op fwd = op == LT_OP_avg_pool2d_backward ? LT_OP_avg_pool2d : LT_OP_max_pool2d;
        TRY(pool_shape(op, fwd, in, n, a, x, &expect));
        if (!lt_shape_equal(&expect, gr)) {
            char b[128];
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad must have the forward output shape %s",
                        lt_shape_str(&expect, b, sizeof b));
        }
    }
    if (in[0].dtype != in[1].dtype)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "grad and input dtypes differ");
    if (op == LT_OP_max_pool2d_backward_idx || op == LT_OP_adaptive_max_pool2d_backward) {
        if (!lt_shape_equal(in[2].shape, gr))
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "indices must have the grad's shape");
        if (in[2].dtype != LT_I64 && in[2].dtype != LT_I32)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "indices must be int64 or int32");
    }
    *out = *x;
    return LT_OK;
}

lt_status lt_shape_rule_adaptive_pool(lt_op op, const lt_operand *in, int n,
                                      lt_attrs *a, lt_shape *out)
{
    const lt_shape *x = in[0].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "oh, ow"));
    if (!spatial_ok(x))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "expects input [N, C, H, W] or [C, H, W]");
    if (a->i[0] <= 0 || a->i[1] <= 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "output size %lldx%lld must be positive",
                    (long long)a->i[0], (long long)a->i[1]);
    int b = x->ndim - 3;
    if (x->dims[b + 1] <= 0 || x->dims[b + 2] <= 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "input spatial size must be positive");
    if (op != LT_OP_adaptive_avg_pool2d && !lt_dtype_is_float(in[0].dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "needs a floating input");
    *out = *x;
    out->dims[b + 1] = a->i[0];
    out->dims[b + 2] = a->i[1];
    return LT_OK;
}

