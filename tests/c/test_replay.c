/* tests/c/test_replay.c — recorded graphs (lt_replay_*): record once, run on
 * new inputs without tracing (data inputs: a queued program; pending
 * inputs: spliced into the step), constants the graph made, shape checks,
 * graphs that are not replayable, no leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "device.h"

static int setup(void **st)
{
    (void)st;
    lt_shutdown();
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    /* graphs on data inputs queue a program of their own (the path under
     * test), also the small ones spliced by default */
    setenv("LAZYTPU_REPLAY_QUEUE", "1", 1);
    unsetenv("LAZYTPU_USE_BF16");
    assert_int_equal(lt_init(), LT_OK);
    lt_metrics_clear_all();
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    assert_int_equal(lt_core_bytes_in_use(0), 0);
    lt_shutdown();
    return 0;
}

static lt_tensor *host(const float *d, int64_t n)
{
    lt_shape s = lt_shape_make(1, &n);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, d, LT_F32, &s, &t), LT_OK);
    return t;
}

static lt_tensor *op2(lt_op op, lt_tensor *a, lt_tensor *b)
{
    lt_tensor *o;
    if (lt_trace2(op, a, b, NULL, &o) != LT_OK) fail_msg("%s", lt_last_error());
    return o;
}

/* out = (a + b) * 2.5 - a, and a second output: exp(b) */
static void trace_graph(lt_tensor *a, lt_tensor *b, lt_tensor **o1, lt_tensor **o2)
{
    lt_tensor *k, *s, *m;
    assert_int_equal(lt_scalar(0, 2.5, LT_F64, 1, &k), LT_OK);
    s = op2(LT_OP_add, a, b);
    m = op2(LT_OP_mul, s, k);
    *o1 = op2(LT_OP_sub, m, a);
    assert_int_equal(lt_trace1(LT_OP_exp, b, NULL, o2), LT_OK);
    lt_tensor_release(k);
    lt_tensor_release(s);
    lt_tensor_release(m);
}

static void check(lt_tensor *t, const float *a, const float *b, int second)
{
    float out[4];
    assert_int_equal(lt_tensor_to_host(t, out, LT_F32), LT_OK);
    for (int i = 0; i < 4; i++) {
        float want = second ? expf(b[i]) : (a[i] + b[i]) * 2.5f - a[i];
        assert_true(fabsf(out[i] - want) < 1e-5f * (1 + fabsf(want)));
    }
}

static void test_record_and_run(void **st)
{
    (void)st;
    float a0[4] = {1, 2, 3, 4}, b0[4] = {0.5f, -1, 2, 0};
    lt_tensor *a = host(a0, 4), *b = host(b0, 4), *o[2];
    lt_tensor *in[2] = {a, b};
    assert_int_equal(lt_replay_sync_inputs(in, 2), LT_OK);
    trace_graph(a, b, &o[0], &o[1]);
    lt_replay *r;
    assert_int_equal(lt_replay_record(in, 2, o, 2, &r), LT_OK);
    assert_int_equal(lt_replay_n_outputs(r), 2);
    assert_true(lt_replay_n_nodes(r) >= 6);
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);
    check(o[0], a0, b0, 0);            /* the traced outputs still hold */
    check(o[1], a0, b0, 1);
    lt_tensor_release(o[0]);
    lt_tensor_release(o[1]);

    int64_t traced = lt_counter_value("lazytpu::add");
    int64_t unc = lt_counter_value("UncachedCompile");   /* + the reads above */
    for (int rep = 0; rep < 3; rep++) {
        float a1[4], b1[4];
        for (int i = 0; i < 4; i++) {
            a1[i] = (float)(rep * 4 + i);
            b1[i] = 0.25f * (float)(i - rep);
        }
        lt_tensor *x = host(a1, 4), *y = host(b1, 4), *ins[2] = {x, y}, *out[2];
        assert_int_equal(lt_replay_run(r, ins, 2, out), LT_OK);
        assert_int_equal(lt_tensor_is_pending(out[0]), 0);   /* queued program */
        check(out[0], a1, b1, 0);
        check(out[1], a1, b1, 1);
        lt_tensor_release(out[0]);
        lt_tensor_release(out[1]);
        lt_tensor_release(x);
        lt_tensor_release(y);
    }
    assert_int_equal(lt_counter_value("lazytpu::add"), traced);
    assert_int_equal(lt_counter_value("UncachedCompile"), unc);
    assert_int_equal(lt_counter_value("CompiledGraphRun"), 3);
    lt_replay_release(r);
    lt_tensor_release(a);
    lt_tensor_release(b);
}

static void test_pending_input_splices(void **st)
{
    (void)st;
    float a0[4] = {1, 2, 3, 4}, b0[4] = {1, 1, 1, 1};
    lt_tensor *a = host(a0, 4), *b = host(b0, 4), *o[2], *in[2] = {a, b};
    trace_graph(a, b, &o[0], &o[1]);
    lt_replay *r;
    assert_int_equal(lt_replay_record(in, 2, o, 2, &r), LT_OK);
    lt_tensor_release(o[0]);
    lt_tensor_release(o[1]);
    /* x pending (x = a + a): the run splices, its outputs are pending and
     * the step's sync runs everything as one program */
    lt_tensor *x = op2(LT_OP_add, a, a), *ins[2] = {x, b}, *out[2];
    assert_int_equal(lt_replay_run(r, ins, 2, out), LT_OK);
    assert_int_equal(lt_tensor_is_pending(out[0]), 1);
    assert_int_equal(lt_counter_value("CompiledGraphSplice"), 1);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    float x0[4] = {2, 4, 6, 8};
    check(out[0], x0, b0, 0);
    check(out[1], x0, b0, 1);
    /* the same step again: a cache hit */
    int64_t unc = lt_counter_value("UncachedCompile");
    lt_tensor *x2 = op2(LT_OP_add, a, a), *ins2[2] = {x2, b}, *out2[2];
    assert_int_equal(lt_replay_run(r, ins2, 2, out2), LT_OK);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_counter_value("UncachedCompile"), unc);
    check(out2[0], x0, b0, 0);
    for (int i = 0; i < 2; i++) {
        lt_tensor_release(out[i]);
        lt_tensor_release(out2[i]);
    }
    lt_tensor_release(x);
    lt_tensor_release(x2);
    lt_replay_release(r);
    lt_tensor_release(a);
    lt_tensor_release(b);
}

static void test_constants_and_checks(void **st)
{
    (void)st;
    float a0[4] = {1, 2, 3, 4}, c0[4] = {10, 20, 30, 40};
    lt_tensor *a = host(a0, 4), *c = host(c0, 4);   /* c: made by the graph */
    lt_tensor *o = op2(LT_OP_add, a, c), *in[1] = {a};
    lt_replay *r;
    assert_int_equal(lt_replay_record(in, 1, &o, 1, &r), LT_OK);
    lt_tensor_release(o);
    lt_tensor_release(c);                           /* the recording keeps it */
    float a1[4] = {5, 6, 7, 8}, out[4];
    lt_tensor *x = host(a1, 4), *ins[1] = {x}, *res;
    assert_int_equal(lt_replay_run(r, ins, 1, &res), LT_OK);
    assert_int_equal(lt_tensor_to_host(res, out, LT_F32), LT_OK);
    for (int i = 0; i < 4; i++) assert_true(out[i] == a1[i] + c0[i]);
    lt_tensor_release(res);
    /* wrong shape, wrong count */
    float big[6] = {0};
    lt_tensor *y = host(big, 6), *bad[1] = {y};
    assert_int_equal(lt_replay_run(r, bad, 1, &res), LT_ERR_SHAPE);
    assert_non_null(strstr(lt_last_error(), "recorded for"));
    assert_int_equal(lt_replay_run(r, bad, 0, &res), LT_ERR_ARG);
    lt_tensor_release(y);
    lt_tensor_release(x);
    lt_replay_release(r);
    lt_tensor_release(a);
}

static void test_not_replayable(void **st)
{
    (void)st;
    float a0[4] = {1, 2, 3, 4};
    lt_tensor *a = host(a0, 4), *p = op2(LT_OP_add, a, a);
    lt_tensor *o = op2(LT_OP_mul, p, p), *in[1] = {p};
    lt_replay *r = NULL;
    assert_int_equal(lt_replay_record(in, 1, &o, 1, &r), LT_ERR_ARG);   /* p pending */
    assert_null(r);
    assert_non_null(strstr(lt_last_error(), "not replayable"));
    lt_tensor_release(o);
    lt_tensor_release(p);
    lt_tensor_release(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_record_and_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_input_splices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constants_and_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_replayable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
