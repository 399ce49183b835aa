/* tests/c/test_submit.c — one submit path (lazy/submit.c) for lazy syncs
 * and compiled replays: a replay's record compiles like a sync (CompileTime,
 * UncachedCompile, the "compile" trace event naming its graph, the
 * recompilation diagnosis with cause and caller frame), its runs execute
 * like a sync's program ("execute" events of the same graph). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lazytpu.h"
#include "device.h"     /* lt_core_bytes_in_use */
#include "diagnose.h"   /* lt_caller_frame */

static char trace_path[64];

static int setup(void **st)
{
    (void)st;
    lt_shutdown();
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    /* graphs on data inputs queue a program of their own (the path under
     * test), also the small ones spliced by default */
    setenv("LAZYTPU_REPLAY_QUEUE", "1", 1);
    unsetenv("LAZYTPU_USE_BF16");
    unsetenv("LAZYTPU_TRACE");
    unsetenv("LAZYTPU_ORDINAL");
    unsetenv("LAZYTPU_WORLD_SIZE");
    assert_int_equal(lt_init(), LT_OK);
    lt_metrics_clear_all();
    return 0;
}

static int setup_traced(void **st)
{
    (void)st;
    lt_shutdown();
    snprintf(trace_path, sizeof trace_path, "/tmp/lt_submit_trace_%d.json", (int)getpid());
    unlink(trace_path);
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    /* graphs on data inputs queue a program of their own (the path under
     * test), also the small ones spliced by default */
    setenv("LAZYTPU_REPLAY_QUEUE", "1", 1);
    unsetenv("LAZYTPU_USE_BF16");
    unsetenv("LAZYTPU_ORDINAL");
    unsetenv("LAZYTPU_WORLD_SIZE");
    setenv("LAZYTPU_TRACE", trace_path, 1);
    assert_int_equal(lt_init(), LT_OK);
    assert_true(lt_trace_enabled());
    lt_metrics_clear_all();
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    assert_int_equal(lt_core_bytes_in_use(0), 0);
    lt_set_caller(NULL);
    lt_set_caller_hook(NULL);
    lt_shutdown();
    unsetenv("LAZYTPU_TRACE");
    if (trace_path[0]) unlink(trace_path);
    trace_path[0] = 0;
    return 0;
}

static lt_tensor *host(int64_t n, float base)
{
    float d[16];
    for (int64_t i = 0; i < n; i++) d[i] = base + (float)i;
    lt_shape s = lt_shape_make(1, &n);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, d, LT_F32, &s, &t), LT_OK);
    return t;
}

/* exp(a) * b + a: the graph both paths compile */
static lt_tensor *trace_graph(lt_tensor *a, lt_tensor *b)
{
    lt_tensor *e, *m, *o;
    assert_int_equal(lt_trace1(LT_OP_exp, a, NULL, &e), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_mul, e, b, NULL, &m), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_add, m, a, NULL, &o), LT_OK);
    lt_tensor_release(e);
    lt_tensor_release(m);
    return o;
}

/* Records exp(a) * b + a over n-element inputs; returns the recording. */
static lt_replay *record(int64_t n)
{
    lt_tensor *a = host(n, 0.5f), *b = host(n, -1.0f);
    lt_tensor *o = trace_graph(a, b);
    lt_tensor *in[2] = {a, b};
    lt_replay *r = NULL;
    if (lt_replay_record(in, 2, &o, 1, &r) != LT_OK) fail_msg("%s", lt_last_error());
    lt_tensor_release(o);
    lt_tensor_release(a);
    lt_tensor_release(b);
    return r;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* Number of trace events (JSON objects) holding both a and b. */
static int count_events(const char *doc, const char *a, const char *b)
{
    int n = 0;
    for (const char *p = doc; (p = strstr(p, a)); p++) {
        const char *start = p, *end = strchr(p, '}');
        while (start > doc && *start != '{') start--;
        if (!end) break;
        char *obj = strndup(start, (size_t)(end - start));
        if (!b || strstr(obj, b)) n++;
        free(obj);
    }
    return n;
}

/* A recorded graph's compile is a trace event of its own, naming the graph
 * and its size, on the host row, exactly as a sync's compile is; its runs
 * are execute events of the same graph. */
static void test_replay_compile_traced_like_sync(void **st)
{
    (void)st;
    /* a sync compiles the 8-element graph */
    lt_tensor *a = host(8, 0.5f), *b = host(8, -1.0f);
    lt_tensor *o = trace_graph(a, b);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    lt_tensor_release(o);
    lt_tensor_release(a);
    lt_tensor_release(b);
    assert_int_equal(lt_counter_value("UncachedCompile"), 1);

    /* a recording of the 4-element graph compiles another program */
    lt_replay *r = record(4);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    char gkey[64];
    snprintf(gkey, sizeof gkey, "\"graph\":\"%016llx\"", (unsigned long long)lt_replay_key(r));
    for (int i = 0; i < 3; i++) {
        lt_tensor *x = host(4, (float)i), *y = host(4, 1.0f), *out;
        lt_tensor *in[2] = {x, y};
        assert_int_equal(lt_replay_run(r, in, 2, &out), LT_OK);
        lt_tensor_release(out);
        lt_tensor_release(x);
        lt_tensor_release(y);
    }
    assert_int_equal(lt_wait(0), LT_OK);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("CompiledGraphRun"), 3);
    lt_trace_flush();

    char *s = slurp(trace_path);
    assert_non_null(s);
    /* two compiles on the host row: the sync's and the recording's */
    assert_int_equal(count_events(s, "\"name\":\"compile\"", "\"tid\":100"), 2);
    char nodes[64];
    snprintf(nodes, sizeof nodes, "%s,\"nodes\":%d", gkey, lt_replay_n_nodes(r));
    if (count_events(s, "\"name\":\"compile\"", nodes) != 1)
        fail_msg("no compile event for the recorded graph (%s):\n%s", nodes, s);
    /* one sync program, three replayed runs of the recorded graph */
    assert_int_equal(count_events(s, "\"name\":\"execute\"", gkey), 3);
    assert_int_equal(count_events(s, "\"name\":\"execute\"", "\"cat\":\"execute\""), 4);
    free(s);
    lt_replay_release(r);
}

/* Recording the same structure at another input shape is a recompilation,
 * explained as for a sync: counter Recompilation::explicit, a note naming
 * the input, both shapes, the cause and the caller frame. */
static void test_replay_recompile_diagnosed(void **st)
{
    (void)st;
    lt_set_caller("model.py:7 in forward");
    lt_replay *r4 = record(4);
    lt_replay *r8 = record(8);
    lt_set_caller(NULL);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("Recompilation::explicit"), 1);
    char *rep = lt_metrics_report();
    char want[160];
    snprintf(want, sizeof want, "recompiled: graph %016llx input 0 (f32) [4] -> [8]; "
             "cause explicit; at model.py:7 in forward\n",
             (unsigned long long)lt_replay_key(r8));
    if (!strstr(rep, want)) fail_msg("report lacks \"%s\":\n%s", want, rep);
    free(rep);
    /* recording the same graph again: a cache hit, no note */
    lt_replay *again = record(8);
    assert_int_equal(lt_counter_value("CachedCompile"), 1);
    assert_int_equal(lt_counter_value("Recompilation::explicit"), 1);
    lt_replay_release(again);
    lt_replay_release(r4);
    lt_replay_release(r8);
}

/* A recording of a new structure is a new graph, not a recompilation, even
 * from the same frame (FX graphs recorded on the autograd thread all share
 * the unknown frame); a sync from one site is still compared with the
 * site's last graph. */
static void test_new_recorded_structure_is_no_recompile(void **st)
{
    (void)st;
    lt_set_caller("model.py:7 in forward");
    lt_replay *r1 = record(4);
    lt_tensor *a = host(4, 1.0f), *b = host(4, 2.0f), *o, *in[2] = {a, b};
    assert_int_equal(lt_trace2(LT_OP_sub, a, b, NULL, &o), LT_OK);
    lt_replay *r2 = NULL;
    assert_int_equal(lt_replay_record(in, 2, &o, 1, &r2), LT_OK);
    assert_int_equal(lt_counter_value("UncachedCompile"), 2);
    assert_int_equal(lt_counter_value("Recompilation::explicit"), 0);
    /* syncs from one site: the second structure is explained */
    lt_tensor *s1, *s2;
    assert_int_equal(lt_trace2(LT_OP_add, a, b, NULL, &s1), LT_OK);
    assert_int_equal(lt_sync(&s1, 1, LT_SYNC_EXPLICIT, 1), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_div, a, b, NULL, &s2), LT_OK);
    assert_int_equal(lt_sync(&s2, 1, LT_SYNC_EXPLICIT, 1), LT_OK);
    assert_int_equal(lt_counter_value("Recompilation::explicit"), 1);
    lt_set_caller(NULL);
    lt_tensor *all[] = {a, b, o, s1, s2};
    for (int i = 0; i < 5; i++) lt_tensor_release(all[i]);
    lt_replay_release(r1);
    lt_replay_release(r2);
}

static int hook_calls;
static void hook(void)
{
    hook_calls++;
    lt_set_caller("train.py:99 in step");
}

/* With no frame set, a recording's compile asks the embedder's caller hook
 * (the Python shim's frame walk) once, and leaves no frame behind. */
static void test_replay_recompile_frame_from_hook(void **st)
{
    (void)st;
    lt_set_caller_hook(hook);
    lt_replay *r4 = record(4);
    assert_int_equal(hook_calls, 1);
    assert_string_equal(lt_caller_frame(), "");
    lt_replay *r8 = record(8);
    assert_int_equal(hook_calls, 2);
    lt_replay *again = record(8);           /* cache hit: no frame asked */
    assert_int_equal(hook_calls, 2);
    char *rep = lt_metrics_report();
    if (!strstr(rep, "; cause explicit; at train.py:99 in step\n"))
        fail_msg("no note with the hook's frame:\n%s", rep);
    free(rep);
    lt_replay_release(again);
    lt_replay_release(r4);
    lt_replay_release(r8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replay_compile_traced_like_sync, setup_traced,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replay_recompile_diagnosed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_recompile_frame_from_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_recorded_structure_is_no_recompile, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
