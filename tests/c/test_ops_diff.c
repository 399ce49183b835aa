/* tests/c/test_ops_diff.c — differential test: every op of lazy/ops.def run
 * through the public API (lt_tensor_from_host, lt_trace, lt_tensor_to_host)
 * against the naive reference of support_ref.c, over several shapes
 * (broadcasting, 0-dim, wrapped scalars), dtypes (f32, f64, bf16, i64) and
 * four input modes (device data / pending copy / transposed view / strided
 * slice of a larger buffer, so every kernel sees strided loads). Plus
 * random-op properties, world-of-1 collectives and a bf16-storage run
 * (LAZYTPU_USE_BF16=1) in a child process. Random fused chains and cache
 * semantics: test_ops_chains.c. Harness: support_diff.c.
 *
 * A failure names the op, dtypes, shapes, attrs and the first mismatching
 * element. Env: LT_DIFF_OPS=add,mul (only those ops), LT_DIFF_SEED=n (other
 * random inputs).
 * Integer-dtype cases the engine refuses with LT_ERR_DTYPE are
 * counted as "refused", not failures (PyTorch refuses many of them too). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_diff.h"
#include "lazytpu_spmd.h"

extern char **environ;

/* -------------------------------------------------------- elementwise */

static int is_transc(lt_op op)
{
    switch (op) {
    case LT_OP_exp: case LT_OP_log: case LT_OP_log1p: case LT_OP_expm1:
    case LT_OP_log2: case LT_OP_sin: case LT_OP_cos: case LT_OP_tanh:
    case LT_OP_sigmoid: case LT_OP_gelu: case LT_OP_silu: case LT_OP_erf: case LT_OP_erfinv:
    case LT_OP_pow: case LT_OP_atan2: case LT_OP_sqrt: case LT_OP_rsqrt:
    case LT_OP_gelu_backward: case LT_OP_silu_backward:
    case LT_OP_sigmoid_backward: case LT_OP_tanh_backward:
        return 1;
    default: return 0;
    }
}

/* Generator of argument k of elementwise op. */
static int ew_gen(lt_op op, int k)
{
    switch (op) {
    case LT_OP_sqrt: case LT_OP_rsqrt: case LT_OP_log: case LT_OP_log2:
        return G_POS;
    case LT_OP_log1p: case LT_OP_erfinv: return G_UNIT;
    case LT_OP_reciprocal: return G_NZ;
    case LT_OP_isnan: return G_NAN;
    case LT_OP_logical_not: case LT_OP_eq: case LT_OP_ne: case LT_OP_le:
    case LT_OP_ge: case LT_OP_lt: case LT_OP_gt: case LT_OP_logical_and:
    case LT_OP_logical_or: case LT_OP_logical_xor: case LT_OP_maximum:
    case LT_OP_minimum: case LT_OP_round:
        return G_TIES;
    case LT_OP_div: case LT_OP_remainder: case LT_OP_fmod: case LT_OP_floor_divide:
        return k == 1 ? G_NZ : G_NORM;
    case LT_OP_pow: return k == 0 ? G_POS : G_NORM;
    case LT_OP_where: return k == 0 ? G_BOOL : G_NORM;
    default: return G_NORM;
    }
}

/* ops whose integer version is PyTorch-meaningful */
static int ew_int_ok(lt_op op)
{
    switch (op) {
    case LT_OP_gelu: case LT_OP_silu: case LT_OP_erf: case LT_OP_erfinv: case LT_OP_isnan:
    case LT_OP_sigmoid_backward: case LT_OP_tanh_backward: case LT_OP_gelu_backward:
    case LT_OP_silu_backward: case LT_OP_atan2: case LT_OP_lerp:
    case LT_OP_leaky_relu: case LT_OP_leaky_relu_backward:
        return 0;
    default: return 1;
    }
}

static void cases_unary(lt_op op)
{
    tol_t tol = is_transc(op) ? TOL_TR : TOL;
    lt_shape shapes[] = {D(2, 3, 4), D0, D(3, 2, 5), D(1, 1)};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    lt_attrs at = A(0);
    for (int c = 0; c < 4; c++)
        for (int d = 0; d < 3; d++) {
            if (op == LT_OP_cast) {
                for (int to = 0; to <= LT_F16; to++) {  /* the computed dtypes */
                    at = A(1, to);
                    RUN(op, at, tol, T(shapes[c], dts[d], G_NORM));
                }
                continue;
            }
            RUN(op, at, tol, T(shapes[c], dts[d], ew_gen(op, 0)));
        }
    if (ew_int_ok(op)) {
        int g = ew_gen(op, 0);
        if (g == G_UNIT) g = G_POSINT;
        if (op == LT_OP_cast) {
            for (int to = 0; to <= LT_F16; to++) {  /* the computed dtypes */
                at = A(1, to);
                RUN(op, at, tol, T(D(2, 3, 4), LT_I64, G_NORM));
                RUN(op, at, tol, T(D(5), LT_BOOL, G_BOOL));
            }
        } else {
            at = A(0);
            RUN(op, at, tol, T(D(2, 3, 4), LT_I64, g));
            RUN(op, at, tol, T(D(4), LT_I32, g));
        }
    }
    if (op == LT_OP_logical_not || op == LT_OP_copy) {
        at = A(0);
        RUN(op, at, tol, T(D(3, 3), LT_BOOL, G_BOOL));
    }
    if (op != LT_OP_cast) {
        tol_t th = {2e-3, 1e-3};
        at = A(0);
        RUN(op, at, th, T(D(3, 4), LT_F16, ew_gen(op, 0)));
        if (ew_int_ok(op)) {
            int g = ew_gen(op, 0) == G_UNIT ? G_POSINT : ew_gen(op, 0);
            RUN(op, at, tol, T(D(3, 4), LT_U8, g));
            RUN(op, at, tol, T(D(3, 4), LT_I16, g));
        }
    } else {
        for (int to = 0; to <= LT_F16; to++) {
            at = A(1, to);
            RUN(op, at, tol, T(D(3, 4), LT_U8, G_POSINT));
            RUN(op, at, tol, T(D(3, 4), LT_I8, G_NORM));
            RUN(op, at, tol, T(D(3, 4), LT_F16, G_NORM));
        }
    }
}

/* A second operand spec of the given broadcast pattern. */
static void cases_binary(lt_op op)
{
    tol_t tol = is_transc(op) ? TOL_TR : TOL;
    lt_attrs at = A(0);
    int g0 = ew_gen(op, 0), g1 = ew_gen(op, 1);
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    double wv = g1 == G_NZ ? 2.5 : g1 == G_TIES ? 0.5 : 1.75;
    for (int d = 0; d < 3; d++) {
        lt_dtype dt = dts[d];
        RUN(op, at, tol, T(D(3, 4), dt, g0), T(D(3, 4), dt, g1));
        RUN(op, at, tol, T(D(3, 1), dt, g0), T(D(1, 4), dt, g1));
        RUN(op, at, tol, T(D(2, 3, 4), dt, g0), T(D(4), dt, g1));
        RUN(op, at, tol, T(D0, dt, g0), T(D(2, 3), dt, g1));
        RUN(op, at, tol, T(D(2, 3), dt, g0), W(wv, LT_F64));
        if (op != LT_OP_pow && op != LT_OP_leaky_relu) RUN(op, at, tol, W(-wv, LT_F64), T(D(5), dt, g1));
    }
    /* constants baked into the graph: 0, 1, -1 (not as divisors/modulus) */
    if (g1 != G_NZ) {
        RUN(op, at, tol, T(D(2, 3), LT_F32, g0), W(1, LT_F64));
        RUN(op, at, tol, T(D(2, 3), LT_F32, g0), W(-1, LT_F64));
        RUN(op, at, tol, T(D(2, 3), LT_F32, g0), W(0, LT_F64));
    }
    /* mixed dtypes: promotion */
    if (ew_int_ok(op) && op != LT_OP_pow) {
        RUN(op, at, tol, T(D(3, 4), LT_F32, g0), T(D(3, 4), LT_F64, g1));
        RUN(op, at, tol, T(D(3, 1), LT_I64, g0 == G_TIES ? G_TIES : G_NORM),
            T(D(1, 4), LT_F32, g1));
        RUN(op, at, tol, T(D(3, 4), LT_BF16, g0), T(D(4), LT_F32, g1));
        RUN(op, at, tol, T(D(3, 4), LT_F32, g0), Z(1.25, LT_F64));  /* 0-dim weak */
    }
    if (ew_int_ok(op)) {
        int i0 = g0 == G_POS ? G_POSINT : g0, i1 = op == LT_OP_pow ? G_POSINT : g1;
        RUN(op, at, tol, T(D(3, 4), LT_I64, i0), T(D(3, 4), LT_I64, i1));
        RUN(op, at, tol, T(D(3, 1), LT_I32, i0), T(D(1, 4), LT_I64, i1));
        if (op != LT_OP_pow) {
            RUN(op, at, tol, T(D(4), LT_I64, i0), W(3, LT_I64));
            RUN(op, at, tol, T(D(4), LT_I64, i0), W(2.5, LT_F64));  /* int tensor, float scalar */
        }
        /* the narrow integers wrap like PyTorch's; u8 + i8 -> i16 */
        RUN(op, at, tol, T(D(3, 4), LT_U8, i0), T(D(3, 4), LT_U8, i1));
        RUN(op, at, tol, T(D(3, 4), LT_I8, i0), T(D(4), LT_I16, i1));
        RUN(op, at, tol, T(D(3, 4), LT_U8, i0), T(D(3, 4), LT_I8, i1));
        if (op != LT_OP_pow) RUN(op, at, tol, T(D(4), LT_U8, i0), W(200, LT_I64));
    }
    if (ew_int_ok(op) || !is_transc(op)) {
        /* half: rounded after the op (eager rounds each op's result) */
        tol_t th = {2e-3, 1e-3};
        RUN(op, at, th, T(D(3, 4), LT_F16, g0), T(D(3, 4), LT_F16, g1));
        RUN(op, at, th, T(D(3, 4), LT_F16, g0), T(D(4), LT_BF16, g1));   /* -> f32 */
        RUN(op, at, th, T(D(2, 3), LT_F16, g0), W(wv, LT_F64));
    }
    if (op >= LT_OP_logical_and && op <= LT_OP_logical_xor) {
        RUN(op, at, tol, T(D(3, 4), LT_BOOL, G_BOOL), T(D(4), LT_BOOL, G_BOOL));
        RUN(op, at, tol, T(D(3, 4), LT_BOOL, G_BOOL), T(D(3, 4), LT_F32, G_TIES));
    }
}

static void cases_ternary(lt_op op)
{
    tol_t tol = TOL;
    lt_attrs at = A(0);
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++) {
        lt_dtype dt = dts[d];
        switch (op) {
        case LT_OP_where:
            RUN(op, at, tol, T(D(3, 4), LT_BOOL, G_BOOL), T(D(3, 4), dt, G_NORM), T(D(3, 4), dt, G_NORM));
            RUN(op, at, tol, T(D(3, 1), LT_BOOL, G_BOOL), T(D(1, 4), dt, G_NORM), W(7.5, LT_F64));
            RUN(op, at, tol, T(D(2, 3, 4), LT_BOOL, G_BOOL), W(-1, LT_F64), T(D(4), dt, G_NORM));
            break;
        case LT_OP_clamp:
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), W(-0.5, LT_F64), W(0.75, LT_F64));
            RUN(op, at, tol, T(D(3, 4), dt, G_NAN), T(D(4), dt, G_NORM), T(D(3, 1), dt, G_POS));
            RUN(op, at, tol, T(D0, dt, G_NORM), Z(-1, dt), Z(1, dt));
            break;
        case LT_OP_threshold_backward:
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), T(D(3, 4), dt, G_TIES), W(0, LT_F64));
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), T(D(3, 1), dt, G_NORM), W(0.5, LT_F64));
            break;
        case LT_OP_leaky_relu_backward:
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), T(D(3, 4), dt, G_NORM), W(0.2, LT_F64));
            RUN(op, at, tol, T(D(3, 1), dt, G_NORM), T(D(3, 4), dt, G_NORM), W(0.01, LT_F64));
            break;
        case LT_OP_lerp:
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), T(D(3, 4), dt, G_NORM), W(0.3, LT_F64));
            RUN(op, at, tol, T(D(3, 1), dt, G_NORM), T(D(1, 4), dt, G_NORM), T(D(4), dt, G_UNIT));
            break;
        default:
            RUN(op, at, tol, T(D(3, 4), dt, G_NORM), T(D(3, 1), dt, G_NORM), T(D(4), dt, G_NORM));
        }
    }
    if (op == LT_OP_where) {
        RUN(op, at, tol, T(D(3, 4), LT_BOOL, G_BOOL), T(D(3, 4), LT_I64, G_NORM), W(2.5, LT_F64));
        RUN(op, at, tol, T(D(3, 4), LT_BOOL, G_BOOL), T(D(3, 4), LT_I64, G_NORM), T(D(4), LT_F32, G_NORM));
    }
    if (op == LT_OP_clamp) {
        RUN(op, at, tol, T(D(3, 4), LT_I64, G_NORM), W(-2, LT_I64), W(3, LT_I64));
    }
}

/* ------------------------------------------------------------ others */

static void cases_reduce(lt_op op)
{
    tol_t tol = {1e-5, 1e-5};
    int g = op == LT_OP_prod ? G_NEAR1 : (op == LT_OP_any || op == LT_OP_all) ? G_BOOL : G_NORM;
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16, LT_I64};
    int masks[] = {1, 2, 4, 5, 6, 7};
    if (op == LT_OP_argmax || op == LT_OP_argmin) {
        for (int d = 0; d < 4; d++)
            for (int dim = -1; dim < 3; dim++)
                for (int keep = 0; keep < 2; keep++)
                    RUN(op, A(2, dim, keep), tol, T(D(3, 4, 5), dts[d], G_NORM));
        RUN(op, A(2, 0, 0), tol, T(D(7), LT_F32, G_NORM));
        RUN(op, A(2, -1, 0), tol, T(D0, LT_F32, G_NORM));
        return;
    }
    for (int d = 0; d < 4; d++)
        for (int m = 0; m < 6; m++)
            for (int keep = 0; keep < 2; keep++)
                RUN(op, A(2, masks[m], keep), tol, T(D(3, 4, 5), dts[d], g));
    RUN(op, A(2, 1, 0), tol, T(D(1000), LT_F32, g));
    RUN(op, A(2, 0, 0), tol, T(D0, LT_F32, g));
    RUN(op, A(2, 3, 1), tol, T(D(1, 1), LT_F32, g));
    if (op == LT_OP_any || op == LT_OP_all) {
        RUN(op, A(2, 3, 0), tol, T(D(4, 5), LT_BOOL, G_BOOL));
        RUN(op, A(2, 2, 0), tol, T(D(4, 5), LT_F32, G_TIES));
    }
}

static void cases_matmul(lt_op op)
{
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++) {
        lt_dtype dt = dts[d];
        if (op == LT_OP_addmm) {    /* bias [N] and [1, N]; K = 0: the bias alone */
            int mnk[][3] = {{5, 7, 3}, {1, 1, 1}, {130, 33, 17}, {4, 0, 6}};
            for (int c = 0; c < 4; c++) {
                tol_t tol = {1e-5, 2e-7 * mnk[c][1] + 1e-6};
                lt_shape bs = c & 1 ? D(1, mnk[c][2]) : D(mnk[c][2]);
                RUN(op, A(0), tol, T(bs, dt, G_UNIT), T(D(mnk[c][0], mnk[c][1]), dt, G_UNIT),
                    T(D(mnk[c][1], mnk[c][2]), dt, G_UNIT));
            }
        } else if (op == LT_OP_mm) {
            int mnk[][3] = {{5, 7, 3}, {1, 1, 1}, {64, 33, 17}, {2, 130, 3}};
            for (int c = 0; c < 4; c++) {
                tol_t tol = {1e-5, 2e-7 * mnk[c][1] + 1e-6};
                RUN(op, A(0), tol, T(D(mnk[c][0], mnk[c][1]), dt, G_UNIT),
                    T(D(mnk[c][1], mnk[c][2]), dt, G_UNIT));
            }
        } else {
            tol_t tol = {1e-5, 1e-5};
            RUN(op, A(0), tol, T(D(3, 4, 5), dt, G_UNIT), T(D(3, 5, 6), dt, G_UNIT));
            RUN(op, A(0), tol, T(D(1, 8, 2), dt, G_UNIT), T(D(1, 2, 3), dt, G_UNIT));
        }
    }
}

/* conv: {sh, sw, ph, pw, dh, dw, groups} configurations */
static const int conv_cfg[][7] = {
    {1, 1, 0, 0, 1, 1, 1}, {2, 1, 1, 2, 1, 2, 1}, {1, 2, 1, 1, 2, 1, 1}, {1, 1, 1, 1, 1, 1, 2}};

/* conv3d: {stride[3], pad[3], dil[3], groups} configurations */
static const int conv3_cfg[][10] = {
    {1, 1, 1, 0, 0, 0, 1, 1, 1, 1}, {2, 1, 2, 1, 0, 1, 1, 2, 1, 1},
    {1, 2, 1, 1, 1, 0, 2, 1, 1, 2}, {3, 2, 1, 0, 1, 1, 1, 1, 2, 1}};

static void cases_conv3d(lt_op op)
{
    tol_t tol = {1e-5, 1e-5};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 4; c++) {
            const int *p = conv3_cfg[c];
            int N = 2, C = 4, O = 6, sp[3] = {5, 6, 7}, k[3] = {3, 2, 3}, o[3];
            for (int j = 0; j < 3; j++) o[j] = (sp[j] + 2 * p[3 + j] - p[6 + j] * (k[j] - 1) - 1) / p[j] + 1;
            int bi = op == LT_OP_conv3d_backward_input;
            lt_attrs at = A(13, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                            bi ? sp[0] : k[0], bi ? sp[1] : k[1], bi ? sp[2] : k[2]);
            if (op == LT_OP_conv3d) at.n = 10;
            lt_shape xs = D(N, C, sp[0], sp[1], sp[2]), ws = D(O, C / p[9], k[0], k[1], k[2]);
            lt_shape gs = D(N, O, o[0], o[1], o[2]);
            if (op == LT_OP_conv3d)
                RUN(op, at, tol, T(xs, dts[d], G_UNIT), T(ws, dts[d], G_UNIT));
            else if (bi)
                RUN(op, at, tol, T(gs, dts[d], G_UNIT), T(ws, dts[d], G_UNIT));
            else
                RUN(op, at, tol, T(gs, dts[d], G_UNIT), T(xs, dts[d], G_UNIT));
        }
    /* a grad one shorter than the forward output (transposed conv with
     * output_padding >= stride: stride 1, dilation 2) */
    lt_attrs at = A(13, 1, 1, 1, 0, 0, 0, 2, 1, 1, 1, 6, 5, 5);
    if (op == LT_OP_conv3d_backward_weight) at.i[10] = at.i[11] = at.i[12] = 3;
    if (op == LT_OP_conv3d_backward_input)
        RUN(op, at, tol, T(D(1, 3, 1, 3, 3), LT_F32, G_UNIT), T(D(3, 2, 3, 3, 3), LT_F32, G_UNIT));
    else if (op == LT_OP_conv3d_backward_weight)
        RUN(op, at, tol, T(D(1, 3, 1, 3, 3), LT_F32, G_UNIT), T(D(1, 2, 6, 5, 5), LT_F32, G_UNIT));
}

static void cases_conv(lt_op op)
{
    if (op == LT_OP_conv3d || op == LT_OP_conv3d_backward_input || op == LT_OP_conv3d_backward_weight) {
        cases_conv3d(op);
        return;
    }
    tol_t tol = {1e-5, 1e-5};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 4; c++) {
            const int *p = conv_cfg[c];
            int N = 2, C = 4, H = 7, Wd = 6, O = 6, KH = 3, KW = 2;
            int OH = (H + 2 * p[2] - p[4] * (KH - 1) - 1) / p[0] + 1;
            int OW = (Wd + 2 * p[3] - p[5] * (KW - 1) - 1) / p[1] + 1;
            lt_attrs at = A(9, p[0], p[1], p[2], p[3], p[4], p[5], p[6],
                            op == LT_OP_conv2d_backward_input ? H : KH,
                            op == LT_OP_conv2d_backward_input ? Wd : KW);
            if (op == LT_OP_conv2d) at.n = 7;
            lt_shape xs = D(N, C, H, Wd), ws = D(O, C / p[6], KH, KW), gs = D(N, O, OH, OW);
            if (op == LT_OP_conv2d)
                RUN(op, at, tol, T(xs, dts[d], G_UNIT), T(ws, dts[d], G_UNIT));
            else if (op == LT_OP_conv2d_backward_input)
                RUN(op, at, tol, T(gs, dts[d], G_UNIT), T(ws, dts[d], G_UNIT));
            else
                RUN(op, at, tol, T(gs, dts[d], G_UNIT), T(xs, dts[d], G_UNIT));
        }
}

static void cases_pool(lt_op op)
{
    tol_t tol = {1e-5, 1e-6};
    lt_shape xs[] = {D(2, 3, 9, 8), D(3, 9, 8)};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    /* max: {kh, kw, sh, sw, ph, pw, dh, dw, ceil} */
    static const int maxc[][9] = {{3, 3, 2, 2, 1, 1, 1, 1, 0}, {2, 3, 2, 1, 0, 1, 2, 1, 1},
                                  {3, 2, 3, 3, 1, 0, 1, 1, 1}, {2, 2, 2, 2, 0, 0, 1, 1, 0}};
    /* avg: {kh, kw, sh, sw, ph, pw, ceil, count_include_pad, divisor} */
    static const int avgc[][9] = {{3, 3, 2, 2, 1, 1, 0, 1, 0}, {3, 3, 2, 2, 1, 1, 1, 0, 0},
                                  {2, 3, 2, 2, 1, 1, 1, 1, 0}, {2, 2, 1, 2, 0, 1, 0, 1, 3}};
    static const int adc[][2] = {{3, 5}, {1, 1}, {9, 8}, {4, 3}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 2; s++)
            for (int c = 0; c < 4; c++) {
                const int *p;
                lt_attrs at;
                int OH, OW;
                if (op == LT_OP_adaptive_avg_pool2d || op == LT_OP_adaptive_avg_pool2d_backward ||
                    op == LT_OP_adaptive_max_pool2d || op == LT_OP_adaptive_max_pool2d_indices ||
                    op == LT_OP_adaptive_max_pool2d_backward) {
                    at = A(2, adc[c][0], adc[c][1]);
                    OH = adc[c][0];
                    OW = adc[c][1];
                } else if (op == LT_OP_avg_pool2d || op == LT_OP_avg_pool2d_backward) {
                    p = avgc[c];
                    at = A(9, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
                    ref_array x, y;
                    ref_array_init(&x, LT_F32, &xs[s]);
                    if (ref_eval(LT_OP_avg_pool2d, &at, &x, 1, &y)) { ref_array_free(&x); continue; }
                    OH = (int)y.shape.dims[y.shape.ndim - 2];
                    OW = (int)y.shape.dims[y.shape.ndim - 1];
                    ref_array_free(&x);
                    ref_array_free(&y);
                } else {
                    p = maxc[c];
                    at = A(9, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
                    ref_array x, y;
                    ref_array_init(&x, LT_F32, &xs[s]);
                    if (ref_eval(LT_OP_max_pool2d, &at, &x, 1, &y)) { ref_array_free(&x); continue; }
                    OH = (int)y.shape.dims[y.shape.ndim - 2];
                    OW = (int)y.shape.dims[y.shape.ndim - 1];
                    ref_array_free(&x);
                    ref_array_free(&y);
                }
                lt_shape gs = xs[s];
                gs.dims[gs.ndim - 2] = OH;
                gs.dims[gs.ndim - 1] = OW;
                int bwd = op == LT_OP_max_pool2d_backward || op == LT_OP_avg_pool2d_backward ||
                          op == LT_OP_adaptive_avg_pool2d_backward;
                int64_t hw = xs[s].dims[xs[s].ndim - 2] * xs[s].dims[xs[s].ndim - 1];
                if (op == LT_OP_max_pool2d_backward_idx ||   /* any indices in the plane */
                    op == LT_OP_adaptive_max_pool2d_backward)
                    RUN(op, at, tol, T(gs, dts[d], G_NORM), T(xs[s], dts[d], G_NORM), TIDX(gs, hw));
                else if (bwd)
                    RUN(op, at, tol, T(gs, dts[d], G_NORM), T(xs[s], dts[d], G_NORM));
                else
                    RUN(op, at, tol, T(xs[s], dts[d], G_NORM));
            }
}

/* layer_norm family: 1 and 2 normalized dims, with and without affine
 * parameters; the backward's mean/rstd are the stats of x (as the forward
 * hands them over). */
static int is_lnorm_op(lt_op op)
{
    return op == LT_OP_layer_norm || op == LT_OP_layer_norm_stats ||
           op == LT_OP_layer_norm_backward || op == LT_OP_layer_norm_backward_affine;
}

static void cases_lnorm(lt_op op, lt_shape xs, int k, lt_dtype dt, tol_t tol)
{
    lt_shape ns = xs, ls = xs;
    ns.ndim = k;
    for (int d = 0; d < k; d++) ns.dims[d] = xs.dims[xs.ndim - k + d];
    ls.ndim = xs.ndim - k;
    int64_t R = 1;
    for (int d = 0; d < ls.ndim; d++) R *= ls.dims[d];
    if (ls.ndim == 0) { ls.ndim = 1; ls.dims[0] = 1; }
    for (int aff = 0; aff < 4; aff++) {
        int hw = aff & 1, hb = (aff >> 1) & 1;
        lt_attrs at = A(3, k, hw, hb);
        at.f[0] = 1e-5;
        if (op == LT_OP_layer_norm) {
            if (hw && hb) RUN(op, at, tol, T(xs, dt, G_NORM), T(ns, dt, G_NORM), T(ns, dt, G_NORM));
            else if (hw) RUN(op, at, tol, T(xs, dt, G_NORM), T(ns, dt, G_NORM));
            else if (hb) RUN(op, at, tol, T(xs, dt, G_NORM), T(ns, dt, G_NORM));
            else RUN(op, at, tol, T(xs, dt, G_NORM));
            continue;
        }
        if (aff > 1) continue;
        if (op == LT_OP_layer_norm_stats) {
            lt_attrs sa = A(1, k);
            sa.f[0] = aff ? 0.5 : 1e-5;
            RUN(op, sa, tol, T(xs, dt, G_NORM));
            continue;
        }
        /* x, then its stats in the backward's dtype */
        ref_array x, st;
        ref_array_init(&x, dt, &xs);
        for (int64_t i = 0; i < dt_numel(&xs); i++)
            x.v[i] = dt_store_round(dt_rng_range(-2, 2), dt);
        lt_attrs sa = A(1, k);
        sa.f[0] = 1e-5;
        ref_eval(LT_OP_layer_norm_stats, &sa, &x, 1, &st);
        lt_attrs ba = A(2, k, hw);
        if (op == LT_OP_layer_norm_backward_affine) ba = A(1, k);
        else if (!hw && aff) continue;
        if (hw && op == LT_OP_layer_norm_backward)
            RUN(op, ba, tol, T(xs, dt, G_NORM), TV(xs, dt, x.v), TV(ls, dt, st.v),
                TV(ls, dt, st.v + R), T(ns, dt, G_NORM));
        else
            RUN(op, ba, tol, T(xs, dt, G_NORM), TV(xs, dt, x.v), TV(ls, dt, st.v),
                TV(ls, dt, st.v + R));
        ref_array_free(&x);
        ref_array_free(&st);
    }
}

static void cases_norm(lt_op op)
{
    tol_t tol = TOL_TR;
    lt_shape shapes[] = {D(3, 4, 5), D(7), D(1, 9)};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    if (is_lnorm_op(op)) {
        tol_t lt = {1e-4, 1e-4};
        for (int d = 0; d < 3; d++) {
            cases_lnorm(op, D(3, 4, 5), 1, dts[d], lt);
            cases_lnorm(op, D(3, 4, 5), 2, dts[d], lt);
            cases_lnorm(op, D(7), 1, dts[d], lt);
            cases_lnorm(op, D(70, 33), 1, dts[d], lt);   /* several row chunks */
        }
        return;
    }
    if (op == LT_OP_argsort) {   /* ties (ints, bools) check stability */
        lt_dtype sdts[] = {LT_F32, LT_F64, LT_BF16, LT_I64, LT_I32, LT_BOOL};
        for (int d = 0; d < 6; d++)
            for (int s = 0; s < 3; s++)
                for (int dim = 0; dim < shapes[s].ndim; dim++)
                    for (int desc = 0; desc < 2; desc++)
                        RUN(op, A(2, dim, desc), tol,
                            T(shapes[s], sdts[d], sdts[d] == LT_BOOL ? G_BOOL :
                                                  sdts[d] == LT_F32 ? G_NAN : G_TIES));
        RUN(op, A(2, 0, 0), tol, T(D0, LT_F32, G_NORM));
        return;
    }
    if (op == LT_OP_cummax_indices) {   /* ties and NaN pick the latest index */
        lt_dtype sdts[] = {LT_F32, LT_F64, LT_BF16, LT_I64, LT_I32, LT_BOOL};
        for (int d = 0; d < 6; d++)
            for (int s = 0; s < 3; s++)
                for (int dim = 0; dim < shapes[s].ndim; dim++)
                    for (int mn = 0; mn < 2; mn++)
                        RUN(op, A(2, dim, mn), tol,
                            T(shapes[s], sdts[d], sdts[d] == LT_BOOL ? G_BOOL :
                                                  sdts[d] == LT_F32 ? G_NAN : G_TIES));
        RUN(op, A(2, 0, 0), tol, T(D0, LT_F32, G_NORM));
        return;
    }
    if (op == LT_OP_cumsum || op == LT_OP_cumprod) {
        lt_dtype sdts[] = {LT_F32, LT_F64, LT_BF16, LT_I64, LT_I32, LT_BOOL};
        for (int d = 0; d < 6; d++)
            for (int s = 0; s < 3; s++)
                for (int dim = 0; dim < shapes[s].ndim; dim++)
                    RUN(op, A(1, dim), tol, T(shapes[s], sdts[d], sdts[d] == LT_BOOL ? G_BOOL : G_NORM));
        RUN(op, A(1, 0), tol, T(D0, LT_F32, G_NORM));
        return;
    }
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++)
            for (int dim = 0; dim < shapes[s].ndim; dim++) {
                lt_attrs at = A(1, dim);
                if (op == LT_OP_softmax || op == LT_OP_log_softmax) {
                    RUN(op, at, tol, T(shapes[s], dts[d], G_NORM));
                    continue;
                }
                /* backward: out = the forward's output on random x */
                ref_array x, y;
                ref_array_init(&x, dts[d], &shapes[s]);
                for (int64_t i = 0; i < dt_numel(&shapes[s]); i++)
                    x.v[i] = dt_store_round(dt_rng_range(-2, 2), dts[d]);
                lt_op fwd = op == LT_OP_softmax_backward ? LT_OP_softmax : LT_OP_log_softmax;
                ref_eval(fwd, &at, &x, 1, &y);
                RUN(op, at, tol, T(shapes[s], dts[d], G_NORM), TV(shapes[s], dts[d], y.v));
                ref_array_free(&x);
                ref_array_free(&y);
            }
    if (op == LT_OP_softmax || op == LT_OP_log_softmax)
        RUN(op, A(1, 1), tol, T(D(3, 4), LT_I64, G_NORM));   /* int -> f32 */
}

static void cases_movement(lt_op op)
{
    tol_t tol = {0, 0};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16, LT_I64, LT_BOOL};
    lt_shape xs = D(4, 5, 6);
    for (int d = 0; d < 5; d++) {
        lt_dtype dt = dts[d];
        int g = dt == LT_BOOL ? G_BOOL : G_NORM;
        switch (op) {
        case LT_OP_reshape:
            RUN(op, A(2, 20, 6), tol, T(xs, dt, g));
            RUN(op, A(4, 2, 2, 30, 1), tol, T(xs, dt, g));
            RUN(op, A(1, 120), tol, T(xs, dt, g));
            RUN(op, A(0), tol, T(D(1), dt, g));
            RUN(op, A(2, 1, 1), tol, T(D0, dt, g));
            break;
        case LT_OP_permute:
            RUN(op, A(3, 2, 0, 1), tol, T(xs, dt, g));
            RUN(op, A(3, 0, 2, 1), tol, T(xs, dt, g));
            RUN(op, A(2, 1, 0), tol, T(D(7, 3), dt, g));
            break;
        case LT_OP_expand:
            RUN(op, A(3, 3, 5, 4), tol, T(D(5, 1), dt, g));
            RUN(op, A(2, 4, 6), tol, T(D(6), dt, g));
            RUN(op, A(3, 2, 3, 4), tol, T(D0, dt, g));
            RUN(op, A(4, 2, -1, 3, 6), tol, T(D(4, 1, 6), dt, g));
            break;
        case LT_OP_slice:
            RUN(op, A(4, 1, 1, 5, 2), tol, T(xs, dt, g));
            RUN(op, A(4, 0, 0, 4, 1), tol, T(xs, dt, g));
            RUN(op, A(4, 2, 3, 6, 3), tol, T(xs, dt, g));
            RUN(op, A(4, 0, 2, 100, 1), tol, T(xs, dt, g));
            break;
        case LT_OP_select:
            RUN(op, A(2, 0, 3), tol, T(xs, dt, g));
            RUN(op, A(2, 2, 5), tol, T(xs, dt, g));
            RUN(op, A(2, 0, 1), tol, T(D(4), dt, g));
            break;
        case LT_OP_diagonal:
            RUN(op, A(3, 0, 0, 1), tol, T(xs, dt, g));
            RUN(op, A(3, 1, 0, 2), tol, T(xs, dt, g));
            RUN(op, A(3, -2, 2, 1), tol, T(xs, dt, g));
            RUN(op, A(3, 2, 0, 1), tol, T(D(5, 5), dt, g));
            break;
        case LT_OP_as_strided:
            RUN(op, A(6, 2, 3, 4, 7, 2, 5), tol, T(xs, dt, g));
            RUN(op, A(4, 1, 10, 12, 3), tol, T(xs, dt, g));
            RUN(op, A(8, 3, 2, 2, 2, 0, 1, 30, 1), tol, T(xs, dt, g));  /* stride 0 */
            break;
        default: break;
        }
    }
}

static void cases_scatter(lt_op op)
{
    tol_t tol = {0, 0};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16, LT_I64};
    lt_shape xs = D(4, 5, 6);
    for (int d = 0; d < 4; d++) {
        lt_dtype dt = dts[d];
        switch (op) {
        case LT_OP_slice_scatter:
            RUN(op, A(4, 1, 1, 5, 2), tol, T(xs, dt, G_NORM), T(D(4, 2, 6), dt, G_NORM));
            RUN(op, A(4, 2, 0, 6, 1), tol, T(xs, dt, G_NORM), T(xs, dt, G_NORM));
            RUN(op, A(4, 0, 3, 4, 1), tol, T(xs, dt, G_NORM), T(D(1, 5, 6), dt, G_NORM));
            break;
        case LT_OP_select_scatter:
            RUN(op, A(2, 1, 3), tol, T(xs, dt, G_NORM), T(D(4, 6), dt, G_NORM));
            RUN(op, A(2, 0, 0), tol, T(D(5), dt, G_NORM), T(D0, dt, G_NORM));
            break;
        case LT_OP_diagonal_scatter:
            RUN(op, A(3, 0, 0, 1), tol, T(xs, dt, G_NORM), T(D(6, 4), dt, G_NORM));
            RUN(op, A(3, -2, 2, 1), tol, T(xs, dt, G_NORM), T(D(4, 4), dt, G_NORM));
            break;
        case LT_OP_as_strided_scatter:
            RUN(op, A(6, 2, 3, 4, 7, 2, 5), tol, T(xs, dt, G_NORM), T(D(3, 4), dt, G_NORM));
            RUN(op, A(4, 1, 10, 12, 3), tol, T(xs, dt, G_NORM), T(D(10), dt, G_NORM));
            break;
        default: break;
        }
    }
    if (op == LT_OP_slice_scatter)   /* promote */
        RUN(op, A(4, 1, 1, 5, 2), tol, T(xs, LT_F32, G_NORM), T(D(4, 2, 6), LT_F64, G_NORM));
}

static void cases_cat(lt_op op)
{
    tol_t tol = {0, 0};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16, LT_I64, LT_BOOL};
    for (int d = 0; d < 5; d++) {
        lt_dtype dt = dts[d];
        int g = dt == LT_BOOL ? G_BOOL : G_NORM;
        RUN(op, A(1, 0), tol, T(D(2, 3), dt, g), T(D(4, 3), dt, g));
        RUN(op, A(1, 1), tol, T(D(2, 3), dt, g), T(D(2, 1), dt, g), T(D(2, 4), dt, g));
        RUN(op, A(1, 0), tol, T(D(5), dt, g));
        RUN(op, A(1, 2), tol, T(D(2, 2, 3), dt, g), T(D(2, 2, 1), dt, g));
    }
    RUN(op, A(1, 1), tol, T(D(2, 3), LT_F32, G_NORM), T(D(2, 1), LT_F64, G_NORM),
        T(D(2, 2), LT_I64, G_NORM));
}

static void cases_index(lt_op op)
{
    tol_t tol = {1e-6, 1e-6};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16, LT_I64};
    for (int d = 0; d < 4; d++) {
        lt_dtype dt = dts[d];
        switch (op) {
        case LT_OP_index_select:
            RUN(op, A(1, 1), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(7), 5));
            RUN(op, A(1, 0), tol, T(D(4, 3), dt, G_NORM), TIDX(D(2), 4));
            RUN(op, A(1, 2), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D0, 6));
            break;
        case LT_OP_gather:
            RUN(op, A(1, 1), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(4, 3, 6), 5));
            RUN(op, A(1, 0), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(2, 5, 3), 4));
            RUN(op, A(1, 1), tol, T(D(5, 4), dt, G_NORM), TIDX(D(5, 7), 4));
            break;
        case LT_OP_scatter_add:
        case LT_OP_scatter:
            RUN(op, A(1, 1), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(4, 3, 6), 5),
                T(D(4, 3, 6), dt, G_NORM));
            RUN(op, A(1, 0), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(2, 5, 3), 4),
                T(D(3, 5, 6), dt, G_NORM));
            break;
        case LT_OP_scatter_reduce:
            for (int r = 0; r < 4; r++) {
                RUN(op, A(2, 1, r), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(4, 3, 6), 5),
                    T(D(4, 3, 6), dt, G_NORM));
                RUN(op, A(2, 0, r), tol, T(D(4, 5, 6), dt, G_NORM), TIDX(D(6, 5, 3), 4),
                    T(D(7, 5, 6), dt, G_NORM));
            }
            RUN(op, A(2, 0, 2), tol, T(D(5), dt, G_NAN), TIDX(D(8), 5), T(D(8), dt, G_NAN));
            break;
        case LT_OP_embedding_backward:
            if (dt == LT_I64) break;
            RUN(op, A(2, 10, -1), tol, T(D(3, 4, 8), dt, G_NORM), TIDX(D(3, 4), 10));
            RUN(op, A(2, 10, 3), tol, T(D(3, 4, 8), dt, G_NORM), TIDX(D(3, 4), 10));
            RUN(op, A(2, 5, -1), tol, T(D(20, 3), dt, G_NORM), TIDX(D(20), 5));
            break;
        case LT_OP_isin:   /* G_TIES: few distinct values, so both answers occur */
            for (int inv = 0; inv < 2; inv++) {
                RUN(op, A(1, inv), tol, T(D(4, 5), dt, G_TIES), T(D(3), dt, G_TIES));
                RUN(op, A(1, inv), tol, T(D(6), dt, G_TIES), T(D(2, 3, 2), dt, G_TIES));
                RUN(op, A(1, inv), tol, T(D0, dt, G_TIES), T(D(4), dt, G_TIES));
                RUN(op, A(1, inv), tol, T(D(5), dt, G_TIES), T(D(0), dt, G_TIES));
            }
            if (dt == LT_F32) RUN(op, A(1, 0), tol, T(D(9), dt, G_NAN), T(D(9), dt, G_NAN));
            break;
        case LT_OP_arange:
            if (dt_is_fl(dt)) {
                RUN(op, A(2, dt, 7), tol, Z(1.5, LT_F64), Z(0.25, LT_F64));
                RUN(op, A(2, dt, 5), tol, Z(-2, LT_F64), Z(-0.5, LT_F64));
            } else {
                RUN(op, A(2, dt, 5), tol, Z(3, LT_I64), Z(-2, LT_I64));
                RUN(op, A(2, LT_I32, 9), tol, Z(0, LT_I64), Z(1, LT_I64));
            }
            break;
        default: break;
        }
    }
}

static void cases_loss(lt_op op)
{
    tol_t tol = {1e-5, 1e-6};
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++)
        for (int red = 0; red < 3; red++)
            for (int ign = 0; ign < 2; ign++)
                for (int w = 0; w < 2; w++) {
                    lt_dtype dt = dts[d];
                    lt_attrs at = A(2, red, ign ? 2 : -100);
                    in_spec sp[5];
                    int n = 0;
                    if (op == LT_OP_nll_loss_backward)
                        sp[n++] = red == 0 ? T(D(6), dt, G_NORM) : T(D0, dt, G_NORM);
                    sp[n++] = T(D(6, 5), dt, G_NORM);
                    sp[n++] = TIDX(D(6), 5);
                    if (w) sp[n++] = T(D(5), dt, G_POS);
                    dt_run2(op, at, sp, n, tol);
                }
    /* 1-d input, 0-dim target */
    in_spec sp[3] = {T(D0, LT_F32, G_NORM), T(D(5), LT_F32, G_NORM), TIDX(D0, 5)};
    if (op == LT_OP_nll_loss) dt_run2(op, A(2, 1, -100), sp + 1, 2, tol);
    else dt_run2(op, A(2, 1, -100), sp, 3, tol);
}

/* ------------------------------------------------------ large shapes */

/* One big f32 case per op (data and transposed-view inputs), big enough to
 * cross the kernels' OpenMP thresholds. */
static void run_big(lt_op op, lt_attrs at, const in_spec *sp, int n, tol_t tol)
{
    dt_run_case(op, &at, sp, n, tol, M_DATA);
    dt_run_case(op, &at, sp, n, tol, M_TRANSPOSED);
}
#define BIG(op, at, tol, ...) do { \
        in_spec sp_[] = {__VA_ARGS__}; \
        run_big(op, at, sp_, (int)(sizeof sp_ / sizeof sp_[0]), tol); \
    } while (0)

static void cases_large(lt_op op)
{
    lt_dtype f = LT_F32;
    tol_t tol = is_transc(op) ? TOL_TR : TOL;
    switch (dt_op_kind[op]) {
    case LT_KIND_UNARY:
        if (op == LT_OP_cast) BIG(op, A(1, LT_BF16), tol, T(D(300, 257), f, G_NORM));
        else BIG(op, A(0), tol, T(D(300, 257), f, ew_gen(op, 0)));
        break;
    case LT_KIND_BINARY:
        BIG(op, A(0), tol, T(D(300, 1), f, ew_gen(op, 0)), T(D(1, 257), f, ew_gen(op, 1)));
        if (op != LT_OP_leaky_relu)
            BIG(op, A(0), tol, T(D(77001), f, ew_gen(op, 0)), T(D(77001), f, ew_gen(op, 1)));
        break;
    case LT_KIND_TERNARY:
        if (op == LT_OP_where)
            BIG(op, A(0), tol, T(D(300, 1), LT_BOOL, G_BOOL), T(D(1, 257), f, G_NORM), W(2, LT_F64));
        else if (op == LT_OP_clamp)
            BIG(op, A(0), tol, T(D(300, 257), f, G_NORM), W(-0.5, LT_F64), T(D(257), f, G_POS));
        else
            BIG(op, A(0), tol, T(D(300, 257), f, G_NORM), T(D(300, 1), f, G_NORM), W(0.25, LT_F64));
        break;
    case LT_KIND_REDUCE: {
        tol_t rt = {1e-5, 1e-4};
        int g = op == LT_OP_prod ? G_NEAR1 : (op == LT_OP_any || op == LT_OP_all) ? G_BOOL : G_NORM;
        if (op == LT_OP_argmax || op == LT_OP_argmin) {
            for (int dim = -1; dim < 2; dim++) BIG(op, A(2, dim, 0), rt, T(D(300, 257), f, G_NORM));
            break;
        }
        int masks[] = {1, 2, 4, 6, 7};
        for (int m = 0; m < 5; m++) {
            if (op == LT_OP_prod && masks[m] != 4) continue;   /* keep products finite */
            BIG(op, A(2, masks[m], 0), rt, T(D(64, 129, 33), f, g));
        }
        break;
    }
    case LT_KIND_MATMUL: {
        tol_t mt = {1e-5, 1e-4};
        if (op == LT_OP_mm) BIG(op, A(0), mt, T(D(130, 257), f, G_UNIT), T(D(257, 120), f, G_UNIT));
        else if (op == LT_OP_addmm)
            BIG(op, A(0), mt, T(D(120), f, G_UNIT), T(D(300, 257), f, G_UNIT),
                T(D(257, 120), f, G_UNIT));
        else {
            BIG(op, A(0), mt, T(D(4, 64, 70), f, G_UNIT), T(D(4, 70, 50), f, G_UNIT));
            BIG(op, A(0), mt, T(D(9, 33, 20), f, G_UNIT), T(D(9, 20, 17), f, G_UNIT));
        }
        break;
    }
    case LT_KIND_CONV: {
        tol_t ct = {1e-5, 1e-4};
        lt_attrs at = A(9, 1, 1, 1, 1, 1, 1, 1, 3, 3);
        if (op == LT_OP_conv2d_backward_input) at.i[7] = at.i[8] = 20;
        if (op == LT_OP_conv2d) BIG(op, at, ct, T(D(4, 16, 20, 20), f, G_UNIT), T(D(32, 16, 3, 3), f, G_UNIT));
        else if (op == LT_OP_conv2d_backward_input)
            BIG(op, at, ct, T(D(4, 32, 20, 20), f, G_UNIT), T(D(32, 16, 3, 3), f, G_UNIT));
        else if (op == LT_OP_conv2d_backward_weight)
            BIG(op, at, ct, T(D(4, 32, 20, 20), f, G_UNIT), T(D(4, 16, 20, 20), f, G_UNIT));
        else {
            lt_attrs a3 = A(13, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3);
            if (op == LT_OP_conv3d_backward_input) a3.i[10] = a3.i[11] = a3.i[12] = 12;
            if (op == LT_OP_conv3d) {
                a3.n = 10;
                BIG(op, a3, ct, T(D(2, 8, 12, 12, 12), f, G_UNIT), T(D(16, 8, 3, 3, 3), f, G_UNIT));
            } else if (op == LT_OP_conv3d_backward_input) {
                BIG(op, a3, ct, T(D(2, 16, 12, 12, 12), f, G_UNIT), T(D(16, 8, 3, 3, 3), f, G_UNIT));
            } else {
                BIG(op, a3, ct, T(D(2, 16, 12, 12, 12), f, G_UNIT), T(D(2, 8, 12, 12, 12), f, G_UNIT));
            }
        }
        break;
    }
    case LT_KIND_POOL: {
        lt_attrs at = A(9, 3, 3, 2, 2, 1, 1, 1, 1, 0);
        lt_shape g = D(4, 16, 20, 20);
        if (op == LT_OP_avg_pool2d || op == LT_OP_avg_pool2d_backward) at = A(9, 3, 3, 2, 2, 1, 1, 0, 1, 0);
        if (op == LT_OP_adaptive_avg_pool2d || op == LT_OP_adaptive_avg_pool2d_backward ||
            op == LT_OP_adaptive_max_pool2d || op == LT_OP_adaptive_max_pool2d_indices ||
            op == LT_OP_adaptive_max_pool2d_backward) {
            at = A(2, 7, 9);
            g = D(4, 16, 7, 9);
        }
        int bwd = op == LT_OP_max_pool2d_backward || op == LT_OP_avg_pool2d_backward ||
                  op == LT_OP_adaptive_avg_pool2d_backward;
        if (op == LT_OP_max_pool2d_backward_idx || op == LT_OP_adaptive_max_pool2d_backward)
            BIG(op, at, TOL, T(g, f, G_NORM), T(D(4, 16, 40, 40), f, G_NORM), TIDX(g, 1600));
        else if (bwd) BIG(op, at, TOL, T(g, f, G_NORM), T(D(4, 16, 40, 40), f, G_NORM));
        else BIG(op, at, TOL, T(D(4, 16, 40, 40), f, G_NORM));
        break;
    }
    case LT_KIND_NORM: {
        /* backward = grad - exp(out) * sum(grad) (or out * (grad - dot)): with rows of
         * 200-300 terms the f32 error bound is ~eps * e^0.9 * sum|grad| ~ 3e-5 absolute,
         * however small the result; hence atol 1e-4 here (not for the forward) */
        tol_t bt = {1e-4, 1e-4};
        if (is_lnorm_op(op)) {
            lt_attrs at = A(3, 1, 0, 0);
            at.f[0] = 1e-5;
            if (op == LT_OP_layer_norm || op == LT_OP_layer_norm_stats)
                BIG(op, at, bt, T(D(200, 300), f, G_NORM));
            break;
        }
        for (int dim = 0; dim < 2; dim++) {
            if (op == LT_OP_argsort || op == LT_OP_cummax_indices)
                BIG(op, A(2, dim, dim), TOL_TR, T(D(200, 300), f, G_NORM));
            else if (op == LT_OP_cumsum || op == LT_OP_cumprod)
                BIG(op, A(1, dim), TOL_TR, T(D(200, 300), f, op == LT_OP_cumprod ? G_UNIT : G_NORM));
            else if (op == LT_OP_softmax || op == LT_OP_log_softmax)
                BIG(op, A(1, dim), TOL_TR, T(D(200, 300), f, G_NORM));
            else
                BIG(op, A(1, dim), bt, T(D(200, 300), f, G_NORM), T(D(200, 300), f, G_UNIT));
        }
        break;
    }
    case LT_KIND_MOVEMENT: {
        tol_t z = {0, 0};
        lt_shape x = D(40, 50, 60);
        switch (op) {
        case LT_OP_reshape: BIG(op, A(2, 2000, 60), z, T(x, f, G_NORM)); break;
        case LT_OP_permute: BIG(op, A(3, 2, 0, 1), z, T(x, f, G_NORM)); break;
        case LT_OP_expand: BIG(op, A(3, 40, 50, 60), z, T(D(50, 1), f, G_NORM)); break;
        case LT_OP_slice: BIG(op, A(4, 2, 3, 60, 2), z, T(x, f, G_NORM)); break;
        case LT_OP_select: BIG(op, A(2, 1, 7), z, T(x, f, G_NORM)); break;
        case LT_OP_diagonal: BIG(op, A(3, 1, 1, 2), z, T(x, f, G_NORM)); break;
        default: BIG(op, A(6, 2, 300, 100, 300, 1, 7), z, T(x, f, G_NORM)); break;
        }
        break;
    }
    case LT_KIND_SCATTER: {
        tol_t z = {0, 0};
        lt_shape x = D(40, 50, 60);
        switch (op) {
        case LT_OP_slice_scatter: BIG(op, A(4, 2, 3, 60, 2), z, T(x, f, G_NORM), T(D(40, 50, 29), f, G_NORM)); break;
        case LT_OP_select_scatter: BIG(op, A(2, 1, 7), z, T(x, f, G_NORM), T(D(40, 60), f, G_NORM)); break;
        case LT_OP_diagonal_scatter: BIG(op, A(3, 1, 1, 2), z, T(x, f, G_NORM), T(D(40, 50), f, G_NORM)); break;
        default: BIG(op, A(6, 2, 300, 100, 300, 1, 7), z, T(x, f, G_NORM), T(D(300, 100), f, G_NORM)); break;
        }
        break;
    }
    case LT_KIND_CONCAT:
        BIG(op, A(1, 1), TOL, T(D(200, 150), f, G_NORM), T(D(200, 170), f, G_NORM));
        break;
    case LT_KIND_INDEX:
        if (op == LT_OP_index_select) BIG(op, A(1, 0), TOL, T(D(200, 300), f, G_NORM), TIDX(D(250), 200));
        else if (op == LT_OP_gather) BIG(op, A(1, 1), TOL, T(D(200, 300), f, G_NORM), TIDX(D(200, 250), 300));
        else if (op == LT_OP_scatter_add || op == LT_OP_scatter)
            BIG(op, A(1, 1), TOL, T(D(200, 300), f, G_NORM), TIDX(D(200, 250), 300), T(D(200, 250), f, G_NORM));
        else if (op == LT_OP_scatter_reduce)
            BIG(op, A(2, 1, 2), TOL, T(D(200, 300), f, G_NORM), TIDX(D(200, 250), 300), T(D(200, 250), f, G_NORM));
        else if (op == LT_OP_embedding_backward)
            BIG(op, A(2, 500, 0), TOL, T(D(64, 30, 40), f, G_NORM), TIDX(D(64, 30), 500));
        else if (op == LT_OP_isin)
            BIG(op, A(1, 0), TOL, TIDX(D(300, 257), 5000), TIDX(D(2000), 5000));
        else BIG(op, A(2, LT_F32, 100000), TOL, Z(-3, LT_F64), Z(0.125, LT_F64));
        break;
    case LT_KIND_LOSS:
        if (op == LT_OP_nll_loss) BIG(op, A(2, 1, 3), TOL, T(D(3000, 50), f, G_NORM), TIDX(D(3000), 50));
        else BIG(op, A(2, 0, 3), TOL, T(D(3000), f, G_NORM), T(D(3000, 50), f, G_NORM), TIDX(D(3000), 50));
        break;
    default: break;
    }
}

/* view_as_real / view_as_complex: the reference is the element bytes
 * themselves ([.., 2] floats are (re, im) pairs). Inputs are contiguous,
 * transposed (a permute folded into the kernel's view) and sliced. */
static void cases_bitcast(lt_op op)
{
    int k = dt_op_kind[op];
    const int64_t R = 6, C = 5;
    float *buf = malloc((size_t)(R * C * 2) * sizeof(float));
    float *got = malloc((size_t)(R * C * 2) * sizeof(float));
    for (int64_t i = 0; i < R * C * 2; i++) buf[i] = (float)dt_rng_range(-3, 3);
    for (int mode = 0; mode < 3; mode++) {
        dt_fam[k].cases++;
        dt_op_cases[op]++;
        int bad = 0;
        /* complex [R, C] (as raw pairs) or float [R, C, 2] */
        lt_dtype dt = op == LT_OP_view_as_real ? LT_C64 : LT_F32;
        lt_shape s = op == LT_OP_view_as_real ? lt_shape_make(2, (int64_t[]){R, C})
                                              : lt_shape_make(3, (int64_t[]){R, C, 2});
        lt_tensor *x = NULL, *v = NULL, *y = NULL;
        bad |= lt_tensor_from_host(0, buf, dt, &s, &x) != LT_OK;
        /* the element (r, c) of the view: contiguous, transposed [C, R], or rows 1.. */
        int64_t vr = mode == 1 ? C : mode == 2 ? R - 1 : R, vc = mode == 1 ? R : C;
        lt_attrs a;
        memset(&a, 0, sizeof a);
        if (!bad && mode == 1) {
            a.n = s.ndim;
            a.i[0] = 1; a.i[1] = 0; a.i[2] = 2;
            bad |= lt_trace1(LT_OP_permute, x, &a, &v) != LT_OK;
        } else if (!bad && mode == 2) {
            a.n = 4; a.i[0] = 0; a.i[1] = 1; a.i[2] = R; a.i[3] = 1;
            bad |= lt_trace1(LT_OP_slice, x, &a, &v) != LT_OK;
        } else if (!bad) {
            v = lt_tensor_retain(x);
        }
        if (!bad) bad |= lt_trace1(op, v, NULL, &y) != LT_OK;
        if (!bad) bad |= lt_tensor_to_host(y, got, op == LT_OP_view_as_real ? LT_F32 : LT_C64) != LT_OK;
        if (!bad) {
            const lt_shape *ys = lt_tensor_shape(y);
            int want_nd = op == LT_OP_view_as_real ? 3 : 2;
            bad |= ys->ndim != want_nd || ys->dims[0] != vr || ys->dims[1] != vc;
            for (int64_t i = 0; !bad && i < vr; i++)
                for (int64_t j = 0; j < vc; j++) {
                    int64_t r = mode == 1 ? j : mode == 2 ? i + 1 : i, c = mode == 1 ? i : j;
                    for (int p = 0; p < 2; p++)
                        if (got[(i * vc + j) * 2 + p] != buf[(r * C + c) * 2 + p]) bad = 1;
                }
        }
        if (bad) {
            printf("FAIL %s mode %d: %s\n", dt_op_names[op], mode, lt_last_error());
            dt_fam[k].failed++;
        }
        lt_tensor_release(x);
        lt_tensor_release(v);
        lt_tensor_release(y);
    }
    free(buf);
    free(got);
}

/* opt_barrier: the value of input 0, bit for bit, whatever the fence
 * inputs (other shapes and dtypes): over a parameter, a transposed view and a
 * computed value (lazy/compile_view.c; ordering: tests/c/test_barrier.c) */
static void cases_barrier(lt_op op)
{
    int k = dt_op_kind[op];
    const int64_t R = 7, C = 5;
    static const lt_dtype dts[] = {LT_F32, LT_I64, LT_BF16, LT_BOOL};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int mode = 0; mode < 3; mode++) {
            dt_fam[k].cases++;
            dt_op_cases[op]++;
            lt_dtype dt = dts[d];
            lt_shape s = lt_shape_make(2, (int64_t[]){R, C}), fs = lt_shape_make(1, (int64_t[]){3});
            double src[35], fv[3] = {1, 2, 3}, got[35];
            for (int i = 0; i < R * C; i++)
                src[i] = dt == LT_BOOL ? (double)(dt_rng_u64() & 1) : dt == LT_I64
                         ? (double)dt_rng_int(-50, 50) : dt_rng_range(-3, 3);
            lt_tensor *x = NULL, *f = NULL, *v = NULL, *y = NULL;
            int bad = lt_tensor_from_host(0, src, LT_F64, &s, &x) != LT_OK;
            if (!bad) {     /* the device value of src in dt */
                lt_tensor *c = NULL;
                lt_attrs ca = {.n = 1, .i = {dt}};
                bad |= lt_trace1(LT_OP_cast, x, &ca, &c) != LT_OK;
                lt_tensor_release(x);
                x = c;
            }
            bad |= !x || lt_tensor_from_host(0, fv, LT_F64, &fs, &f) != LT_OK;
            lt_attrs a;
            memset(&a, 0, sizeof a);
            if (!bad && mode == 1) {
                a.n = 2; a.i[0] = 1; a.i[1] = 0;
                bad |= lt_trace1(LT_OP_permute, x, &a, &v) != LT_OK;
            } else if (!bad && mode == 2 && dt != LT_BOOL) {
                bad |= lt_trace(LT_OP_neg, (lt_tensor *[]){x}, 1, NULL, &v) != LT_OK;
            } else if (!bad) {
                v = lt_tensor_retain(x);
            }
            if (!bad)
                bad |= lt_trace(op, (lt_tensor *[]){v, f, x}, 3, NULL, &y) != LT_OK;
            bad |= !bad && (lt_tensor_dtype(y) != dt ||
                            !lt_shape_equal(lt_tensor_shape(y), lt_tensor_shape(v)));
            if (!bad) {
                double want[35];
                bad |= lt_tensor_to_host(v, want, LT_F64) != LT_OK ||
                       lt_tensor_to_host(y, got, LT_F64) != LT_OK ||
                       memcmp(want, got, (size_t)(R * C) * sizeof(double)) != 0;
            }
            if (bad) {
                printf("FAIL %s %s mode %d: %s\n", dt_op_names[op], lt_dtype_name(dt), mode,
                       lt_last_error());
                dt_fam[k].failed++;
            }
            lt_tensor_release(x);
            lt_tensor_release(f);
            lt_tensor_release(v);
            lt_tensor_release(y);
        }
}

/* spmd_full_to_shard / spmd_shard_to_full (lazy/spmd_manual.c) on a mesh of
 * one core: the core's block is the whole value, so a region between them
 * is the region's op on the whole value (8 cores, per-core blocks:
 * tests/python/test_spmd_manual.py) */
static void cases_manual(lt_op op)
{
    int k = dt_op_kind[op];
    dt_fam[k].cases++;
    dt_op_cases[op]++;
    double src[12], got[12];
    for (int i = 0; i < 12; i++) src[i] = dt_rng_range(-3, 3);
    lt_shape s = lt_shape_make(2, (int64_t[]){3, 4});
    lt_tensor *x = NULL, *m = NULL, *y = NULL, *z = NULL;
    lt_sharding *sh = NULL;
    int64_t ms[1] = {1}, ids[1] = {0}, axes[2] = {1, 0};
    int bad = lt_tensor_from_host(0, src, LT_F64, &s, &x) != LT_OK ||
              lt_sharding_new(1, ms, ids, 2, axes, NULL, &sh) != LT_OK ||
              lt_tensor_set_sharding(x, sh) != LT_OK || lt_tensor_spmd_full_to_shard(x, &m) != LT_OK ||
              lt_trace(LT_OP_neg, (lt_tensor *[]){m}, 1, NULL, &y) != LT_OK ||
              lt_tensor_spmd_mark_manual(y, sh) != LT_OK ||
              lt_tensor_spmd_shard_to_full(y, sh, s.dims, 2, &z) != LT_OK ||
              lt_tensor_to_host(z, got, LT_F64) != LT_OK;
    for (int i = 0; i < 12 && !bad; i++) bad = got[i] != -src[i];
    if (bad) {
        printf("FAIL %s: %s\n", dt_op_names[op], lt_last_error());
        dt_fam[k].failed++;
    }
    lt_sharding_release(sh);
    lt_tensor_release(x);
    lt_tensor_release(m);
    lt_tensor_release(y);
    lt_tensor_release(z);
}

/* -------------------------------------------------------- the tests */

static void cases_for(lt_op op)
{
    if (op == LT_OP_spmd_full_to_shard || op == LT_OP_spmd_shard_to_full) {
        cases_manual(op);
        return;
    }
    switch (dt_op_kind[op]) {
    case LT_KIND_LEAF: break;
    case LT_KIND_UNARY: cases_unary(op); break;
    case LT_KIND_BINARY: cases_binary(op); break;
    case LT_KIND_TERNARY: cases_ternary(op); break;
    case LT_KIND_REDUCE: cases_reduce(op); break;
    case LT_KIND_MATMUL: cases_matmul(op); break;
    case LT_KIND_CONV: cases_conv(op); break;
    case LT_KIND_POOL: cases_pool(op); break;
    case LT_KIND_NORM: cases_norm(op); break;
    case LT_KIND_MOVEMENT: cases_movement(op); break;
    case LT_KIND_SCATTER: cases_scatter(op); break;
    case LT_KIND_CONCAT: cases_cat(op); break;
    case LT_KIND_INDEX: cases_index(op); break;
    case LT_KIND_LOSS: cases_loss(op); break;
    case LT_KIND_RANDOM: dt_cases_random(op); break;       /* support_diff_random.c */
    case LT_KIND_COLLECTIVE: dt_cases_collective(op); break;   /* support_diff_random.c */
    case LT_KIND_BITCAST: cases_bitcast(op); break;
    case LT_KIND_LINALG: dt_cases_linalg(op); break;   /* support_diff_linalg.c */
    case LT_KIND_BARRIER: cases_barrier(op); break;
    }
    if (!dt_bf16_mode) cases_large(op);
}

/* LT_DIFF_OPS=add,mul restricts the run to those ops (debugging aid). */
static int op_selected(lt_op op)
{
    const char *sel = getenv("LT_DIFF_OPS");
    if (!sel || !*sel) return 1;
    size_t len = strlen(dt_op_names[op]);
    for (const char *p = sel; (p = strstr(p, dt_op_names[op])); p += len)
        if ((p == sel || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return 1;
    return 0;
}

static void test_all_ops(void **st)
{
    for (int op = 0; op < LT_NUM_OPS; op++)
        if (op_selected(op)) cases_for(op);
    int failed = dt_print_summary();
    int uncovered = 0;
    for (int op = 0; op < LT_NUM_OPS; op++)
        if (dt_op_kind[op] != LT_KIND_LEAF && !dt_op_cases[op] && op_selected(op)) {
            printf("UNCOVERED op %s: no cases in the differential test\n", dt_op_names[op]);
            uncovered++;
        }
    assert_int_equal(uncovered, 0);
    assert_int_equal(failed, 0);
}

/* --------------------------------------------------- bf16 storage mode */

static void test_bf16_mode_child(void **st)
{
    char *argv[] = {"test_ops_diff", NULL};
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = 0;
    /* environment: ours + the two switches */
    int ne = 0;
    while (environ[ne]) ne++;
    char **env = calloc((size_t)ne + 3, sizeof *env);
    for (int i = 0; i < ne; i++) env[i] = environ[i];
    env[ne] = "LAZYTPU_USE_BF16=1";
    env[ne + 1] = "LT_DIFF_BF16_CHILD=1";
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, exe, NULL, NULL, argv, env), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    free(env);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* In the child: f32 stored as bf16. Elementwise, reductions, matmul, norm. */
static void test_bf16_mode(void **st)
{
    assert_int_equal(lt_bf16_mode(), 1);
    lt_op ops[] = {LT_OP_add, LT_OP_mul, LT_OP_exp, LT_OP_tanh, LT_OP_relu, LT_OP_where,
                   LT_OP_sum, LT_OP_mean, LT_OP_amax, LT_OP_mm, LT_OP_softmax, LT_OP_layer_norm,
                   LT_OP_layer_norm_backward,
                   LT_OP_conv2d, LT_OP_max_pool2d, LT_OP_slice, LT_OP_cat, LT_OP_gather,
                   LT_OP_nll_loss};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) cases_for(ops[i]);
    assert_int_equal(dt_print_summary(), 0);
}

static int setup(void **st)
{
    return lt_init() == LT_OK ? 0 : -1;
}

static int teardown(void **st)
{
    lt_shutdown();
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("LT_DIFF_SEED"))      /* vary the random inputs (default: fixed) */
        dt_rng_state ^= strtoull(getenv("LT_DIFF_SEED"), NULL, 0) * 0x2545f4914f6cdd1dull;
    if (getenv("LT_DIFF_BF16_CHILD")) {
        dt_bf16_mode = 1;
        const struct CMUnitTest child[] = {cmocka_unit_test(test_bf16_mode)};
        return cmocka_run_group_tests_name("ops_diff_bf16_mode", child, setup, teardown);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_ops),
        cmocka_unit_test(test_bf16_mode_child),
    };
    return cmocka_run_group_tests_name("ops_diff", tests, setup, teardown);
}
