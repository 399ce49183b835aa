/* tests/c/test_pcache.c — the persistent compile cache's parts:
 * lazy/program_io.c (a program written and read back runs to the same
 * bits and writes the same bytes again; cut or damaged bytes are refused
 * or at least never read out of bounds) and lazy/pcache.c (store then load
 * in a directory; another graph under the same key is refused; read-only
 * writes nothing; configuring after the first use is refused). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compile.h"
#include "pcache.h"
#include "program_io.h"
#include "tensor.h"

#include "support_compile.h"

enum { M = 6, K = 5, NN = 7 };

static void fill(float *x, int n, float a, float b)
{
    for (int i = 0; i < n; i++) x[i] = a + b * (float)((i * 7919) % 101) / 101.0f;
}

/* Roots of a graph with a GEMM epilogue, a reduction over a fused
 * producer, a horizontal fusion of two updates and a scalar parameter:
 * y = gelu(b + x @ w), s = sum(y * y, dim 1), u1 = a - lr * g, u2 = c - lr * g2. */
static int build(lt_node **roots, int width)
{
    float x[M * 8], w[8 * NN], b[NN], a[64], g[64];
    fill(x, M * 8, -1, 2);
    fill(w, 8 * NN, -0.5f, 1);
    fill(b, NN, -1, 2);
    fill(a, 64, 0.5f, 1);
    fill(g, 64, -0.3f, 0.6f);
    lt_node *h = N(LT_OP_addmm, LT_F32, S(2, M, NN), NULL, 3, P(LT_F32, S(1, NN), b),
                   P(LT_F32, S(2, M, width), x), P(LT_F32, S(2, width, NN), w));
    lt_node *y = N(LT_OP_gelu, LT_F32, S(2, M, NN), NULL, 1, h);
    lt_attrs dim1 = A(1, 2);
    lt_node *sq = N(LT_OP_mul, LT_F32, S(2, M, NN), NULL, 2, lt_node_retain(y), lt_node_retain(y));
    lt_node *s = N(LT_OP_sum, LT_F32, S(1, M), &dim1, 1, sq);
    lt_node *lr = lt_node_new_scalar(0.125, LT_F32, 0, LT_NODE_WRAPPED);
    lt_node *t1 = N(LT_OP_mul, LT_F32, S(1, 64), NULL, 2, P(LT_F32, S(1, 64), g), lt_node_retain(lr));
    lt_node *u1 = N(LT_OP_sub, LT_F32, S(1, 64), NULL, 2, P(LT_F32, S(1, 64), a), t1);
    lt_node *t2 = N(LT_OP_mul, LT_F32, S(1, 64), NULL, 2, P(LT_F32, S(1, 64), a), lr);
    lt_node *u2 = N(LT_OP_sub, LT_F32, S(1, 64), NULL, 2, P(LT_F32, S(1, 64), g), t2);
    roots[0] = y;
    roots[1] = s;
    roots[2] = u1;
    roots[3] = u2;
    return 4;
}

/* Runs p over g's parameters; copies output k's floats into outs[k]. */
static void run_prog(const lt_graph *g, const lt_program *p, float outs[][64])
{
    lt_exec_args a;
    memset(&a, 0, sizeof a);
    a.n_params = g->n_params;
    a.param_bufs = calloc(g->n_params + 1, sizeof(lt_buffer *));
    a.param_values = calloc(g->n_params + 1, sizeof(double));
    for (int j = 0; j < g->n_params; j++) {
        lt_node *pn = g->nodes[g->param_pos[j]];
        if (pn->op == LT_OP_data) a.param_bufs[j] = lt_buffer_retain(pn->buf);
        else a.param_values[j] = pn->value;
    }
    a.n_outputs = g->n_outputs;
    a.out_bufs = calloc(g->n_outputs + 1, sizeof(lt_buffer *));
    for (int k = 0; k < g->n_outputs; k++)
        assert_int_equal(lt_buffer_alloc(0, lt_program_output_dtype(p, k),
                         lt_shape_numel(lt_program_output_shape(p, k)), &a.out_bufs[k]), LT_OK);
    if (lt_program_scratch_bytes(p))
        assert_int_equal(lt_buffer_alloc(0, LT_BOOL, lt_program_scratch_bytes(p), &a.scratch), LT_OK);
    if (lt_program_run(p, &a, 0, NULL) != LT_OK) fail_msg("run: %s", lt_last_error());
    for (int k = 0; k < g->n_outputs; k++) {
        int64_t n = lt_shape_numel(lt_program_output_shape(p, k));
        assert_true(n <= 64);
        memcpy(outs[k], a.out_bufs[k]->data, (size_t)n * 4);
    }
    lt_exec_args_free(&a);
}

static void capture(lt_graph *g, int width)
{
    lt_node *roots[4];
    int n = build(roots, width);
    assert_int_equal(lt_graph_capture(roots, n, g), LT_OK);
    for (int k = 0; k < n; k++) lt_node_release(roots[k]);
}

static void test_round_trip_same_bits(void **state)
{
    (void)state;
    lt_graph g;
    capture(&g, K);
    lt_program *p;
    assert_int_equal(lt_compile(&g, &p), LT_OK);
    lt_bytes b = {0};
    assert_int_equal(lt_program_write(p, &b), LT_OK);
    lt_program *q = lt_program_read(b.p, b.n);
    assert_non_null(q);
    lt_bytes b2 = {0};
    assert_int_equal(lt_program_write(q, &b2), LT_OK);
    assert_int_equal(b.n, b2.n);
    assert_memory_equal(b.p, b2.p, b.n);
    assert_int_equal(lt_program_n_kernels(q), lt_program_n_kernels(p));
    static float o1[4][64], o2[4][64];
    memset(o1, 0, sizeof o1);
    memset(o2, 0x55, sizeof o2);
    run_prog(&g, p, o1);
    run_prog(&g, q, o2);
    for (int k = 0; k < g.n_outputs; k++) {
        int64_t n = lt_shape_numel(lt_program_output_shape(p, k));
        assert_memory_equal(o1[k], o2[k], (size_t)n * 4);
    }
    /* every cut of the record is refused */
    for (size_t n = 0; n < b.n; n++) assert_null(lt_program_read(b.p, n));
    /* a byte flipped anywhere: refused or read within bounds (the file
     * checksum in pcache.c refuses these before lt_program_read) */
    for (size_t i = 0; i < b.n; i += 3) {
        b.p[i] ^= 0xA5;
        lt_program *r = lt_program_read(b.p, b.n);
        lt_program_release(r);
        b.p[i] ^= 0xA5;
    }
    free(b.p);
    free(b2.p);
    lt_program_release(p);
    lt_program_release(q);
    lt_graph_free(&g);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        n += l > s && strcmp(e->d_name + l - s, suffix) == 0;
    }
    closedir(d);
    return n;
}

static int64_t counter(const char *name) { return lt_counter_value(name); }

static void test_store_load_verify(void **state)
{
    (void)state;
    char dir[] = "/tmp/lt_pcache_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    lt_compile_opts o = {0};
    lt_graph g, g2;
    capture(&g, K);
    capture(&g2, 8);
    lt_program *p;
    assert_int_equal(lt_compile_with(&g, &o, &p), LT_OK);

    lt_pcache *pc = lt_pcache_new();
    assert_int_equal(lt_pcache_configure(pc, sub, 0), LT_OK);   /* parents created */
    assert_int_equal(lt_pcache_info(pc, NULL, 0, NULL), 0);
    assert_int_equal(lt_pcache_start(pc), LT_OK);
    assert_int_equal(lt_pcache_configure(pc, dir, 0), LT_ERR_STATE);
    int64_t miss = counter("PersistentCacheMiss"), hit = counter("PersistentCacheHit");
    int64_t bad = counter("PersistentCacheDeserializeFailure");
    assert_null(lt_pcache_load(pc, &g, &o));
    assert_int_equal(counter("PersistentCacheMiss"), miss + 1);
    lt_pcache_store(pc, &g, &o, p);
    assert_int_equal(count_files(sub, ".ltp"), 1);
    assert_int_equal(count_files(sub, ".tmp"), 0);
    lt_program *q = lt_pcache_load(pc, &g, &o);
    assert_non_null(q);
    assert_int_equal(counter("PersistentCacheHit"), hit + 1);
    lt_program_release(q);
    /* other options: another file */
    lt_compile_opts o2 = {0};
    o2.no_hfuse = 1;
    assert_null(lt_pcache_load(pc, &g, &o2));
    assert_int_equal(counter("PersistentCacheMiss"), miss + 2);
    /* another graph under g's key (a key collision): refused, file removed */
    uint64_t k2 = g2.key;
    g2.key = g.key;
    assert_null(lt_pcache_load(pc, &g2, &o));
    assert_int_equal(counter("PersistentCacheDeserializeFailure"), bad + 1);
    assert_int_equal(count_files(sub, ".ltp"), 0);
    g2.key = k2;
    lt_pcache_free(pc);

    /* read-only: loads what is there, writes nothing */
    pc = lt_pcache_new();
    assert_int_equal(lt_pcache_configure(pc, sub, 1), LT_OK);
    assert_int_equal(lt_pcache_start(pc), LT_OK);
    lt_pcache_store(pc, &g, &o, p);
    assert_int_equal(count_files(sub, ".ltp"), 0);
    lt_pcache_free(pc);

    /* a directory that cannot be made */
    char file[300];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    pc = lt_pcache_new();
    assert_int_equal(lt_pcache_configure(pc, file, 0), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "cannot create"));
    lt_pcache_free(pc);

    unlink(file);
    rmdir(sub);
    snprintf(file, sizeof file, "%s/a", dir);
    rmdir(file);
    rmdir(dir);
    lt_program_release(p);
    lt_graph_free(&g);
    lt_graph_free(&g2);
}

static int setup(void **state)
{
    (void)state;
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    return lt_devices_init() == LT_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    lt_devices_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_same_bits),
        cmocka_unit_test(test_store_load_verify),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
