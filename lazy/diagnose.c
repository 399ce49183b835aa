/*
 * lazy/diagnose.c — recompilation analysis, fallback statistics and the
 * LAZYTPU_DEBUG step warnings (see diagnose.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <stdatomic.h>
#include "diagnose.h"
#include "host_reads.h"
#include "tensor.h"
#include "registry.h"
#include "report.h"
#include "options.h"

/* ------------------------------------------------------------ debug mode */

static atomic_int debug_mode;          /* 0 off, 1 stderr + collect, 2 collect */

void lt_diagnose_init(void)
{
    /* LAZYTPU_DEBUG or PT_XLA_DEBUG */
    atomic_store(&debug_mode, lt_opt_int(LT_OPT_DEBUG) ? 1 : 0);
}

int lt_debug_enabled(void) { return atomic_load_explicit(&debug_mode, memory_order_relaxed) != 0; }

void lt_debug_set(int mode)
{
    atomic_store(&debug_mode, mode < 0 ? 0 : mode > 2 ? 2 : mode);
}

/* ---------------------------------------------------------- warnings text */

static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static lt_sb warn_sb;

#define WARN_TEXT_MAX (64 * 1024)

static void emit_warning(const char *line)
{
    if (atomic_load(&debug_mode) == 1) fprintf(stderr, "%s\n", line);
    pthread_mutex_lock(&warn_mu);
    if (warn_sb.len < WARN_TEXT_MAX) lt_sb_printf(&warn_sb, "%s\n", line);
    pthread_mutex_unlock(&warn_mu);
    lt_metrics_note("warnings", line);
}

char *lt_diagnose_take_warnings(void)
{
    pthread_mutex_lock(&warn_mu);
    char *s = warn_sb.len ? lt_sb_take(&warn_sb) : NULL;
    memset(&warn_sb, 0, sizeof warn_sb);
    pthread_mutex_unlock(&warn_mu);
    if (!s) s = calloc(1, 1);
    return s;
}

/* -------------------------------------------------- recompilation analysis */

/* Per structure key: the last compiled key, its parameter shapes/dtypes and
 * its signature (op and attribute hash per node, post-order). */
typedef struct recomp_entry {
    uint64_t struct_key, key;
    int n_params;
    lt_shape *shapes;
    uint8_t *dtypes;
    int n_nodes;
    uint16_t *ops;
    uint32_t *ahash;
    int mm_precision;                  /* the graph's lt_matmul_precision */
    struct recomp_entry *next;
} recomp_entry;

/* A site: where graphs come from (core, cause, caller frame). */
typedef struct site {
    uint64_t site_key, struct_key;
    int64_t used;
} site;

#define RECOMP_BUCKETS 256
#define RECOMP_MAX_ENTRIES 4096
#define SIG_MAX_NODES (1 << 20)
#define N_SITES 64

static pthread_mutex_t recomp_mu = PTHREAD_MUTEX_INITIALIZER;
static recomp_entry *recomp_tab[RECOMP_BUCKETS];
static int recomp_count;
static size_t sig_bytes;               /* signature memory, bounded */
#define SIG_BYTES_MAX ((size_t)64 << 20)
static site sites[N_SITES];
static int64_t site_clock;

static void entry_free(recomp_entry *e)
{
    if (e->n_nodes > 0) sig_bytes -= (size_t)e->n_nodes * 6;
    free(e->shapes);
    free(e->dtypes);
    free(e->ops);
    free(e->ahash);
    free(e);
}

static uint32_t attr_hash(const lt_node *n)
{
    uint64_t h = lt_hash_mix(0x41u, (uint64_t)n->attrs.n);
    for (int i = 0; i < n->attrs.n; i++) h = lt_hash_mix(h, (uint64_t)n->attrs.i[i]);
    uint64_t f[2];
    memcpy(f, n->attrs.f, sizeof f);
    h = lt_hash_mix(lt_hash_mix(h, f[0]), f[1]);
    return (uint32_t)(h ^ (h >> 32));
}

static recomp_entry *find_entry(uint64_t sk)
{
    recomp_entry *e = recomp_tab[sk % RECOMP_BUCKETS];
    while (e && e->struct_key != sk) e = e->next;
    return e;
}

/* Fills e from g (frees what e had). Leaves n_params = -1 on malloc failure. */
static void entry_fill(recomp_entry *e, const lt_graph *g)
{
    free(e->shapes);
    free(e->dtypes);
    free(e->ops);
    free(e->ahash);
    if (e->n_nodes > 0) sig_bytes -= (size_t)e->n_nodes * 6;
    e->ops = NULL;
    e->ahash = NULL;
    e->key = g->key;
    e->mm_precision = g->mm_precision;
    e->n_params = g->n_params;
    e->shapes = malloc((size_t)(g->n_params ? g->n_params : 1) * sizeof *e->shapes);
    e->dtypes = malloc((size_t)(g->n_params ? g->n_params : 1));
    int nn = g->n_nodes < SIG_MAX_NODES ? g->n_nodes : SIG_MAX_NODES;
    e->n_nodes = -1;                    /* no signature kept */
    if (sig_bytes + (size_t)nn * 6 <= SIG_BYTES_MAX) {
        e->ops = malloc((size_t)(nn ? nn : 1) * sizeof *e->ops);
        e->ahash = malloc((size_t)(nn ? nn : 1) * sizeof *e->ahash);
        if (e->ops && e->ahash) {
            e->n_nodes = nn;
            sig_bytes += (size_t)nn * 6;
        }
    }
    if (!e->shapes || !e->dtypes) {
        e->n_params = -1;
        return;
    }
    for (int k = 0; k < g->n_params; k++) {
        const lt_node *n = g->nodes[g->param_pos[k]];
        e->shapes[k] = n->shape;
        e->dtypes[k] = n->dtype;
    }
    for (int i = 0; i < e->n_nodes; i++) {
        e->ops[i] = g->nodes[i]->op;
        e->ahash[i] = attr_hash(g->nodes[i]);
    }
}

/* First position where g differs from e's signature, and a description. */
static void describe_struct_diff(const recomp_entry *e, const lt_graph *g,
                                 char *out, size_t cap)
{
    if (e->n_nodes < 0 || e->n_nodes >= SIG_MAX_NODES) {
        snprintf(out, cap, "structure changed (graph of %d nodes; no signature kept)",
                 g->n_nodes);
        return;
    }
    int nn = g->n_nodes < e->n_nodes ? g->n_nodes : e->n_nodes;
    for (int i = 0; i < nn; i++) {
        const lt_node *n = g->nodes[i];
        if (n->op != e->ops[i]) {
            snprintf(out, cap, "structure changed: first differing op at position %d: %s vs %s",
                     i, lt_op_name((lt_op)e->ops[i]), lt_op_name((lt_op)n->op));
            return;
        }
        if (attr_hash(n) != e->ahash[i]) {
            char at[96];
            size_t p = 0;
            at[0] = 0;
            for (int k = 0; k < n->attrs.n && p + 24 < sizeof at; k++)
                p += (size_t)snprintf(at + p, sizeof at - p, "%s%lld", k ? ", " : "",
                                      (long long)n->attrs.i[k]);
            snprintf(out, cap,
                     "structure changed: first differing op at position %d: %s vs %s "
                     "(attributes now [%s])",
                     i, lt_op_name((lt_op)e->ops[i]), lt_op_name((lt_op)n->op), at);
            return;
        }
    }
    if (g->n_nodes != e->n_nodes) {
        snprintf(out, cap,
                 "structure changed: first differing op at position %d: %s vs %s "
                 "(%d nodes vs %d)",
                 nn, nn < e->n_nodes ? lt_op_name((lt_op)e->ops[nn]) : "<end>",
                 nn < g->n_nodes ? lt_op_name((lt_op)g->nodes[nn]->op) : "<end>",
                 e->n_nodes, g->n_nodes);
        return;
    }
    snprintf(out, cap, "structure changed: outputs or parameter aliasing differ");
}

/* Per-core step state. */
typedef struct step_state {
    int64_t steps;                     /* step boundaries seen */
    int64_t cur_compiles, cur_reads;   /* since the last boundary */
    int64_t win_compiles[LT_DIAG_WINDOW], win_reads[LT_DIAG_WINDOW];
    double win_wait[LT_DIAG_WINDOW], win_wall[LT_DIAG_WINDOW];
    int64_t last_step_ns;
    double last_wait_acc;
    char last_why[320];                /* last recompilation reason */
    int last_why_kind;                 /* 1 shapes, 2 structure, 3 eviction, 0 new graph */
    char last_read_frame[256];
    int64_t warned_at[4];              /* step of the last warning per kind */
} step_state;

static pthread_mutex_t step_mu = PTHREAD_MUTEX_INITIALIZER;
static step_state steps_tab[LT_RT_MAX_CORES];

static step_state *core_state(int core)
{
    if (core < 0 || core >= LT_RT_MAX_CORES) core = 0;
    return &steps_tab[core];
}

void lt_diagnose_compile(const lt_graph *g, lt_sync_cause cause, const char *frame)
{
    lt_diagnose_compile_at(g, cause, frame, 1);
}

void lt_diagnose_compile_at(const lt_graph *g, lt_sync_cause cause, const char *frame,
                            int by_site)
{
    char why[320], line[LT_NOTE_LINE_MAX], a[128], b[128];
    int kind = 0;
    why[0] = 0;
    if (!frame) frame = "";
    uint64_t sk = lt_hash_bytes(lt_hash_mix(lt_hash_mix(0x53495445u, (uint64_t)g->core), cause),
                                frame, strlen(frame));

    pthread_mutex_lock(&recomp_mu);
    recomp_entry *e = find_entry(g->struct_key);
    site *s = NULL, *lru = &sites[0];
    for (int i = 0; i < N_SITES && by_site; i++) {
        if (sites[i].used && sites[i].site_key == sk) { s = &sites[i]; break; }
        if (sites[i].used < lru->used) lru = &sites[i];
    }
    if (e) {
        if (e->key == g->key) {
            snprintf(why, sizeof why, "evicted from the compile cache (LAZYTPU_COMPILE_CACHE_SIZE)");
            kind = 3;
        } else if (e->mm_precision != g->mm_precision) {
            const char *was = lt_matmul_precision_name((lt_matmul_precision)e->mm_precision);
            const char *now = lt_matmul_precision_name((lt_matmul_precision)g->mm_precision);
            snprintf(why, sizeof why, "matmul precision %s -> %s", was ? was : "?",
                     now ? now : "?");
            kind = 2;
        } else {
            int j = -1;
            if (e->n_params == g->n_params) {
                for (int k = 0; k < g->n_params; k++) {
                    const lt_node *n = g->nodes[g->param_pos[k]];
                    if (!lt_shape_equal(&n->shape, &e->shapes[k]) || n->dtype != e->dtypes[k]) {
                        j = k;
                        break;
                    }
                }
            }
            if (j >= 0) {
                const lt_node *n = g->nodes[g->param_pos[j]];
                if (n->dtype != e->dtypes[j])
                    snprintf(why, sizeof why, "input %d %s%s -> %s%s", j,
                             lt_dtype_name((lt_dtype)e->dtypes[j]),
                             lt_shape_str(&e->shapes[j], a, sizeof a),
                             lt_dtype_name((lt_dtype)n->dtype), lt_shape_str(&n->shape, b, sizeof b));
                else
                    snprintf(why, sizeof why, "input %d (%s) %s -> %s", j,
                             lt_dtype_name((lt_dtype)n->dtype),
                             lt_shape_str(&e->shapes[j], a, sizeof a),
                             lt_shape_str(&n->shape, b, sizeof b));
                kind = 1;
            } else if (e->n_params >= 0) {
                describe_struct_diff(e, g, why, sizeof why);
                kind = 2;
            }
        }
    } else if (s && s->struct_key != g->struct_key) {
        recomp_entry *prev = find_entry(s->struct_key);
        if (prev && prev->n_params >= 0) {
            describe_struct_diff(prev, g, why, sizeof why);
            kind = 2;
        }
    }
    if (!e && recomp_count < RECOMP_MAX_ENTRIES) {
        e = calloc(1, sizeof *e);
        if (e) {
            e->struct_key = g->struct_key;
            e->next = recomp_tab[g->struct_key % RECOMP_BUCKETS];
            recomp_tab[g->struct_key % RECOMP_BUCKETS] = e;
            recomp_count++;
        }
    }
    if (e) entry_fill(e, g);
    if (by_site) {
        if (!s) {
            s = lru;
            s->site_key = sk;
        }
        s->struct_key = g->struct_key;
        s->used = ++site_clock;
    }
    pthread_mutex_unlock(&recomp_mu);

    pthread_mutex_lock(&step_mu);
    step_state *st = core_state(g->core);
    st->cur_compiles++;
    if (why[0]) {
        snprintf(st->last_why, sizeof st->last_why, "%s", why);
        st->last_why_kind = kind;
    } else if (st->steps >= LT_DIAG_WARMUP_STEPS) {
        snprintf(st->last_why, sizeof st->last_why, "new graph %016llx",
                 (unsigned long long)g->key);
        st->last_why_kind = 0;
    }
    pthread_mutex_unlock(&step_mu);

    if (why[0]) {
        snprintf(line, sizeof line, "recompiled: graph %016llx %s; cause %s; at %s",
                 (unsigned long long)g->key, why, lt_sync_cause_name(cause),
                 frame[0] ? frame : "<unknown>");
        char cname[64];
        snprintf(cname, sizeof cname, "Recompilation::%s", lt_sync_cause_name(cause));
        lt_counter_inc_name(cname, 1);
        lt_metrics_note("recompilation", line);
    }
}

void lt_diagnose_value_read(int core, const char *frame)
{
    pthread_mutex_lock(&step_mu);
    step_state *st = core_state(core);
    st->cur_reads++;
    if (frame && frame[0])
        snprintf(st->last_read_frame, sizeof st->last_read_frame, "%s", frame);
    pthread_mutex_unlock(&step_mu);
}

/* ---------------------------------------------------------------- fallback */

#define FB_MAX_OPS 512
#define FB_FRAMES 3

typedef struct fb_op {
    char name[96];
    int64_t calls, ns;
    int n_frames;
    char frames[FB_FRAMES][160];
    int warned;                  /* named in a warning already */
} fb_op;

static pthread_mutex_t fb_mu = PTHREAD_MUTEX_INITIALIZER;
static fb_op *fb_ops;            /* FB_MAX_OPS entries, allocated on first use */
static int fb_n;

void lt_fallback_record(const char *aten_op, int64_t ns, const char *frame)
{
    if (!aten_op || !aten_op[0]) return;
    pthread_mutex_lock(&fb_mu);
    if (!fb_ops) fb_ops = calloc(FB_MAX_OPS, sizeof *fb_ops);
    fb_op *o = NULL;
    for (int i = 0; fb_ops && i < fb_n; i++)
        if (strncmp(fb_ops[i].name, aten_op, sizeof fb_ops[i].name - 1) == 0) {
            o = &fb_ops[i];
            break;
        }
    if (!o && fb_ops && fb_n < FB_MAX_OPS) {
        o = &fb_ops[fb_n++];
        snprintf(o->name, sizeof o->name, "%s", aten_op);
    }
    if (o) {
        o->calls++;
        if (ns > 0 && __builtin_add_overflow(o->ns, ns, &o->ns))
            o->ns = INT64_MAX;            /* saturate: ns is the caller's */
        if (frame && frame[0] && o->n_frames < FB_FRAMES) {
            int seen = 0;
            for (int k = 0; k < o->n_frames; k++)
                if (strncmp(o->frames[k], frame, sizeof o->frames[k] - 1) == 0) seen = 1;
            if (!seen) snprintf(o->frames[o->n_frames++], sizeof o->frames[0], "%s", frame);
        }
    }
    pthread_mutex_unlock(&fb_mu);
}

/* What to use instead of op (NULL if we know nothing useful). `buf` holds a
 * generated hint for ops lazytpu traces natively. */
static const char *fb_hint(const char *name, char *buf, size_t cap)
{
    static const struct { const char *op, *hint; } known[] = {
        {"nonzero", "output size depends on the data; use torch.where(mask, x, 0) or a mask multiply"},
        {"argwhere", "output size depends on the data; use torch.where(mask, x, 0) or a mask multiply"},
        {"masked_select", "output size depends on the data; use torch.where(mask, x, 0) then sum/mean"},
        {"masked_scatter", "use torch.where(mask, source, x) with a source of x's shape"},
        {"unique", "output size depends on the data; compute it once on the CPU outside the step"},
        {"_unique2", "output size depends on the data; compute it once on the CPU outside the step"},
        {"unique_consecutive", "output size depends on the data; compute it outside the step"},
        {"bincount", "use one_hot(x, n).sum(0) (fixed size n)"},
        {"histc", "use one_hot of the bucket index, summed (fixed size)"},
        {"_local_scalar_dense", ".item() reads a value each call; use lazytpu.add_step_closure"},
        {"repeat_interleave", "with tensor repeats the size depends on the data; use a fixed repeat count"},
        {"index_put", "boolean-mask assignment; use torch.where(mask, value, x)"},
        {"_index_put_impl_", "boolean-mask assignment; use torch.where(mask, value, x)"},
    };
    const char *b = strncmp(name, "aten::", 6) == 0 ? name + 6 : name;
    char base[96];
    size_t n = strcspn(b, ".");
    if (n >= sizeof base) n = sizeof base - 1;
    memcpy(base, b, n);
    base[n] = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(base, known[i].op) == 0) return known[i].hint;
    /* strip a trailing '_' (in-place variant) before asking the op table */
    char plain[96];
    snprintf(plain, sizeof plain, "%s", base);
    size_t pl = strlen(plain);
    if (pl > 1 && plain[pl - 1] == '_') plain[pl - 1] = 0;
    if (lt_op_from_name(plain) >= 0) {
        snprintf(buf, cap,
                 "lazytpu traces %s natively: this overload or dtype is not wired to it; "
                 "please report it", plain);
        return buf;
    }
    return NULL;
}

static int fb_cmp(const void *a, const void *b)
{
    const fb_op *x = a, *y = b;
    if (x->calls != y->calls) return x->calls > y->calls ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* "== fallback ==" in the report after the notes (metrics/report.h), before
 * host_reads.c's section. */
__attribute__((constructor)) static void register_fallback_report(void)
{
    lt_report_section_add(LT_REPORT_ANALYSIS, 10, lt_fallback_report);
}

char *lt_fallback_report(void)
{
    lt_sb sb = {0};
    pthread_mutex_lock(&fb_mu);
    int n = fb_n;
    fb_op *copy = n ? malloc((size_t)n * sizeof *copy) : NULL;
    if (copy) memcpy(copy, fb_ops, (size_t)n * sizeof *copy);
    pthread_mutex_unlock(&fb_mu);
    if (!copy) return calloc(1, 1);
    qsort(copy, (size_t)n, sizeof *copy, fb_cmp);
    lt_sb_puts(&sb, "== fallback ==\n");
    for (int i = 0; i < n; i++) {
        fb_op *o = &copy[i];
        char t[64], hb[256];
        lt_sb_printf(&sb, "%s: %lld call%s, %s total", o->name, (long long)o->calls,
                     o->calls == 1 ? "" : "s", lt_fmt_time((double)o->ns, t, sizeof t));
        if (o->n_frames > 0) {
            lt_sb_printf(&sb, ", first at %s", o->frames[0]);
            for (int k = 1; k < o->n_frames; k++)
                lt_sb_printf(&sb, "%s%s", k == 1 ? "; also at " : ", ", o->frames[k]);
        }
        lt_sb_puts(&sb, "\n");
        const char *h = fb_hint(o->name, hb, sizeof hb);
        if (h) lt_sb_printf(&sb, "  hint: %s\n", h);
    }
    free(copy);
    char *s = lt_sb_take(&sb);
    return s ? s : calloc(1, 1);
}

/* "aten::nonzero (at f.py:3; hint)" for ops not warned about yet; marks them. */
static void fb_new_ops(lt_sb *sb)
{
    pthread_mutex_lock(&fb_mu);
    int k = 0;
    for (int i = 0; i < fb_n; i++) {
        fb_op *o = &fb_ops[i];
        if (o->warned) continue;
        o->warned = 1;
        char hb[256];
        const char *h = fb_hint(o->name, hb, sizeof hb);
        lt_sb_printf(sb, "%s%s", k++ ? ", " : "", o->name);
        if (o->n_frames || h) {
            lt_sb_puts(sb, " (");
            if (o->n_frames) lt_sb_printf(sb, "at %s%s", o->frames[0], h ? "; " : "");
            if (h) lt_sb_puts(sb, h);
            lt_sb_puts(sb, ")");
        }
    }
    pthread_mutex_unlock(&fb_mu);
}

/* ---------------------------------------------------------------- warnings */

enum { W_COMPILE, W_READ, W_FALLBACK, W_LOADER };

#define LOADER_WAIT_FRACTION 0.2
#define LOADER_WAIT_MIN_NS 1e6

static int may_warn(step_state *st, int kind)
{
    if (st->warned_at[kind] && st->steps - st->warned_at[kind] < LT_DIAG_WINDOW) return 0;
    st->warned_at[kind] = st->steps;
    return 1;
}

void lt_diagnose_step(int core)
{
    lt_host_read_step();
    int64_t now = lt_now_ns();
    double wait_acc = 0;
    int64_t wn = 0;
    int on = lt_debug_enabled();
    if (on) lt_metric_data("LoaderWaitTime", &wn, &wait_acc);
    char lines[3][768];
    int nl = 0;

    pthread_mutex_lock(&step_mu);
    step_state *st = core_state(core);
    int slot = (int)(st->steps % LT_DIAG_WINDOW);
    st->win_compiles[slot] = st->cur_compiles;
    st->win_reads[slot] = st->cur_reads;
    st->win_wait[slot] = st->steps && st->last_step_ns ? wait_acc - st->last_wait_acc : 0;
    if (st->win_wait[slot] < 0) st->win_wait[slot] = 0;   /* metrics were cleared */
    st->win_wall[slot] = st->last_step_ns ? (double)(now - st->last_step_ns) : 0;
    st->last_wait_acc = wait_acc;
    st->last_step_ns = on ? now : 0;   /* off: no baseline for rates */
    st->cur_compiles = st->cur_reads = 0;
    st->steps++;
    int after = (int)(st->steps - LT_DIAG_WARMUP_STEPS);
    int check_fb = 0;
    if (on && after > 0) {
        int nw = after < LT_DIAG_WINDOW ? after : LT_DIAG_WINDOW;
        int64_t c = 0, r = 0;
        double w = 0, wall = 0;
        for (int i = 0; i < nw; i++) {
            int q = (int)((st->steps - 1 - i) % LT_DIAG_WINDOW);
            c += st->win_compiles[q];
            r += st->win_reads[q];
            w += st->win_wait[q];
            wall += st->win_wall[q];
        }
        int full = nw == LT_DIAG_WINDOW;   /* rates only over a full window */
        if (full && (double)c / nw > 0.5 && may_warn(st, W_COMPILE)) {
            const char *what;
            char detail[400];
            switch (st->last_why_kind) {
            case 1:
                what = "shapes change between steps";
                snprintf(detail, sizeof detail, " (%s); pad or bucket shapes, or use "
                         "drop_last=True in the DataLoader", st->last_why);
                break;
            case 2:
                what = "the graph structure changes between steps";
                snprintf(detail, sizeof detail, " (%s); keep Python control flow that "
                         "depends on the step or on tensor values out of the traced step",
                         st->last_why);
                break;
            case 3:
                what = "compiled graphs are evicted from the compile cache";
                snprintf(detail, sizeof detail, "; raise LAZYTPU_COMPILE_CACHE_SIZE");
                break;
            default:
                what = "every step traces a new graph";
                snprintf(detail, sizeof detail, " (%s); look for step-dependent Python "
                         "values or control flow in the step", st->last_why);
            }
            snprintf(lines[nl++], sizeof lines[0],
                     "lazytpu: warning: %lld compile%s in the last %d steps: %s%s. "
                     "See docs/troubleshooting.md#recompilation",
                     (long long)c, c == 1 ? "" : "s", nw, what, detail);
        }
        if (full && (double)r / nw > 0.5 && may_warn(st, W_READ)) {
            snprintf(lines[nl++], sizeof lines[0],
                     "lazytpu: warning: %lld host reads in the last %d steps "
                     "(.item()/.cpu()/print of a device tensor, last at %s): each one "
                     "makes the host wait for the device (and stops tracing to run the "
                     "graph if the value is not computed yet); log with "
                     "lazytpu.add_step_closure(fn) or read values every N steps. "
                     "See docs/troubleshooting.md#value-reads",
                     (long long)r, nw, st->last_read_frame[0] ? st->last_read_frame : "<unknown>");
        }
        if (full && w > LOADER_WAIT_MIN_NS * nw && w > LOADER_WAIT_FRACTION * wall &&
            may_warn(st, W_LOADER)) {
            char t[64];
            double pct = wall > 0 ? 100.0 * w / wall : 100.0;
            if (pct > 100.0) pct = 100.0;
            snprintf(lines[nl++], sizeof lines[0],
                     "lazytpu: warning: steps waited %s for input in the last %d steps "
                     "(%.0f%% of the step time): the input pipeline is slower than the "
                     "core; raise the DataLoader's num_workers, prefetch with "
                     "lazytpu.loader.MpDeviceLoader, or move preprocessing out of the "
                     "step. See docs/troubleshooting.md#input-pipeline",
                     lt_fmt_time(w, t, sizeof t), nw, pct);
        }
        check_fb = 1;
    }
    pthread_mutex_unlock(&step_mu);

    for (int i = 0; i < nl; i++) emit_warning(lines[i]);
    if (check_fb) {
        lt_sb sb = {0};
        fb_new_ops(&sb);
        if (sb.len > 0) {
            char *ops = lt_sb_take(&sb);
            lt_sb o = {0};
            lt_sb_printf(&o, "lazytpu: warning: new CPU fallback ops: %s: each call copies "
                         "its inputs to the host and back; use the native alternative or "
                         "report the op. See docs/troubleshooting.md#cpu-fallbacks",
                         ops ? ops : "");
            free(ops);
            char *line = lt_sb_take(&o);
            if (line) emit_warning(line);
            free(line);
        } else {
            free(lt_sb_take(&sb));
        }
    }
}

/* ------------------------------------------------------------------ reset */

void lt_diagnose_reset(void)
{
    pthread_mutex_lock(&recomp_mu);
    for (int b = 0; b < RECOMP_BUCKETS; b++) {
        recomp_entry *e = recomp_tab[b];
        while (e) {
            recomp_entry *nx = e->next;
            entry_free(e);
            e = nx;
        }
        recomp_tab[b] = NULL;
    }
    recomp_count = 0;
    sig_bytes = 0;
    memset(sites, 0, sizeof sites);
    site_clock = 0;
    pthread_mutex_unlock(&recomp_mu);

    pthread_mutex_lock(&step_mu);
    memset(steps_tab, 0, sizeof steps_tab);
    pthread_mutex_unlock(&step_mu);

    pthread_mutex_lock(&fb_mu);
    free(fb_ops);
    fb_ops = NULL;
    fb_n = 0;
    pthread_mutex_unlock(&fb_mu);

    lt_host_read_reset();
    free(lt_diagnose_take_warnings());
}
