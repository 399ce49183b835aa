/*
 * lazy/graph_dump.c — graphs as text / DOT (see graph_dump.h), the public
 * lt_graph_text / lt_graph_dot, and the LAZYTPU_SAVE_GRAPHS file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include "graph_dump.h"
#include "spmd.h"
#include "tensor.h"
#include "registry.h"
#include "options.h"

/* Per node: "param j" / "output k" marks (both may apply). */
typedef struct marks {
    int *param;     /* node -> param index or -1 */
    int *output;    /* node -> first output index or -1 */
} marks;

static int marks_make(const lt_graph *g, marks *m)
{
    size_t n = (size_t)(g->n_nodes ? g->n_nodes : 1);
    m->param = malloc(n * sizeof *m->param);
    m->output = malloc(n * sizeof *m->output);
    if (!m->param || !m->output) {
        free(m->param);
        free(m->output);
        return 0;
    }
    for (int i = 0; i < g->n_nodes; i++) m->param[i] = m->output[i] = -1;
    for (int j = 0; j < g->n_params; j++) m->param[g->param_pos[j]] = j;
    for (int k = g->n_outputs - 1; k >= 0; k--) m->output[g->output_pos[k]] = k;
    return 1;
}

static void type_str(const lt_node *n, char *buf, size_t cap)
{
    char s[160];
    snprintf(buf, cap, "%s%s", lt_dtype_name((lt_dtype)n->dtype),
             lt_shape_str(&n->shape, s, sizeof s));
}

/* "add(%3, %4)", "data()", "scalar(0.01)" */
static void call_str(lt_sb *sb, const lt_graph *g, int i)
{
    const lt_node *n = g->nodes[i];
    if (n->op == LT_OP_scalar) {
        lt_sb_printf(sb, "scalar(%.9g)", n->value);
        return;
    }
    lt_sb_printf(sb, "%s(", lt_op_name((lt_op)n->op));
    for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
        lt_sb_printf(sb, "%s%%%d", e > g->in_off[i] ? ", " : "", g->in_pos[e]);
    lt_sb_puts(sb, ")");
}

static void attrs_str(lt_sb *sb, const lt_node *n)
{
    if (n->op == LT_OP_data || n->op == LT_OP_scalar) return;
    if (n->attrs.n > 0) {
        lt_sb_puts(sb, " attrs=[");
        for (int k = 0; k < n->attrs.n; k++)
            lt_sb_printf(sb, "%s%lld", k ? ", " : "", (long long)n->attrs.i[k]);
        lt_sb_puts(sb, "]");
    }
    if (n->attrs.f[0] != 0 || n->attrs.f[1] != 0)
        lt_sb_printf(sb, " f=[%.9g, %.9g]", n->attrs.f[0], n->attrs.f[1]);
}

static void header(lt_sb *sb, const lt_graph *g)
{
    lt_sb_printf(sb, "graph %016llx: %d node%s, %d param%s, %d output%s (struct %016llx, core %d)",
                 (unsigned long long)g->key, g->n_nodes, g->n_nodes == 1 ? "" : "s",
                 g->n_params, g->n_params == 1 ? "" : "s", g->n_outputs,
                 g->n_outputs == 1 ? "" : "s", (unsigned long long)g->struct_key, g->core);
}

static void dump_text(lt_sb *sb, const lt_graph *g, const marks *m, const char *title)
{
    if (title && title[0]) lt_sb_printf(sb, "# %s\n", title);
    header(sb, g);
    lt_sb_puts(sb, "\n");
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        char ty[200];
        type_str(n, ty, sizeof ty);
        lt_sb_printf(sb, "%%%d = ", i);
        call_str(sb, g, i);
        lt_sb_printf(sb, " %s", ty);
        attrs_str(sb, n);
        if (n->shard) {                  /* SPMD layout (lazy/spmd.h) */
            char sh[160];
            lt_sb_printf(sb, " sharding=%s%s", lt_sharding_str(n->shard, sh, sizeof sh),
                         (n->flags & LT_NODE_SHARD_ANNOT) ? " (annotated)" : "");
        }
        if (m->param[i] >= 0 && m->output[i] >= 0)
            lt_sb_printf(sb, "  # param %d, output %d", m->param[i], m->output[i]);
        else if (m->param[i] >= 0)
            lt_sb_printf(sb, "  # param %d", m->param[i]);
        else if (m->output[i] >= 0)
            lt_sb_printf(sb, "  # output %d", m->output[i]);
        lt_sb_puts(sb, "\n");
    }
}

/* Appends s with DOT string escapes (", \, newlines). */
static void dot_escape(lt_sb *sb, const char *s)
{
    char buf[2] = {0, 0};
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') lt_sb_puts(sb, "\\");
        if (*s == '\n') {
            lt_sb_puts(sb, "\\n");
            continue;
        }
        buf[0] = *s;
        lt_sb_puts(sb, buf);
    }
}

static void dump_dot(lt_sb *sb, const lt_graph *g, const marks *m, const char *title)
{
    lt_sb_printf(sb, "digraph \"graph_%016llx\" {\n", (unsigned long long)g->key);
    lt_sb sub = {0};
    header(&sub, g);
    if (title && title[0]) lt_sb_printf(&sub, "\n%s", title);
    char *lab = lt_sb_take(&sub);
    lt_sb_puts(sb, "  labelloc=t;\n  label=\"");
    dot_escape(sb, lab ? lab : "");
    free(lab);
    lt_sb_puts(sb, "\";\n  node [shape=box, fontname=\"monospace\"];\n");
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        char ty[200];
        type_str(n, ty, sizeof ty);
        lt_sb_printf(sb, "  n%d [label=\"%%%d ", i, i);
        if (n->op == LT_OP_scalar) lt_sb_printf(sb, "scalar %.9g", n->value);
        else lt_sb_puts(sb, lt_op_name((lt_op)n->op));
        lt_sb_printf(sb, "\\n%s", ty);
        if (m->param[i] >= 0) lt_sb_printf(sb, "\\nparam %d", m->param[i]);
        if (m->output[i] >= 0) lt_sb_printf(sb, "\\noutput %d", m->output[i]);
        lt_sb_puts(sb, "\"");
        if (m->param[i] >= 0) lt_sb_puts(sb, ", shape=ellipse, style=filled, fillcolor=lightblue");
        else if (n->op == LT_OP_scalar) lt_sb_puts(sb, ", shape=ellipse");
        if (m->output[i] >= 0) lt_sb_puts(sb, ", peripheries=2");
        lt_sb_puts(sb, "];\n");
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
            lt_sb_printf(sb, "  n%d -> n%d;\n", g->in_pos[e], i);
    lt_sb_puts(sb, "}\n");
}

char *lt_graph_dump(const lt_graph *g, int dot, const char *title)
{
    marks m;
    if (!marks_make(g, &m)) return NULL;
    lt_sb sb = {0};
    if (dot) dump_dot(&sb, g, &m, title);
    else dump_text(&sb, g, &m, title);
    free(m.param);
    free(m.output);
    return lt_sb_take(&sb);
}

/* ------------------------------------------------------ pending tensors */

static char *graph_of(lt_tensor *const *t, int n, int dot)
{
    if (n < 1 || !t) {
        lt_set_error(LT_ERR_ARG, "graph_text: no tensors");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!t[i]) {
            lt_set_error(LT_ERR_ARG, "graph_text: tensor %d is NULL", i);
            return NULL;
        }
    lt_node **roots = malloc((size_t)n * sizeof *roots);
    if (!roots) {
        lt_set_error(LT_ERR_INTERNAL, "graph_text: out of host memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) roots[i] = lt_tensor_value(t[i]);
    lt_graph g;
    char *s = NULL;
    if (lt_graph_capture(roots, n, &g) == LT_OK) {
        s = lt_graph_dump(&g, dot, NULL);
        if (!s) lt_set_error(LT_ERR_INTERNAL, "graph_text: out of host memory");
        lt_graph_free(&g);
    }
    for (int i = 0; i < n; i++) lt_node_release(roots[i]);
    free(roots);
    return s;
}

char *lt_graph_text(lt_tensor *const *t, int n) { return graph_of(t, n, 0); }
char *lt_graph_dot(lt_tensor *const *t, int n) { return graph_of(t, n, 1); }

/* ------------------------------------------------- LAZYTPU_SAVE_GRAPHS */

static pthread_mutex_t save_mu = PTHREAD_MUTEX_INITIALIZER;
static char save_path[1024];
static int save_dot;
static atomic_int save_on;
static int64_t save_seq;

void lt_graph_dump_init(void)
{
    const char *p = lt_opt_str(LT_OPT_SAVE_GRAPHS);
    pthread_mutex_lock(&save_mu);
    if (p && *p && strlen(p) < sizeof save_path) {
        snprintf(save_path, sizeof save_path, "%s", p);
        size_t l = strlen(p);
        save_dot = l >= 4 && strcmp(p + l - 4, ".dot") == 0;
        save_seq = 0;
        atomic_store(&save_on, 1);
    } else {
        save_path[0] = 0;
        atomic_store(&save_on, 0);
    }
    pthread_mutex_unlock(&save_mu);
}

int lt_graph_dump_enabled(void) { return atomic_load_explicit(&save_on, memory_order_relaxed); }

void lt_graph_dump_sync(const lt_graph *g, lt_sync_cause cause, const char *frame)
{
    if (!lt_graph_dump_enabled()) return;
    pthread_mutex_lock(&save_mu);
    int64_t seq = ++save_seq;
    int dot = save_dot;
    pthread_mutex_unlock(&save_mu);
    char title[512];
    snprintf(title, sizeof title, "sync %lld: cause %s, at %s", (long long)seq,
             lt_sync_cause_name(cause), frame && frame[0] ? frame : "<unknown>");
    char *s = lt_graph_dump(g, dot, title);
    if (!s) return;
    pthread_mutex_lock(&save_mu);
    if (atomic_load(&save_on)) {
        FILE *f = fopen(save_path, "a");
        if (!f || fputs(s, f) < 0 || fputs("\n", f) < 0) {
            fprintf(stderr, "lazytpu: LAZYTPU_SAVE_GRAPHS: cannot write %s; graph dumps disabled\n",
                    save_path);
            atomic_store(&save_on, 0);
        }
        if (f) fclose(f);
    }
    pthread_mutex_unlock(&save_mu);
    free(s);
}
