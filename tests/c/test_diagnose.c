/* tests/c/test_diagnose.c — slow-step diagnosis: recompilation notes (shape
 * change with the input named, structure change, size_limit cause), value
 * read / recompile / fallback / input-wait warnings (LAZYTPU_DEBUG), and the
 * fallback section. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"

static void reinit(const char *limit)
{
    lt_shutdown();
    if (limit) setenv("LAZYTPU_GRAPH_LIMIT", limit, 1); else unsetenv("LAZYTPU_GRAPH_LIMIT");
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    unsetenv("LAZYTPU_DEBUG");
    unsetenv("PT_XLA_DEBUG");
    assert_int_equal(lt_init(), LT_OK);
    lt_metrics_clear_all();
    lt_debug_set(2);   /* collect warnings quietly */
    free(lt_diagnose_take_warnings());
}

static int setup(void **st) { (void)st; reinit(NULL); return 0; }
static int teardown(void **st)
{
    (void)st;
    lt_set_caller(NULL);
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    lt_debug_set(0);
    lt_shutdown();
    return 0;
}

static lt_tensor *host_fill(int64_t rows, int64_t cols, float v)
{
    int64_t n = rows * cols;
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = v * (float)((i % 5) + 1);
    lt_shape s = lt_shape_make(2, (int64_t[]){rows, cols});
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, d, LT_F32, &s, &t), LT_OK);
    free(d);
    return t;
}

/* One step on batch `b`: loss = sum(relu(x @ w)); params in post-order are
 * x (input 0) then w (input 1). With `read`, loss is read inside the step
 * (a value read) before the step boundary. */
static void step(lt_tensor *w, int64_t b, int read)
{
    lt_tensor *x = host_fill(b, 784, 0.01f), *h, *r, *loss;
    assert_int_equal(lt_trace2(LT_OP_mm, x, w, NULL, &h), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_relu, h, NULL, &r), LT_OK);
    lt_attrs all = {.n = 2, .i = {3, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, r, &all, &loss), LT_OK);
    lt_tensor_release(x);
    lt_tensor_release(h);
    lt_tensor_release(r);
    if (read) {
        float v;
        lt_set_caller("train.py:50 in train");
        assert_int_equal(lt_tensor_to_host(loss, &v, LT_F32), LT_OK);
        lt_set_caller("train.py:42 in step");
    }
    assert_int_equal(lt_sync(&loss, 1, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_tensor_release(loss);
}

/* .item() of a value the step already computed: no sync, but still a host
 * read, counted per line with reads per step (point 5 of the torch_xla issue) */
static void test_reads_of_computed_values_reported(void **st)
{
    (void)st;
    lt_tensor *w = host_fill(784, 10, 0.001f);
    for (int i = 0; i < 5; i++) {
        lt_tensor *x = host_fill(8, 784, 0.01f), *h, *loss;
        assert_int_equal(lt_trace2(LT_OP_mm, x, w, NULL, &h), LT_OK);
        lt_attrs all = {.n = 2, .i = {3, 0}};
        assert_int_equal(lt_trace1(LT_OP_sum, h, &all, &loss), LT_OK);
        lt_set_caller("train.py:42 in step");
        assert_int_equal(lt_sync(&loss, 1, LT_SYNC_MARK_STEP, 1), LT_OK);
        float v;
        lt_set_caller("train.py:77 in log");
        assert_int_equal(lt_tensor_to_host(loss, &v, LT_F32), LT_OK);
        lt_set_caller(NULL);
        lt_tensor_release(x);
        lt_tensor_release(h);
        lt_tensor_release(loss);
    }
    assert_int_equal(lt_counter_value("SyncCause::value_read"), 0);
    assert_int_equal(lt_counter_value("HostReads"), 5);
    char *rep = lt_metrics_report();
    assert_non_null(strstr(rep, "== host reads ==\ntrain.py:77 in log: 5 reads ("));
    assert_non_null(strstr(rep, "0 ran the pending graph"));
    assert_non_null(strstr(rep, "hint: a read every step"));
    free(rep);
    char *hr = lt_host_read_report();
    assert_non_null(strstr(hr, "per step over"));
    free(hr);
    lt_tensor_release(w);
}

static void test_last_batch_recompile_named(void **st)
{
    (void)st;
    lt_tensor *w = host_fill(784, 10, 0.001f);
    lt_set_caller("train.py:42 in step");
    for (int i = 0; i < 5; i++) step(w, 64, 0);
    step(w, 32, 0);                       /* the last, smaller batch */
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("Recompilation::mark_step"), 1);
    char *rep = lt_metrics_report();
    char want[256];
    /* the note names the graph, input 0 = x, its dtype, both shapes, cause, frame */
    snprintf(want, sizeof want, " input 0 (f32) [64, 784] -> [32, 784]; cause mark_step; "
             "at train.py:42 in step\n");
    const char *p = strstr(rep, "== recompilation ==\nrecompiled: graph ");
    if (!p || !strstr(p, want)) fail_msg("report lacks the recompilation note:\n%s", rep);
    free(rep);
    /* one compile in a window of 4 steps is not a warning */
    char *wn = lt_diagnose_take_warnings();
    assert_string_equal(wn, "");
    free(wn);
    lt_tensor_release(w);
}

static void test_changing_shapes_warn(void **st)
{
    (void)st;
    lt_tensor *w = host_fill(784, 10, 0.001f);
    lt_set_caller("train.py:42 in step");
    int64_t batches[6] = {64, 64, 32, 16, 8, 64};   /* 3 compiles in steps 3..6 */
    for (int i = 0; i < 5; i++) {
        step(w, batches[i], 0);
        char *wn = lt_diagnose_take_warnings();
        if (wn[0]) fail_msg("warning before the window is full (step %d): %s", i + 1, wn);
        free(wn);
    }
    step(w, batches[5], 0);
    char *wn = lt_diagnose_take_warnings();
    const char *want =
        "lazytpu: warning: 3 compiles in the last 4 steps: shapes change between steps "
        "(input 0 (f32) [16, 784] -> [8, 784]); pad or bucket shapes, or use "
        "drop_last=True in the DataLoader. See docs/troubleshooting.md#recompilation\n";
    assert_string_equal(wn, want);
    free(wn);
    assert_int_equal(lt_counter_value("Recompilation::mark_step"), 3);
    lt_tensor_release(w);
}

static void test_value_read_in_loop_warns(void **st)
{
    (void)st;
    lt_tensor *w = host_fill(784, 10, 0.001f);
    lt_set_caller("train.py:42 in step");
    for (int i = 0; i < 6; i++) step(w, 16, 1);
    assert_int_equal(lt_counter_value("SyncCause::value_read"), 6);
    char *wn = lt_diagnose_take_warnings();
    const char *want =
        "lazytpu: warning: 4 host reads in the last 4 steps (.item()/.cpu()/print of a "
        "device tensor, last at train.py:50 in train): each one makes the host wait for "
        "the device (and stops tracing to run the graph if the value is not computed "
        "yet); log with lazytpu.add_step_closure(fn) or read values every N steps. "
        "See docs/troubleshooting.md#value-reads\n";
    assert_string_equal(wn, want);
    free(wn);
    /* the warning is also kept in the report */
    char *rep = lt_metrics_report();
    assert_non_null(strstr(rep, "== warnings ==\nlazytpu: warning: 4 host reads"));
    free(rep);
    lt_tensor_release(w);
}

static void test_clean_loop_no_warning(void **st)
{
    (void)st;
    lt_tensor *w = host_fill(784, 10, 0.001f);
    for (int i = 0; i < 10; i++) step(w, 16, 0);
    char *wn = lt_diagnose_take_warnings();
    assert_string_equal(wn, "");
    free(wn);
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);
    lt_tensor_release(w);
}

static void test_debug_off_no_warning(void **st)
{
    (void)st;
    lt_debug_set(0);
    assert_false(lt_debug_enabled());
    lt_tensor *w = host_fill(784, 10, 0.001f);
    for (int i = 0; i < 6; i++) step(w, 16, 1);
    char *wn = lt_diagnose_take_warnings();
    assert_string_equal(wn, "");
    free(wn);
    lt_tensor_release(w);
}

static void test_fallback_section_and_warning(void **st)
{
    (void)st;
    const char *frames[4] = {"train.py:57 in step", "train.py:60 in step",
                             "util.py:3 in f", "util.py:9 in g"};
    for (int i = 0; i < 12; i++)   /* 12 calls, 3.2 ms in all */
        lt_fallback_record("aten::nonzero", i < 4 ? 400000 : 200000, frames[i % 4]);
    lt_fallback_record("aten::add.Tensor", 5000, "m.py:1 in h");
    lt_fallback_record("aten::weird_op", 0, NULL);
    char *fb = lt_fallback_report();
    const char *want =
        "== fallback ==\n"
        "aten::nonzero: 12 calls, 003ms200.000us total, first at train.py:57 in step; "
        "also at train.py:60 in step, util.py:3 in f\n"
        "  hint: output size depends on the data; use torch.where(mask, x, 0) or a mask "
        "multiply\n"
        "aten::add.Tensor: 1 call, 005.000us total, first at m.py:1 in h\n"
        "  hint: lazytpu traces add natively: this overload or dtype is not wired to it; "
        "please report it\n"
        "aten::weird_op: 1 call, 000.000us total\n";
    assert_string_equal(fb, want);
    free(fb);
    /* after the warm-up, the next step boundary names the new ops once */
    lt_tensor *w = host_fill(784, 10, 0.001f);
    for (int i = 0; i < 3; i++) step(w, 16, 0);
    char *wn = lt_diagnose_take_warnings();
    assert_non_null(strstr(wn, "lazytpu: warning: new CPU fallback ops: aten::nonzero (at "
                               "train.py:57 in step; output size depends on the data"));
    assert_non_null(strstr(wn, "aten::weird_op"));
    assert_non_null(strstr(wn, "See docs/troubleshooting.md#cpu-fallbacks\n"));
    free(wn);
    step(w, 16, 0);
    wn = lt_diagnose_take_warnings();
    assert_string_equal(wn, "");   /* not repeated */
    free(wn);
    lt_fallback_record("aten::unique_consecutive", 10, "x.py:1 in k");
    step(w, 16, 0);
    wn = lt_diagnose_take_warnings();
    assert_non_null(strstr(wn, "new CPU fallback ops: aten::unique_consecutive (at x.py:1 in k"));
    assert_null(strstr(wn, "aten::nonzero"));
    free(wn);
    lt_tensor_release(w);
}

static void test_input_wait_warns(void **st)
{
    (void)st;
    lt_metric *m = lt_metric_get("LoaderWaitTime", LT_UNIT_NS);
    for (int i = 0; i < 6; i++) {
        lt_metric_add(m, 5e6);   /* 5 ms per step: longer than the step itself */
        assert_int_equal(lt_sync_core(0, LT_SYNC_LOADER_STEP, 0), LT_OK);
    }
    char *wn = lt_diagnose_take_warnings();
    assert_non_null(strstr(wn, "lazytpu: warning: steps waited 020ms000.000us for input in "
                               "the last 4 steps ("));
    assert_non_null(strstr(wn, "See docs/troubleshooting.md#input-pipeline\n"));
    free(wn);
}

/* A chain that grows past LAZYTPU_GRAPH_LIMIT without a step boundary is cut
 * (cause size_limit); the same chain on another shape recompiles with that
 * cause named. */
static void test_size_limit_cause(void **st)
{
    (void)st;
    reinit("50");
    lt_set_caller("model.py:7 in forward");
    int64_t rows[2] = {4, 8};
    for (int r = 0; r < 2; r++) {
        lt_tensor *x = host_fill(rows[r], 1, 1.0f);
        lt_tensor *y = lt_tensor_retain(x);
        for (int i = 0; i < 60; i++) {
            lt_tensor *z;
            assert_int_equal(lt_trace2(LT_OP_add, y, x, NULL, &z), LT_OK);
            lt_tensor_release(y);
            y = z;
        }
        assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
        float v[8];
        assert_int_equal(lt_tensor_to_host(y, v, LT_F32), LT_OK);
        for (int i = 0; i < rows[r]; i++)
            assert_true(v[i] > 60.999f * (float)((i % 5) + 1) && v[i] < 61.001f * (float)((i % 5) + 1));
        lt_tensor_release(y);
        lt_tensor_release(x);
    }
    assert_int_equal(lt_counter_value("SyncCause::size_limit"), 2);
    assert_int_equal(lt_counter_value("Recompilation::size_limit"), 1);
    char *rep = lt_metrics_report();
    if (!strstr(rep, " input 0 (f32) [4, 1] -> [8, 1]; cause size_limit; at model.py:7 in forward\n"))
        fail_msg("no size_limit recompilation note:\n%s", rep);
    free(rep);
}

/* Same site (cause, frame), different graph: the note names the first
 * differing op. */
static void test_structure_change_named(void **st)
{
    (void)st;
    lt_set_caller("train.py:10 in loop");
    lt_tensor *x = host_fill(2, 3, 1.0f), *y = host_fill(2, 3, 2.0f), *a, *b;
    assert_int_equal(lt_trace2(LT_OP_add, x, y, NULL, &a), LT_OK);
    assert_int_equal(lt_sync(&a, 1, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_mul, x, y, NULL, &b), LT_OK);
    assert_int_equal(lt_sync(&b, 1, LT_SYNC_MARK_STEP, 0), LT_OK);
    char *rep = lt_metrics_report();
    if (!strstr(rep, " structure changed: first differing op at position 2: add vs mul; "
                     "cause mark_step; at train.py:10 in loop\n"))
        fail_msg("no structure-change note:\n%s", rep);
    free(rep);
    assert_int_equal(lt_counter_value("Recompilation::mark_step"), 1);
    lt_tensor_release(a); lt_tensor_release(b);
    lt_tensor_release(x); lt_tensor_release(y);
}

/* Same structure and input shapes, other attributes: the op is named with
 * its new attributes. */
static void test_attribute_change_named(void **st)
{
    (void)st;
    lt_set_caller("eval.py:3 in stats");
    lt_tensor *x = host_fill(2, 3, 1.0f), *a, *b;
    lt_attrs d0 = {.n = 2, .i = {1, 0}}, d1 = {.n = 2, .i = {2, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, x, &d0, &a), LT_OK);
    assert_int_equal(lt_sync(&a, 1, LT_SYNC_VALUE_READ, 1), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_sum, x, &d1, &b), LT_OK);
    assert_int_equal(lt_sync(&b, 1, LT_SYNC_VALUE_READ, 1), LT_OK);
    char *rep = lt_metrics_report();
    if (!strstr(rep, " structure changed: first differing op at position 1: sum vs sum "
                     "(attributes now [2, 0]); cause value_read; at eval.py:3 in stats\n"))
        fail_msg("no attribute-change note:\n%s", rep);
    free(rep);
    assert_int_equal(lt_counter_value("Recompilation::value_read"), 1);
    lt_tensor_release(a); lt_tensor_release(b); lt_tensor_release(x);
}

/* A graph compiled again after eviction from a 1-entry cache says so. */
static void test_cache_eviction_named(void **st)
{
    (void)st;
    lt_shutdown();
    setenv("LAZYTPU_COMPILE_CACHE_SIZE", "1", 1);
    assert_int_equal(lt_init(), LT_OK);
    unsetenv("LAZYTPU_COMPILE_CACHE_SIZE");
    lt_metrics_clear_all();
    lt_tensor *x = host_fill(2, 3, 1.0f);
    lt_op ops[3] = {LT_OP_exp, LT_OP_neg, LT_OP_exp};
    const char *frames[3] = {"a.py:1 in f", "b.py:2 in g", "a.py:1 in f"};
    for (int i = 0; i < 3; i++) {
        lt_tensor *y;
        lt_set_caller(frames[i]);
        assert_int_equal(lt_trace1(ops[i], x, NULL, &y), LT_OK);
        assert_int_equal(lt_sync(&y, 1, LT_SYNC_MARK_STEP, 1), LT_OK);
        lt_tensor_release(y);
    }
    assert_int_equal(lt_counter_value("UncachedCompile"), 3);
    char *rep = lt_metrics_report();
    if (!strstr(rep, " evicted from the compile cache (LAZYTPU_COMPILE_CACHE_SIZE); "
                     "cause mark_step; at a.py:1 in f\n"))
        fail_msg("no eviction note:\n%s", rep);
    /* b.py's graph is new at its own site: not a recompilation */
    assert_null(strstr(rep, "at b.py:2 in g"));
    free(rep);
    lt_tensor_release(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_last_batch_recompile_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changing_shapes_warn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_value_read_in_loop_warns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_of_computed_values_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clean_loop_no_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_debug_off_no_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback_section_and_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_input_wait_warns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_limit_cause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_structure_change_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attribute_change_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_eviction_named, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
