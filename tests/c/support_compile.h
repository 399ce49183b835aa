/* tests/c/support_compile.h — the harness of the compiler tests
 * (test_compile.c, test_gemm_epilogue.c, test_hfuse.c): hand-built graph
 * nodes (S: a shape, P: a data node from host values, N: an op node that
 * takes over its inputs' references, A: integer attributes) and run(): capture
 * the roots, compile, bind parameters and outputs (donating when asked),
 * run on core 0. Static functions: each test compiles its own copy.
 * Define TC_OWN_BUILDERS before including to get run() alone. Include after
 * cmocka.h. */
#ifndef TC_SUPPORT_COMPILE_H
#define TC_SUPPORT_COMPILE_H

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"

#ifndef TC_OWN_BUILDERS
static lt_shape __attribute__((unused)) S(int nd, ...)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = nd;
    va_list ap;
    va_start(ap, nd);
    for (int k = 0; k < nd; k++)
        s.dims[k] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static size_t __attribute__((unused)) esz(lt_dtype dt) { return dt == LT_BF16 ? 2 : dt == LT_BOOL ? 1 : (dt == LT_F32 || dt == LT_I32) ? 4 : 8; }

static lt_node *__attribute__((unused)) P(lt_dtype dt, lt_shape s, const void *data)
{
    lt_buffer *b;
    assert_int_equal(lt_buffer_alloc(0, dt, lt_shape_numel(&s), &b), LT_OK);
    memcpy(b->data, data, lt_shape_numel(&s) * esz(dt));
    return lt_node_new_data(b, &s, dt, 0);
}

static lt_node *__attribute__((unused)) N(lt_op op, lt_dtype dt, lt_shape s, const lt_attrs *a, int n, ...)
{
    lt_node *in[4];
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        in[k] = va_arg(ap, lt_node *);
    va_end(ap);
    lt_node *r = lt_node_new(op, in, n, a, &s, dt, 0, 0);
    for (int k = 0; k < n; k++)
        lt_node_release(in[k]);   /* the new node holds them */
    return r;
}

static lt_attrs __attribute__((unused)) A(int n, ...)
{
    lt_attrs a;
    memset(&a, 0, sizeof a);
    a.n = n;
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        a.i[k] = va_arg(ap, int);
    va_end(ap);
    return a;
}
#endif

typedef struct run_out {
    lt_program *p;
    lt_buffer *out[32];
    int n_out;
} run_out;

/* Captures roots, compiles, runs (donating when asked), releases roots. */
static run_out __attribute__((unused)) run(lt_node **roots, int n, int donate)
{
    run_out r;
    memset(&r, 0, sizeof r);
    lt_graph g;
    assert_int_equal(lt_graph_capture(roots, n, &g), LT_OK);
    lt_status st = lt_compile(&g, &r.p);
    if (st != LT_OK)
        fail_msg("compile: %s", lt_last_error());
    lt_exec_args a;
    memset(&a, 0, sizeof a);
    a.n_params = g.n_params;
    a.param_bufs = calloc(g.n_params + 1, sizeof(lt_buffer *));
    a.param_values = calloc(g.n_params + 1, sizeof(double));
    for (int j = 0; j < g.n_params; j++) {
        lt_node *pn = g.nodes[g.param_pos[j]];
        if (pn->op == LT_OP_data)
            a.param_bufs[j] = pn->buf;
        else
            a.param_values[j] = pn->value;
    }
    a.n_outputs = g.n_outputs;
    a.out_bufs = calloc(g.n_outputs + 1, sizeof(lt_buffer *));
    for (int k = 0; k < g.n_outputs; k++) {
        int al = lt_program_output_alias(r.p, k), dn = lt_program_output_donor(r.p, k);
        int same = lt_program_output_same(r.p, k);
        if (same >= 0) {
            assert_true(same < k);
            a.out_bufs[k] = lt_buffer_retain(a.out_bufs[same]);
        } else if (al >= 0)
            a.out_bufs[k] = lt_buffer_retain(a.param_bufs[al]);
        else if (donate && dn >= 0)
            a.out_bufs[k] = lt_buffer_retain(a.param_bufs[dn]);
        else
            assert_int_equal(lt_buffer_alloc(0, lt_program_output_dtype(r.p, k),
                             lt_shape_numel(lt_program_output_shape(r.p, k)), &a.out_bufs[k]), LT_OK);
    }
    if (lt_program_scratch_bytes(r.p))
        assert_int_equal(lt_buffer_alloc(0, LT_BOOL, lt_program_scratch_bytes(r.p), &a.scratch), LT_OK);
    st = lt_program_run(r.p, &a, 0, NULL);
    if (st != LT_OK)
        fail_msg("run: %s", lt_last_error());
    for (int k = 0; k < n; k++)
        r.out[k] = lt_buffer_retain(a.out_bufs[g.root_out[k]]);
    r.n_out = n;
    for (int k = 0; k < g.n_outputs; k++)
        lt_buffer_release(a.out_bufs[k]);
    lt_buffer_release(a.scratch);
    free(a.out_bufs);
    free(a.param_bufs);
    free(a.param_values);
    lt_graph_free(&g);
    for (int k = 0; k < n; k++)
        lt_node_release(roots[k]);
    return r;
}

static void __attribute__((unused)) run_free(run_out *r)
{
    for (int k = 0; k < r->n_out; k++)
        lt_buffer_release(r->out[k]);
    lt_program_release(r->p);
}

#endif
