/* tests/c/test_exec_guard.c — the execution guard (lt_set_no_execution:
 * a value read of a pending value, a step boundary, the graph-size cut are
 * refused and change nothing; reads of data and empty syncs are allowed;
 * lifting it lets the same graph run) and the log of synced graph keys
 * (lt_synced_graphs: numbering, same graph same key, a new shape a new key). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"

static void reinit(const char *limit)
{
    lt_shutdown();
    if (limit) setenv("LAZYTPU_GRAPH_LIMIT", limit, 1); else unsetenv("LAZYTPU_GRAPH_LIMIT");
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    assert_int_equal(lt_init(), LT_OK);
    lt_metrics_clear_all();
}

static int setup(void **st) { (void)st; reinit(NULL); return 0; }
static int teardown(void **st)
{
    (void)st;
    lt_set_no_execution(NULL);
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    lt_shutdown();
    return 0;
}

static lt_tensor *host1(const float *d, int64_t n)
{
    lt_shape s = lt_shape_make(1, (int64_t[]){n});
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, d, LT_F32, &s, &t), LT_OK);
    return t;
}

static lt_tensor *neg(lt_tensor *x)
{
    lt_tensor *y;
    assert_int_equal(lt_trace1(LT_OP_neg, x, NULL, &y), LT_OK);
    return y;
}

static void test_guard_refuses_and_changes_nothing(void **st)
{
    (void)st;
    float d[3] = {1, 2, 3}, out[3];
    lt_tensor *x = host1(d, 3), *y = neg(x);
    lt_set_no_execution("step_fn(full_graph=True)");
    char *owner = lt_no_execution();
    assert_string_equal(owner, "step_fn(full_graph=True)");
    free(owner);

    /* reading data is no execution */
    assert_int_equal(lt_tensor_to_host(x, out, LT_F32), LT_OK);
    assert_true(out[2] == 3);

    /* reading the pending value would run the graph: refused, named */
    lt_set_caller("train.py:7 in step_fn");
    assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_ERR_STATE);
    const char *m = lt_last_error();
    if (!strstr(m, "step_fn(full_graph=True): a value read") ||
        !strstr(m, "(at train.py:7 in step_fn)") || !strstr(m, "nothing may execute"))
        fail_msg("message: %s", m);
    lt_set_caller(NULL);
    assert_true(lt_tensor_is_pending(y));
    assert_int_equal(lt_counter_value("UncachedCompile"), 0);

    /* a step boundary too */
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_ERR_STATE);
    assert_non_null(strstr(lt_last_error(), "a step boundary"));
    assert_true(lt_tensor_is_pending(y));
    assert_int_equal(lt_execution_check("aten::foo would run"), LT_ERR_STATE);
    assert_non_null(strstr(lt_last_error(), "step_fn(full_graph=True): aten::foo would run"));

    /* lifted: the same value runs, once */
    lt_set_no_execution(NULL);
    assert_null(lt_no_execution());
    assert_int_equal(lt_execution_check("anything"), LT_OK);
    assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_OK);
    assert_true(out[0] == -1 && out[1] == -2 && out[2] == -3);
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);

    /* nothing pending: a step boundary under the guard runs nothing, allowed */
    lt_set_no_execution("g");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    lt_set_no_execution(NULL);
    lt_tensor_release(y);
    lt_tensor_release(x);
}

static void test_guard_refuses_graph_cut(void **st)
{
    (void)st;
    reinit("10");
    float d[2] = {1, 2}, out[2];
    lt_tensor *x = host1(d, 2);
    lt_set_no_execution("cut(full_graph=True)");
    lt_status last = LT_OK;
    for (int i = 0; i < 12 && last == LT_OK; i++) {
        lt_tensor *y;
        last = lt_trace1(LT_OP_neg, x, NULL, &y);
        if (last != LT_OK) break;
        lt_tensor_release(x);
        x = y;
    }
    assert_int_equal(last, LT_ERR_STATE);
    assert_non_null(strstr(lt_last_error(), "LAZYTPU_GRAPH_LIMIT"));
    assert_int_equal(lt_counter_value("UncachedCompile"), 0);
    lt_set_no_execution(NULL);
    /* x (10 negations) is still pending and correct */
    assert_int_equal(lt_tensor_to_host(x, out, LT_F32), LT_OK);
    assert_true(out[0] == 1 && out[1] == 2);
    lt_tensor_release(x);
    reinit(NULL);
}

static void test_synced_graph_log(void **st)
{
    (void)st;
    uint64_t keys[8];
    int n = -1;
    uint64_t s0 = lt_synced_graphs(UINT64_MAX, keys, 8, &n);
    assert_int_equal(n, 0);
    float d[4] = {1, 2, 3, 4};
    uint64_t k[3];
    for (int i = 0; i < 3; i++) {        /* [4], [4], then [3]: two keys */
        lt_tensor *x = host1(d, i < 2 ? 4 : 3), *y = neg(x);
        assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
        assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);   /* nothing: no entry */
        uint64_t s = lt_synced_graphs(s0 + (uint64_t)i, keys, 8, &n);
        assert_int_equal(s, s0 + (uint64_t)i + 1);
        assert_int_equal(n, 1);
        k[i] = keys[0];
        lt_tensor_release(y);
        lt_tensor_release(x);
    }
    assert_true(k[0] == k[1]);
    assert_true(k[2] != k[0]);
    /* all three since s0, oldest first; cap keeps the latest */
    assert_int_equal(lt_synced_graphs(s0, keys, 8, &n), s0 + 3);
    assert_int_equal(n, 3);
    assert_true(keys[0] == k[0] && keys[2] == k[2]);
    assert_int_equal(lt_synced_graphs(s0, keys, 1, &n), s0 + 3);
    assert_int_equal(n, 1);
    assert_true(keys[0] == k[2]);
    assert_int_equal(lt_synced_graphs(s0, NULL, 0, NULL), s0 + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_guard_refuses_and_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_refuses_graph_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_synced_graph_log, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
