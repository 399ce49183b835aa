/*
 * lazy/graph.c — graph capture: iterative post-order DFS from the roots,
 * parameters, aliasing, outputs and the graph keys (see graph.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "graph.h"
#include "tensor.h"

/* ---------------------------------------------- pointer -> int hash map */

typedef struct pm_slot {
    const void *key;       /* NULL = empty */
    int val;
} pm_slot;

typedef struct ptrmap {
    size_t cap;            /* power of two */
    size_t count;
    pm_slot *slots;
} ptrmap;

static inline size_t ptr_slot(const void *p, size_t cap)
{
    uint64_t k = (uint64_t)(uintptr_t)p;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 29;
    return (size_t)k & (cap - 1);
}

static int ptrmap_init(ptrmap *m, size_t expect)
{
    size_t cap = 64;
    while (cap < expect + expect / 2) cap <<= 1;   /* load <= 2/3 after `expect` puts */
    m->cap = cap;
    m->count = 0;
    m->slots = calloc(cap, sizeof *m->slots);
    return m->slots != NULL;
}

static void ptrmap_free(ptrmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

static inline int ptrmap_get(const ptrmap *m, const void *k)
{
    size_t i = ptr_slot(k, m->cap);
    while (m->slots[i].key) {
        if (m->slots[i].key == k) return m->slots[i].val;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static int ptrmap_put(ptrmap *m, const void *k, int v)
{
    if ((m->count + 1) * 10 > m->cap * 7) {        /* keep the load under 0.7 */
        ptrmap n;
        n.cap = m->cap * 2;
        n.count = 0;
        n.slots = calloc(n.cap, sizeof *n.slots);
        if (!n.slots) return 0;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) {
                size_t j = ptr_slot(m->slots[i].key, n.cap);
                while (n.slots[j].key) j = (j + 1) & (n.cap - 1);
                n.slots[j] = m->slots[i];
                n.count++;
            }
        ptrmap_free(m);
        *m = n;
    }
    size_t i = ptr_slot(k, m->cap);
    while (m->slots[i].key && m->slots[i].key != k) i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].key) m->count++;
    m->slots[i].key = k;
    m->slots[i].val = v;
    return 1;
}

/* ----------------------------------------------------------------- capture */

/* Node positions during a capture live in the nodes themselves (cap_mark,
 * cap_pos): a node is placed in this capture iff its mark is this capture's
 * number. No hash map, no per-capture table to clear. Captures on one core
 * are serialised (a node belongs to one core, so captures on different
 * cores never share nodes). */
static _Atomic uint64_t g_cap_seq;
static pthread_mutex_t g_cap_mu[LT_RT_MAX_CORES];
static pthread_once_t g_cap_once = PTHREAD_ONCE_INIT;

static void cap_init(void)
{
    for (int i = 0; i < LT_RT_MAX_CORES; i++) pthread_mutex_init(&g_cap_mu[i], NULL);
}

static inline int cap_get(const lt_node *n, uint64_t mark)
{
    return n->cap_mark == mark ? n->cap_pos : -1;
}

static inline void cap_put(lt_node *n, uint64_t mark, int pos)
{
    n->cap_mark = mark;
    n->cap_pos = pos;
}

typedef struct frame {
    lt_node *n;
    int next;              /* next operand to visit */
} frame;

static int is_param(const lt_node *n)
{
    return n->op == LT_OP_data ||
           (n->op == LT_OP_scalar && !(n->flags & LT_NODE_CONST));
}

void lt_graph_free(lt_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) lt_node_release(g->nodes[i]);
    free(g->nodes);
    free(g->in_pos);
    free(g->in_off);
    free(g->param_pos);
    free(g->param_alias);
    free(g->output_pos);
    free(g->root_out);
    memset(g, 0, sizeof *g);
}

static lt_status oom(lt_graph *g, frame *stack)
{
    free(stack);
    lt_graph_free(g);
    return lt_set_error(LT_ERR_INTERNAL, "capture: out of host memory");
}

lt_status lt_graph_capture(lt_node *const *roots, int n_roots, lt_graph *g)
{
    return lt_graph_capture_sized(roots, n_roots, g, 0);
}

static lt_status capture_locked(lt_node *const *roots, int n_roots, lt_graph *g,
                                int64_t size_hint, uint64_t mark);

lt_status lt_graph_capture_sized(lt_node *const *roots, int n_roots, lt_graph *g,
                                 int64_t size_hint)
{
    memset(g, 0, sizeof *g);
    if (n_roots < 1 || !roots)
        return lt_set_error(LT_ERR_ARG, "capture: no roots");
    if (!roots[0])
        return lt_set_error(LT_ERR_ARG, "capture: NULL root 0");
    int core = roots[0]->core;
    if (core < 0 || core >= LT_RT_MAX_CORES)
        return lt_set_error(LT_ERR_DEVICE, "capture: invalid core %d", core);
    pthread_once(&g_cap_once, cap_init);
    pthread_mutex_lock(&g_cap_mu[core]);
    uint64_t mark = atomic_fetch_add(&g_cap_seq, 1) + 1;
    lt_status st = capture_locked(roots, n_roots, g, size_hint, mark);
    pthread_mutex_unlock(&g_cap_mu[core]);
    return st;
}

static lt_status capture_locked(lt_node *const *roots, int n_roots, lt_graph *g,
                                int64_t size_hint, uint64_t mark)
{
    memset(g, 0, sizeof *g);
    if (n_roots < 1 || !roots)
        return lt_set_error(LT_ERR_ARG, "capture: no roots");
    int core = roots[0]->core;
    for (int i = 0; i < n_roots; i++) {
        if (!roots[i]) return lt_set_error(LT_ERR_ARG, "capture: NULL root %d", i);
        if (roots[i]->core != core)
            return lt_set_error(LT_ERR_DEVICE, "capture: roots on cores %d and %d",
                                core, roots[i]->core);
    }
    g->core = core;

    /* the hint counts traced ops; leaves (data, scalars) come on top */
    size_t hint = size_hint > 0 && size_hint < ((int64_t)1 << 26)
                      ? (size_t)size_hint + (size_t)size_hint / 4 + 16 : 256;
    if (hint < 256) hint = 256;
    size_t ncap = hint, ecap = hint * 2, scap = 64;
    int n_edges = 0;
    g->nodes = malloc(ncap * sizeof *g->nodes);
    g->in_pos = malloc(ecap * sizeof *g->in_pos);
    g->in_off = malloc((ncap + 1) * sizeof *g->in_off);
    frame *stack = malloc(scap * sizeof *stack);
    if (!g->nodes || !g->in_pos || !g->in_off || !stack) return oom(g, stack);
    g->in_off[0] = 0;

    /* Operand positions wait on an edge stack until their user is emitted:
     * each edge costs one map lookup. A node cannot be on the DFS path twice
     * (no cycles), so an emitted node is never emitted again. */
    size_t escap = 256, etop = 0;
    int *es = malloc(escap * sizeof *es);
    if (!es) return oom(g, stack);
#define ES_PUSH(v)                                                      \
    do {                                                                \
        if (etop == escap) {                                            \
            int *ne_ = realloc(es, escap * 2 * sizeof *es);             \
            if (!ne_) { free(es); return oom(g, stack); }         \
            es = ne_;                                                   \
            escap *= 2;                                                 \
        }                                                               \
        es[etop++] = (v);                                               \
    } while (0)
    for (int r = 0; r < n_roots; r++) {
        if (cap_get(roots[r], mark) >= 0) continue;
        size_t top = 0;
        stack[top++] = (frame){roots[r], 0};
        while (top > 0) {
            frame *f = &stack[top - 1];
            if (f->next < f->n->n_in) {
                lt_node *c = f->n->in[f->next++];
                int cp = cap_get(c, mark);
                if (cp >= 0) {
                    ES_PUSH(cp);
                    continue;
                }
                if (top == scap) {
                    scap *= 2;
                    frame *ns = realloc(stack, scap * sizeof *stack);
                    if (!ns) { free(es); return oom(g, stack); }
                    stack = ns;
                }
                stack[top++] = (frame){c, 0};
                continue;
            }
            /* all operands placed: emit */
            lt_node *n = f->n;
            top--;
            if ((size_t)g->n_nodes == ncap) {
                ncap *= 2;
                lt_node **nn = realloc(g->nodes, ncap * sizeof *nn);
                if (!nn) { free(es); return oom(g, stack); }
                g->nodes = nn;
                int *no = realloc(g->in_off, (ncap + 1) * sizeof *no);
                if (!no) { free(es); return oom(g, stack); }
                g->in_off = no;
            }
            while ((size_t)(n_edges + n->n_in) > ecap) {
                ecap *= 2;
                int *ne = realloc(g->in_pos, ecap * sizeof *ne);
                if (!ne) { free(es); return oom(g, stack); }
                g->in_pos = ne;
            }
            int id = g->n_nodes;
            etop -= (size_t)n->n_in;
            for (int k = 0; k < n->n_in; k++) g->in_pos[n_edges++] = es[etop + (size_t)k];
            g->nodes[id] = lt_node_retain(n);
            g->n_nodes++;
            g->in_off[id + 1] = n_edges;
            cap_put(n, mark, id);
            if (top > 0) ES_PUSH(id);
        }
    }
#undef ES_PUSH
    free(es);
    free(stack);

    /* parameters and their aliasing */
    int np = 0;
    for (int i = 0; i < g->n_nodes; i++) np += is_param(g->nodes[i]);
    g->param_pos = malloc((size_t)(np ? np : 1) * sizeof *g->param_pos);
    g->param_alias = malloc((size_t)(np ? np : 1) * sizeof *g->param_alias);
    g->output_pos = malloc((size_t)n_roots * sizeof *g->output_pos);
    g->root_out = malloc((size_t)n_roots * sizeof *g->root_out);
    if (!g->param_pos || !g->param_alias || !g->output_pos || !g->root_out)
        return oom(g, NULL);
    ptrmap bufs;
    if (!ptrmap_init(&bufs, (size_t)np + 1)) {
        ptrmap_free(&bufs);
        return oom(g, NULL);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        lt_node *n = g->nodes[i];
        if (!is_param(n)) continue;
        int j = g->n_params++;
        g->param_pos[j] = i;
        g->param_alias[j] = -1;
        if (n->op == LT_OP_data && n->buf) {
            int prev = ptrmap_get(&bufs, n->buf);
            if (prev >= 0) g->param_alias[j] = prev;
            else if (!ptrmap_put(&bufs, n->buf, j)) {
                ptrmap_free(&bufs);
                return oom(g, NULL);
            }
        }
    }
    ptrmap_free(&bufs);

    /* outputs: roots in order given, duplicates folded */
    ptrmap outs;
    if (!ptrmap_init(&outs, (size_t)n_roots)) {
        ptrmap_free(&outs);
        return oom(g, NULL);
    }
    for (int r = 0; r < n_roots; r++) {
        int o = ptrmap_get(&outs, roots[r]);
        if (o < 0) {
            o = g->n_outputs++;
            g->output_pos[o] = cap_get(roots[r], mark);
            if (!ptrmap_put(&outs, roots[r], o)) {
                ptrmap_free(&outs);
                return oom(g, NULL);
            }
        }
        g->root_out[r] = o;
    }
    ptrmap_free(&outs);

    /* keys */
    uint64_t k = lt_hash_mix_inline(0x4B4559u, (uint64_t)g->n_nodes);
    uint64_t s = lt_hash_mix_inline(0x53545255u, (uint64_t)g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        lt_node *n = g->nodes[i];
        k = lt_hash_mix_inline(k, n->hash);
        s = lt_hash_mix_inline(s, n->struct_hash);
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            k = lt_hash_mix_inline(k, (uint64_t)g->in_pos[e]);
            s = lt_hash_mix_inline(s, (uint64_t)g->in_pos[e]);
        }
    }
    k = lt_hash_mix_inline(k, (uint64_t)g->n_params);
    s = lt_hash_mix_inline(s, (uint64_t)g->n_params);
    for (int j = 0; j < g->n_params; j++) {
        k = lt_hash_mix_inline(k, (uint64_t)(int64_t)g->param_alias[j]);
        s = lt_hash_mix_inline(s, (uint64_t)(int64_t)g->param_alias[j]);
    }
    k = lt_hash_mix_inline(k, (uint64_t)g->n_outputs);
    s = lt_hash_mix_inline(s, (uint64_t)g->n_outputs);
    for (int o = 0; o < g->n_outputs; o++) {
        k = lt_hash_mix_inline(k, (uint64_t)g->output_pos[o]);
        s = lt_hash_mix_inline(s, (uint64_t)g->output_pos[o]);
    }
    /* the level a product multiplies at is part of what the graph computes */
    g->mm_precision = LT_MATMUL_F32;
    lt_matmul_precision prec = lt_rt_matmul_precision();
    for (int i = 0; prec != LT_MATMUL_F32 && i < g->n_nodes; i++) {
        lt_op_kind kind = lt_op_kind_of((lt_op)g->nodes[i]->op);
        if (kind == LT_KIND_MATMUL || kind == LT_KIND_CONV) {
            g->mm_precision = prec;
            k = lt_hash_mix_inline(k, 0x4D58550000ull + (uint64_t)prec);
            break;
        }
    }
    g->key = k;
    g->struct_key = s;
    return LT_OK;
}
