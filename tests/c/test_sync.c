/* tests/c/test_sync.c — the sync pipeline end to end: compile once per key,
 * recompilation on a new batch size, mark_step, value reads, OOM, bf16 mode,
 * graph size limit, donation, no leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "tensor.h"
#include "device.h"

static void reinit(const char *hbm, const char *bf16, const char *limit)
{
    lt_shutdown();
    if (hbm) setenv("LAZYTPU_HBM_BYTES", hbm, 1); else unsetenv("LAZYTPU_HBM_BYTES");
    if (bf16) setenv("LAZYTPU_USE_BF16", bf16, 1); else unsetenv("LAZYTPU_USE_BF16");
    if (limit) setenv("LAZYTPU_GRAPH_LIMIT", limit, 1); else unsetenv("LAZYTPU_GRAPH_LIMIT");
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    assert_int_equal(lt_init(), LT_OK);
    lt_metrics_clear_all();
}

static int setup(void **st) { (void)st; reinit(NULL, NULL, NULL); return 0; }
static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    assert_int_equal(lt_live_tensors(1), 0);
    assert_int_equal(lt_core_bytes_in_use(0), 0);
    lt_shutdown();
    return 0;
}

static lt_tensor *host(int core, const float *d, int nd, const int64_t *dims)
{
    lt_shape s = lt_shape_make(nd, dims);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(core, d, LT_F32, &s, &t), LT_OK);
    return t;
}

static lt_tensor *t2(lt_op op, lt_tensor *a, lt_tensor *b, const lt_attrs *at)
{
    lt_tensor *o;
    lt_status st = lt_trace2(op, a, b, at, &o);
    if (st != LT_OK) fail_msg("%s", lt_last_error());
    return o;
}

/* One "training step": h = relu(x @ w); loss = sum(h); w -= lr * w. */
static void step(lt_tensor *w, int batch, double lr, float *loss_out)
{
    int64_t dims[2] = {batch, 784};
    float *xd = malloc((size_t)batch * 784 * sizeof *xd);
    for (int i = 0; i < batch * 784; i++) xd[i] = (float)((i % 7) - 3) * 0.01f;
    lt_tensor *x = host(0, xd, 2, dims);
    free(xd);
    lt_tensor *h0 = t2(LT_OP_mm, x, w, NULL), *h, *loss, *lrt, *d, *wn;
    assert_int_equal(lt_trace1(LT_OP_relu, h0, NULL, &h), LT_OK);
    lt_attrs all = {.n = 2, .i = {3, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, h, &all, &loss), LT_OK);
    assert_int_equal(lt_scalar(0, lr, LT_F64, 1, &lrt), LT_OK);
    d = t2(LT_OP_mul, w, lrt, NULL);
    wn = t2(LT_OP_sub, w, d, NULL);
    assert_int_equal(lt_tensor_assign(w, wn), LT_OK);
    lt_tensor_release(wn); lt_tensor_release(d); lt_tensor_release(lrt);
    lt_tensor_release(h); lt_tensor_release(h0); lt_tensor_release(x);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_false(lt_tensor_is_pending(loss));
    if (loss_out) assert_int_equal(lt_tensor_to_host(loss, loss_out, LT_F32), LT_OK);
    lt_tensor_release(loss);
}

static void test_compile_once_then_recompile(void **st)
{
    (void)st;
    float *w0 = malloc(784 * 10 * sizeof *w0);
    for (int i = 0; i < 7840; i++) w0[i] = (float)((i % 5) + 1) * 0.01f;
    lt_tensor *w = host(0, w0, 2, (int64_t[]){784, 10});
    double scale = 1;
    lt_set_caller("train.py:42 in step");
    for (int i = 0; i < 100; i++) {
        double lr = 0.001 * (1 + i % 3);     /* changing learning rate: no recompile */
        step(w, 64, lr, NULL);
        scale *= 1 - lr;
    }
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);
    assert_int_equal(lt_counter_value("CachedCompile"), 99);
    assert_int_equal(lt_counter_value("MarkStep"), 100);
    assert_int_equal(lt_counter_value("SyncCause::mark_step"), 100);
    assert_int_equal(lt_counter_value("lazytpu::mm"), 100);
    int64_t n; double acc;
    assert_int_equal(lt_metric_data("CompileTime", &n, &acc), 0);
    assert_int_equal(n, 1);
    assert_int_equal(lt_metric_data("TensorsGraphSize", &n, &acc), 0);
    assert_int_equal(n, 100);
    /* w was scaled by prod(1 - lr_i): checks that scalar parameters are
     * passed per execution, not baked into the cached program */
    float *w1 = malloc(7840 * sizeof *w1);
    assert_int_equal(lt_tensor_to_host(w, w1, LT_F32), LT_OK);
    for (int i = 0; i < 7840; i += 97)
        assert_true(fabs(w1[i] - w0[i] * scale) <= 1e-5 * fabs(w0[i]) + 1e-7);
    /* a changed batch size compiles once more, and says why */
    float loss;
    step(w, 32, 0.001, &loss);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("CachedCompile"), 99);
    assert_int_equal(lt_counter_value("Recompilation::mark_step"), 1);
    char *rep = lt_metrics_report();
    if (!strstr(rep, "[64, 784] -> [32, 784]") || !strstr(rep, "train.py:42 in step") ||
        !strstr(rep, "cause mark_step"))
        fail_msg("report lacks the recompilation note:\n%s", rep);
    free(rep);
    step(w, 32, 0.002, NULL);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("CachedCompile"), 100);
    lt_set_caller(NULL);
    lt_tensor_release(w);
    free(w0); free(w1);
}

static void test_mark_step_all_live(void **st)
{
    (void)st;
    float d[6] = {1, 2, 3, 4, 5, 6};
    lt_tensor *x = host(0, d, 2, (int64_t[]){2, 3});
    lt_tensor *a, *b, *c, *y;
    assert_int_equal(lt_trace1(LT_OP_exp, x, NULL, &a), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_neg, a, NULL, &b), LT_OK);
    c = t2(LT_OP_add, a, b, NULL);
    y = host(1, d, 1, (int64_t[]){6});    /* other core: untouched */
    lt_tensor *yn;
    assert_int_equal(lt_trace1(LT_OP_neg, y, NULL, &yn), LT_OK);
    assert_true(lt_tensor_is_pending(a) && lt_tensor_is_pending(b) && lt_tensor_is_pending(c));
    assert_int_equal(lt_live_tensors(0), 4);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_false(lt_tensor_is_pending(a) || lt_tensor_is_pending(b) || lt_tensor_is_pending(c));
    assert_true(lt_tensor_is_pending(yn));
    assert_int_equal(lt_live_tensors(0), 4);
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);   /* one graph, three outputs */
    float out[6];
    assert_int_equal(lt_tensor_to_host(b, out, LT_F32), LT_OK);
    for (int i = 0; i < 6; i++) assert_true(fabsf(out[i] + expf(d[i])) <= 1e-5f * expf(d[i]));
    assert_int_equal(lt_tensor_to_host(c, out, LT_F32), LT_OK);
    for (int i = 0; i < 6; i++) assert_true(fabsf(out[i]) <= 1e-6f);
    assert_int_equal(lt_counter_value("SyncCause::value_read"), 0);
    /* explicit sync of a tensor list across cores */
    lt_tensor *e;
    assert_int_equal(lt_trace1(LT_OP_sqrt, x, NULL, &e), LT_OK);
    lt_tensor *both[2] = {e, yn};
    assert_int_equal(lt_sync(both, 2, LT_SYNC_EXPLICIT, 1), LT_OK);
    assert_false(lt_tensor_is_pending(e) || lt_tensor_is_pending(yn));
    assert_int_equal(lt_counter_value("SyncCause::explicit"), 2);
    assert_int_equal(lt_tensor_to_host(yn, out, LT_F32), LT_OK);
    for (int i = 0; i < 6; i++) assert_true(out[i] == -d[i]);
    lt_tensor *all[] = {x, a, b, c, y, yn, e};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_release(all[i]);
}

static void test_value_read_syncs(void **st)
{
    (void)st;
    float d[4] = {1, -2, 3, -4};
    lt_tensor *x = host(0, d, 1, (int64_t[]){4}), *r, *s, *two;
    assert_int_equal(lt_trace1(LT_OP_relu, x, NULL, &r), LT_OK);
    assert_int_equal(lt_scalar(0, 2.5, LT_F64, 1, &two), LT_OK);
    s = t2(LT_OP_mul, r, two, NULL);
    assert_int_equal(lt_tensor_dtype(s), LT_F32);
    assert_true(lt_tensor_is_pending(s));
    float out[4];
    assert_int_equal(lt_tensor_to_host(s, out, LT_F32), LT_OK);
    assert_int_equal(lt_counter_value("SyncCause::value_read"), 1);
    assert_false(lt_tensor_is_pending(s));
    float expect[4] = {2.5f, 0, 7.5f, 0};
    for (int i = 0; i < 4; i++) assert_true(out[i] == expect[i]);
    /* read as another dtype; a second read does not sync again */
    int64_t oi[4];
    assert_int_equal(lt_tensor_to_host(s, oi, LT_I64), LT_OK);
    assert_int_equal(oi[2], 7);
    assert_int_equal(lt_counter_value("SyncCause::value_read"), 1);
    /* a scalar reads without a sync */
    double dv;
    assert_int_equal(lt_tensor_to_host(two, &dv, LT_F64), LT_OK);
    assert_true(dv == 2.5);
    int64_t out_n; double acc;
    assert_int_equal(lt_metric_data("InboundData", &out_n, &acc), 0);
    assert_true(out_n >= 2);
    lt_tensor_release(x); lt_tensor_release(r); lt_tensor_release(s); lt_tensor_release(two);
}

static void test_oom(void **st)
{
    (void)st;
    reinit("4096", NULL, NULL);
    float d[256];
    for (int i = 0; i < 256; i++) d[i] = (float)i;
    lt_tensor *x = host(0, d, 1, (int64_t[]){256}), *big, *e;   /* 1 KiB */
    lt_attrs ex = {.n = 2, .i = {64, 256}};                       /* 64 KiB */
    assert_int_equal(lt_trace1(LT_OP_expand, x, &ex, &big), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_exp, big, NULL, &e), LT_OK);
    lt_status st2 = lt_sync_core(0, LT_SYNC_MARK_STEP, 0);
    assert_int_equal(st2, LT_ERR_OOM);
    const char *m = lt_last_error();
    if (!strstr(m, "core 0") || !strstr(m, "64") || !strstr(m, "in use"))
        fail_msg("OOM message lacks core/request/usage: %s", m);
    /* nothing changed: still pending, nothing leaked */
    assert_true(lt_tensor_is_pending(e));
    assert_int_equal(lt_core_bytes_in_use(0), 1024);
    /* allocating from host past the budget fails too */
    float *hb = calloc(2048, sizeof *hb);
    lt_shape s = lt_shape_make(1, (int64_t[]){2048});
    lt_tensor *t = NULL;
    assert_int_equal(lt_tensor_from_host(0, hb, LT_F32, &s, &t), LT_ERR_OOM);
    assert_null(t);
    free(hb);
    lt_tensor_release(e); lt_tensor_release(big); lt_tensor_release(x);
    assert_int_equal(lt_live_tensors(0), 0);
}

/* The bf16 mode is decided at the first device value, from the env as it is
 * then (a program may set XLA_USE_BF16 after the engine loaded, as Lightning's
 * XLAPrecision("bf16-true") does), and holds afterwards until lt_shutdown. */
static void test_bf16_mode_decided_at_first_value(void **st)
{
    (void)st;
    reinit(NULL, NULL, NULL);                  /* initialised with bf16 off */
    setenv("XLA_USE_BF16", "1", 1);            /* set after lt_init */
    float d[2] = {1.00390625f, 2.0f};
    lt_tensor *x = host(0, d, 1, (int64_t[]){2});
    assert_int_equal(lt_tensor_storage_dtype(x), LT_BF16);
    assert_int_equal(lt_bf16_mode(), 1);
    unsetenv("XLA_USE_BF16");                  /* fixed once decided */
    lt_tensor *y = host(1, d, 1, (int64_t[]){2});
    assert_int_equal(lt_tensor_storage_dtype(y), LT_BF16);
    assert_int_equal(lt_bf16_mode(), 1);
    lt_tensor_release(x); lt_tensor_release(y);
    reinit(NULL, NULL, NULL);                  /* re-decided after a restart */
    lt_tensor *z = host(0, d, 1, (int64_t[]){2});
    assert_int_equal(lt_tensor_storage_dtype(z), LT_F32);
    assert_int_equal(lt_bf16_mode(), 0);
    lt_tensor_release(z);
}

static void test_bf16_mode(void **st)
{
    (void)st;
    reinit(NULL, "1", NULL);
    assert_int_equal(lt_bf16_mode(), 1);
    float d[3] = {1.00390625f, 3.14159265f, -2.0f};
    lt_tensor *x = host(0, d, 1, (int64_t[]){3}), *y, *half;
    assert_int_equal(lt_tensor_dtype(x), LT_F32);
    assert_int_equal(lt_tensor_storage_dtype(x), LT_BF16);
    assert_int_equal(lt_scalar(0, 0.5, LT_F64, 1, &half), LT_OK);
    y = t2(LT_OP_mul, x, half, NULL);
    assert_int_equal(lt_tensor_dtype(y), LT_F32);
    assert_int_equal(lt_tensor_storage_dtype(y), LT_BF16);
    float out[3];
    assert_int_equal(lt_tensor_to_host(x, out, LT_F32), LT_OK);
    assert_true(out[0] == 1.0f);                          /* tie rounded to even */
    assert_true(out[1] == lt_bf16_to_f32(lt_f32_to_bf16(3.14159265f)));
    assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_OK);
    assert_true(out[0] == 0.5f && out[2] == -1.0f);
    assert_true(fabsf(out[1] - 1.5707963f) < 0.01f);
    /* an int cast stays int */
    lt_tensor *ci;
    lt_attrs at = {.n = 1, .i = {LT_I32}};
    assert_int_equal(lt_trace1(LT_OP_cast, x, &at, &ci), LT_OK);
    assert_int_equal(lt_tensor_storage_dtype(ci), LT_I32);
    lt_tensor_release(ci);
    lt_tensor_release(x); lt_tensor_release(y); lt_tensor_release(half);
    reinit(NULL, NULL, NULL);
}

static void test_graph_limit(void **st)
{
    (void)st;
    reinit(NULL, NULL, "10");
    float d[2] = {1, 2};
    lt_tensor *x = host(0, d, 1, (int64_t[]){2});
    for (int i = 0; i < 25; i++) {
        lt_tensor *y;
        assert_int_equal(lt_trace1(LT_OP_neg, x, NULL, &y), LT_OK);
        lt_tensor_release(x);
        x = y;
    }
    assert_int_equal(lt_counter_value("GraphSizeLimitSync"), 2);
    assert_int_equal(lt_counter_value("SyncCause::size_limit"), 2);
    float out[2];
    assert_int_equal(lt_tensor_to_host(x, out, LT_F32), LT_OK);
    assert_true(out[0] == -1 && out[1] == -2);
    lt_tensor_release(x);
    reinit(NULL, NULL, NULL);
}

static void test_donation(void **st)
{
    (void)st;
    float d[1024];
    for (int i = 0; i < 1024; i++) d[i] = 1;
    lt_tensor *w = host(0, d, 1, (int64_t[]){1024});
    lt_buffer *first = w->value->buf;
    for (int i = 0; i < 3; i++) {
        lt_tensor *half, *u;
        assert_int_equal(lt_scalar(0, 0.5, LT_F64, 1, &half), LT_OK);
        u = t2(LT_OP_mul, w, half, NULL);
        assert_int_equal(lt_tensor_assign(w, u), LT_OK);
        lt_tensor_release(u); lt_tensor_release(half);
        assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
        /* w's buffer is rewritten in place: nothing else held it */
        assert_ptr_equal(w->value->buf, first);
        assert_int_equal(lt_core_bytes_in_use(0), 4096);
    }
    /* held elsewhere (an alias tensor keeps the old value): no donation */
    lt_tensor *keep, *half, *u;
    assert_int_equal(lt_trace1(LT_OP_copy, w, NULL, &keep), LT_OK);
    lt_tensor_assign(keep, w);              /* keep now holds w's data node */
    assert_int_equal(lt_scalar(0, 0.5, LT_F64, 1, &half), LT_OK);
    u = t2(LT_OP_mul, w, half, NULL);
    lt_tensor_assign(w, u);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_ptr_not_equal(w->value->buf, first);
    float a[1024], b[1024];
    assert_int_equal(lt_tensor_to_host(keep, a, LT_F32), LT_OK);
    assert_int_equal(lt_tensor_to_host(w, b, LT_F32), LT_OK);
    assert_true(a[5] == 0.125f && b[5] == 0.0625f);
    lt_tensor_release(u); lt_tensor_release(half); lt_tensor_release(keep); lt_tensor_release(w);
}

static void test_trace_errors(void **st)
{
    (void)st;
    float d[6] = {0};
    lt_tensor *a = host(0, d, 2, (int64_t[]){2, 3}), *b = host(1, d, 1, (int64_t[]){6});
    lt_tensor *c = host(0, d, 1, (int64_t[]){4}), *o = (lt_tensor *)1;
    assert_int_equal(lt_trace2(LT_OP_add, a, b, NULL, &o), LT_ERR_DEVICE);
    assert_null(o);
    if (!strstr(lt_last_error(), "core 0") || !strstr(lt_last_error(), "core 1"))
        fail_msg("%s", lt_last_error());
    assert_int_equal(lt_trace2(LT_OP_add, a, c, NULL, &o), LT_ERR_SHAPE);
    assert_string_equal(lt_last_error(),
                        "add: shapes [2, 3] (f32) and [4] (f32) are not broadcastable");
    assert_int_equal(lt_trace2(LT_OP_add, a, NULL, NULL, &o), LT_ERR_ARG);
    assert_int_equal(lt_trace(LT_OP_cat, NULL, 0, NULL, &o), LT_ERR_ARG);
    lt_tensor *three[3] = {a, a, a};
    assert_int_equal(lt_trace(LT_OP_nll_loss, three, 3, NULL, &o) != LT_OK, 1);
    assert_int_equal(lt_trace(LT_OP_nll_loss_backward, three, 2, NULL, &o), LT_ERR_ARG);
    assert_int_equal(lt_trace(LT_OP_data, three, 0, NULL, &o), LT_ERR_ARG);
    assert_int_equal(lt_scalar(0, 1.5, LT_F32, 1, &o), LT_ERR_DTYPE);
    assert_int_equal(lt_scalar(9, 1.5, LT_F64, 1, &o), LT_ERR_DEVICE);
    assert_int_equal(lt_live_tensors(0), 2);
    lt_tensor_release(a); lt_tensor_release(b); lt_tensor_release(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_compile_once_then_recompile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mark_step_all_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_value_read_syncs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16_mode_decided_at_first_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graph_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_donation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trace_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
