/* tests/c/test_graph_dump.c — lt_graph_text / lt_graph_dot of a small
 * pending graph (exact lines) and LAZYTPU_SAVE_GRAPHS (text and DOT). */
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

static void reinit(const char *save)
{
    lt_shutdown();
    if (save) setenv("LAZYTPU_SAVE_GRAPHS", save, 1); else unsetenv("LAZYTPU_SAVE_GRAPHS");
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    assert_int_equal(lt_init(), LT_OK);
}

static int setup(void **st) { (void)st; reinit(NULL); return 0; }
static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_live_tensors(0), 0);
    lt_set_caller(NULL);
    lt_shutdown();
    unsetenv("LAZYTPU_SAVE_GRAPHS");
    return 0;
}

/* x f32[2, 3]; y = x * 2.5; z = exp(y); s = sum(z) (all dims); roots s, z. */
typedef struct small { lt_tensor *x, *k, *y, *z, *s; } small;

static void small_make(small *g)
{
    float d[6] = {0, 1, 2, 3, 4, 5};
    lt_shape sh = lt_shape_make(2, (int64_t[]){2, 3});
    assert_int_equal(lt_tensor_from_host(0, d, LT_F32, &sh, &g->x), LT_OK);
    assert_int_equal(lt_scalar(0, 2.5, LT_F64, 1, &g->k), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_mul, g->x, g->k, NULL, &g->y), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_exp, g->y, NULL, &g->z), LT_OK);
    lt_attrs all = {.n = 2, .i = {3, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, g->z, &all, &g->s), LT_OK);
}

static void small_free(small *g)
{
    lt_tensor_release(g->s); lt_tensor_release(g->z); lt_tensor_release(g->y);
    lt_tensor_release(g->k); lt_tensor_release(g->x);
}

static const char *BODY =
    "%0 = data() f32[2, 3]  # param 0\n"
    "%1 = scalar(2.5) f64[]  # param 1\n"
    "%2 = mul(%0, %1) f32[2, 3]\n"
    "%3 = exp(%2) f32[2, 3]  # output 1\n"
    "%4 = sum(%3) f32[] attrs=[3, 0]  # output 0\n";

/* Checks "graph <16 hex>: 5 nodes, 2 params, 2 outputs (struct <16 hex>, core 0)\n";
 * returns the text after it. */
static const char *check_header(const char *s)
{
    unsigned long long k = 0, sk = 0;
    int nn = 0, np = 0, no = 0, core = -1, used = 0;
    int got = sscanf(s, "graph %16llx: %d nodes, %d params, %d outputs (struct %16llx, core %d)\n%n",
                     &k, &nn, &np, &no, &sk, &core, &used);
    if (got != 6) fail_msg("bad header:\n%s", s);
    assert_int_equal(nn, 5);
    assert_int_equal(np, 2);
    assert_int_equal(no, 2);
    assert_int_equal(core, 0);
    assert_true(k != 0 && sk != 0 && k != sk);
    return s + used;
}

static void check_text(const char *s, const char *body)
{
    assert_string_equal(check_header(s), body);
}

static void test_text_of_pending(void **st)
{
    (void)st;
    small g;
    small_make(&g);
    lt_tensor *roots[2] = {g.s, g.z};
    char *t = lt_graph_text(roots, 2);
    assert_non_null(t);
    check_text(t, BODY);
    /* nothing ran */
    assert_true(lt_tensor_is_pending(g.s));
    assert_int_equal(lt_counter_value("UncachedCompile") + lt_counter_value("CachedCompile"), 0);
    /* the same text twice (stable keys) */
    char *t2 = lt_graph_text(roots, 2);
    assert_string_equal(t, t2);
    free(t); free(t2);
    /* after a sync the value is data: a param that is also the output */
    assert_int_equal(lt_sync(&g.z, 1, LT_SYNC_EXPLICIT, 1), LT_OK);
    t = lt_graph_text(&g.z, 1);
    assert_non_null(strstr(t, "\n%0 = data() f32[2, 3]  # param 0, output 0\n"));
    free(t);
    assert_null(lt_graph_text(NULL, 0));
    assert_non_null(strstr(lt_last_error(), "no tensors"));
    small_free(&g);
}

static void test_dot_of_pending(void **st)
{
    (void)st;
    small g;
    small_make(&g);
    lt_tensor *roots[2] = {g.s, g.z};
    char *d = lt_graph_dot(roots, 2);
    assert_non_null(d);
    assert_true(strncmp(d, "digraph \"graph_", 15) == 0);
    const char *lines[] = {
        "  n0 [label=\"%0 data\\nf32[2, 3]\\nparam 0\", shape=ellipse, style=filled, fillcolor=lightblue];\n",
        "  n1 [label=\"%1 scalar 2.5\\nf64[]\\nparam 1\", shape=ellipse, style=filled, fillcolor=lightblue];\n",
        "  n2 [label=\"%2 mul\\nf32[2, 3]\"];\n",
        "  n3 [label=\"%3 exp\\nf32[2, 3]\\noutput 1\", peripheries=2];\n",
        "  n4 [label=\"%4 sum\\nf32[]\\noutput 0\", peripheries=2];\n",
        "  n0 -> n2;\n  n1 -> n2;\n  n2 -> n3;\n  n3 -> n4;\n}\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (!strstr(d, lines[i])) fail_msg("DOT lacks line %zu:\n%s\n--- in ---\n%s", i, lines[i], d);
    /* exactly 4 edges */
    int edges = 0;
    for (const char *p = d; (p = strstr(p, " -> ")); p++) edges++;
    assert_int_equal(edges, 4);
    free(d);
    small_free(&g);
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

static void test_save_graphs_text(void **st)
{
    (void)st;
    char path[64];
    snprintf(path, sizeof path, "/tmp/lt_graphs_%d.txt", (int)getpid());
    unlink(path);
    reinit(path);
    small g;
    small_make(&g);
    lt_tensor *roots[2] = {g.s, g.z};
    lt_set_caller("train.py:5 in f");
    assert_int_equal(lt_sync(roots, 2, LT_SYNC_MARK_STEP, 1), LT_OK);
    char *s = slurp(path);
    assert_non_null(s);
    const char *head = "# sync 1: cause mark_step, at train.py:5 in f\n";
    assert_true(strncmp(s, head, strlen(head)) == 0);
    const char *body = check_header(s + strlen(head));
    char want[512];
    snprintf(want, sizeof want, "%s\n", BODY);   /* a blank line after each graph */
    assert_string_equal(body, want);
    free(s);
    small_free(&g);
    unlink(path);
}

static void test_save_graphs_dot(void **st)
{
    (void)st;
    char path[64];
    snprintf(path, sizeof path, "/tmp/lt_graphs_%d.dot", (int)getpid());
    unlink(path);
    reinit(path);
    small g;
    small_make(&g);
    assert_int_equal(lt_sync(&g.s, 1, LT_SYNC_VALUE_READ, 1), LT_OK);
    lt_tensor *e;
    assert_int_equal(lt_trace1(LT_OP_neg, g.s, NULL, &e), LT_OK);
    assert_int_equal(lt_sync(&e, 1, LT_SYNC_MARK_STEP, 1), LT_OK);
    char *s = slurp(path);
    assert_non_null(s);
    int graphs = 0;
    for (const char *p = s; (p = strstr(p, "digraph ")); p++) graphs++;
    assert_int_equal(graphs, 2);
    assert_non_null(strstr(s, "sync 1: cause value_read, at <unknown>\";"));
    assert_non_null(strstr(s, "sync 2: cause mark_step, at <unknown>\";"));
    assert_non_null(strstr(s, "  n1 [label=\"%1 neg\\nf32[]\\noutput 0\", peripheries=2];\n"));
    free(s);
    lt_tensor_release(e);
    small_free(&g);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_of_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dot_of_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_graphs_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_graphs_dot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
