/* metrics/registry.c — the metrics registry: interned counters, metrics with
 * sample rings, note sections. See registry.h for the design. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "registry.h"

#define COUNTER_CAP 4096   /* power of two; max distinct counter names */
#define METRIC_CAP 512     /* power of two; max distinct metric names */

struct lt_counter {
    const char *name;
    uint64_t hash;
    _Atomic int64_t value;
};

struct lt_metric {
    const char *name;
    uint64_t hash;
    lt_metric_unit unit;
    pthread_mutex_t mu;
    int64_t total;
    double acc;
    int head;              /* next slot to write */
    int count;             /* kept samples */
    double vals[LT_METRIC_RING];
    int64_t ts[LT_METRIC_RING];
};

const double lt_metric_percentiles[LT_NUM_PERCENTILES] = {
    0.01, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99};

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct lt_counter *) counters[COUNTER_CAP];
static _Atomic(struct lt_metric *) metrics[METRIC_CAP];
static atomic_int n_counters, n_metrics;

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int64_t lt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ------------------------------------------------------------- counters */

/* Lock-free probe: the counter named `name`, or NULL with *slot_out set to
 * the first empty slot of the probe sequence (-1 if the table is full). */
static struct lt_counter *counter_find(const char *name, uint64_t h,
                                       int *slot_out)
{
    for (int k = 0; k < COUNTER_CAP; k++) {
        int slot = (int)((h + (uint64_t)k) & (COUNTER_CAP - 1));
        struct lt_counter *c = atomic_load_explicit(&counters[slot],
                                                    memory_order_acquire);
        if (!c) {
            if (slot_out) *slot_out = slot;
            return NULL;
        }
        if (c->hash == h && strcmp(c->name, name) == 0) return c;
    }
    if (slot_out) *slot_out = -1;
    return NULL;
}

/* Returns the counter (created with value 0 if absent); NULL if name is NULL,
 * the table is full or malloc fails. The pointer is valid forever. */
lt_counter *lt_counter_get(const char *name)
{
    if (!name) return NULL;
    uint64_t h = name_hash(name);
    struct lt_counter *c = counter_find(name, h, NULL);
    if (c) return c;
    pthread_mutex_lock(&create_mu);
    int slot;
    c = counter_find(name, h, &slot);   /* re-check under the lock */
    if (!c && slot >= 0) {
        c = calloc(1, sizeof *c);
        char *nm = c ? strdup(name) : NULL;
        if (!nm) {
            free(c);
            c = NULL;
        } else {
            c->name = nm;
            c->hash = h;
            atomic_init(&c->value, 0);
            atomic_store_explicit(&counters[slot], c, memory_order_release);
            atomic_fetch_add(&n_counters, 1);
        }
    }
    pthread_mutex_unlock(&create_mu);
    return c;
}

/* Adds delta atomically; NULL-safe (a full table degrades to no counting). */
void lt_counter_add(lt_counter *c, int64_t delta)
{
    if (c) atomic_fetch_add_explicit(&c->value, delta, memory_order_relaxed);
}

void lt_counter_inc_name(const char *name, int64_t delta)
{
    lt_counter_add(lt_counter_get(name), delta);
}

/* Current value; 0 if the counter does not exist (it is not created). */
int64_t lt_counter_value(const char *name)
{
    if (!name) return 0;
    struct lt_counter *c = counter_find(name, name_hash(name), NULL);
    return c ? atomic_load_explicit(&c->value, memory_order_relaxed) : 0;
}

/* -------------------------------------------------------------- metrics */

static struct lt_metric *metric_find(const char *name, uint64_t h,
                                     int *slot_out)
{
    for (int k = 0; k < METRIC_CAP; k++) {
        int slot = (int)((h + (uint64_t)k) & (METRIC_CAP - 1));
        struct lt_metric *m = atomic_load_explicit(&metrics[slot],
                                                   memory_order_acquire);
        if (!m) {
            if (slot_out) *slot_out = slot;
            return NULL;
        }
        if (m->hash == h && strcmp(m->name, name) == 0) return m;
    }
    if (slot_out) *slot_out = -1;
    return NULL;
}

/* Returns the metric (created if absent; the unit of the first call wins);
 * NULL if name is NULL, the table is full or malloc fails. */
lt_metric *lt_metric_get(const char *name, lt_metric_unit unit)
{
    if (!name) return NULL;
    uint64_t h = name_hash(name);
    struct lt_metric *m = metric_find(name, h, NULL);
    if (m) return m;
    pthread_mutex_lock(&create_mu);
    int slot;
    m = metric_find(name, h, &slot);
    if (!m && slot >= 0) {
        m = calloc(1, sizeof *m);
        char *nm = m ? strdup(name) : NULL;
        if (!nm) {
            free(m);
            m = NULL;
        } else {
            m->name = nm;
            m->hash = h;
            m->unit = unit;
            pthread_mutex_init(&m->mu, NULL);
            atomic_store_explicit(&metrics[slot], m, memory_order_release);
            atomic_fetch_add(&n_metrics, 1);
        }
    }
    pthread_mutex_unlock(&create_mu);
    return m;
}

/* Records one sample stamped now; NULL-safe. */
void lt_metric_add(lt_metric *m, double value)
{
    if (!m) return;
    int64_t now = lt_now_ns();
    pthread_mutex_lock(&m->mu);
    m->vals[m->head] = value;
    m->ts[m->head] = now;
    m->head = (m->head + 1) % LT_METRIC_RING;
    if (m->count < LT_METRIC_RING) m->count++;
    m->total++;
    m->acc += value;
    pthread_mutex_unlock(&m->mu);
}

/* Returns 0 and fills the outputs (either may be NULL) if the metric exists,
 * -1 otherwise (outputs then set to 0). */
int lt_metric_data(const char *name, int64_t *total_samples,
                   double *accumulator)
{
    struct lt_metric *m = name ? metric_find(name, name_hash(name), NULL)
                               : NULL;
    int64_t t = 0;
    double a = 0;
    if (m) {
        pthread_mutex_lock(&m->mu);
        t = m->total;
        a = m->acc;
        pthread_mutex_unlock(&m->mu);
    }
    if (total_samples) *total_samples = t;
    if (accumulator) *accumulator = a;
    return m ? 0 : -1;
}

static void notes_clear(void);

int lt_metric_samples(const char *name, double *vals, int64_t *ts_ns, int cap)
{
    struct lt_metric *m = name ? metric_find(name, name_hash(name), NULL)
                               : NULL;
    if (!m) return -1;
    pthread_mutex_lock(&m->mu);
    int n = m->count < cap ? m->count : cap;
    /* the newest n samples end just before head */
    int start = m->head - n;
    for (int i = 0; i < n; i++) {
        int k = ((start + i) % LT_METRIC_RING + LT_METRIC_RING) % LT_METRIC_RING;
        if (vals) vals[i] = m->vals[k];
        if (ts_ns) ts_ns[i] = m->ts[k];
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}

void lt_metrics_clear_counters(void)
{
    for (int i = 0; i < COUNTER_CAP; i++) {
        struct lt_counter *c = atomic_load(&counters[i]);
        if (c) atomic_store(&c->value, 0);
    }
}

void lt_metrics_clear_metrics(void)
{
    for (int i = 0; i < METRIC_CAP; i++) {
        struct lt_metric *m = atomic_load(&metrics[i]);
        if (!m) continue;
        pthread_mutex_lock(&m->mu);
        m->total = 0;
        m->acc = 0;
        m->head = 0;
        m->count = 0;
        pthread_mutex_unlock(&m->mu);
    }
}

void lt_metrics_clear_all(void)
{
    lt_metrics_clear_counters();
    lt_metrics_clear_metrics();
    notes_clear();
}

/* ------------------------------------------------------------ snapshots */

static const char *const report_first[] = {
    "CompileTime", "ExecuteTime", "TransferToDeviceTime",
    "TransferFromDeviceTime", "TensorsGraphSize", "InboundData",
    "OutboundData"};
#define N_FIRST ((int)(sizeof report_first / sizeof report_first[0]))

static int report_rank(const char *name)
{
    for (int i = 0; i < N_FIRST; i++)
        if (strcmp(name, report_first[i]) == 0) return i;
    return N_FIRST;
}

static int snap_cmp(const void *a, const void *b)
{
    const lt_metric_snap *x = a, *y = b;
    int rx = report_rank(x->name), ry = report_rank(y->name);
    if (rx != ry) return rx < ry ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int lt_metric_snaps(lt_metric_snap **out)
{
    int cap = atomic_load(&n_metrics) + 1, n = 0;
    lt_metric_snap *s = calloc((size_t)cap, sizeof *s);
    if (!s) return -1;
    for (int i = 0; i < METRIC_CAP && n < cap; i++) {
        struct lt_metric *m = atomic_load(&metrics[i]);
        if (!m) continue;
        lt_metric_snap *d = &s[n];
        double *v = malloc(sizeof(double) * LT_METRIC_RING);
        if (!v) {
            lt_metric_snaps_free(s, n);
            return -1;
        }
        d->name = m->name;
        d->unit = m->unit;
        d->sorted = v;
        pthread_mutex_lock(&m->mu);
        d->total_samples = m->total;
        d->accumulator = m->acc;
        d->n = m->count;
        int oldest = (m->head - m->count + LT_METRIC_RING) % LT_METRIC_RING;
        int newest = (m->head - 1 + LT_METRIC_RING) % LT_METRIC_RING;
        d->first_ns = m->count ? m->ts[oldest] : 0;
        d->last_ns = m->count ? m->ts[newest] : 0;
        for (int k = 0; k < m->count; k++)
            v[k] = m->vals[(oldest + k) % LT_METRIC_RING];
        pthread_mutex_unlock(&m->mu);
        d->window_sum = 0;
        for (int k = 0; k < d->n; k++) d->window_sum += v[k];
        qsort(v, (size_t)d->n, sizeof(double), dbl_cmp);
        n++;
    }
    qsort(s, (size_t)n, sizeof *s, snap_cmp);
    *out = s;
    return n;
}

void lt_metric_snaps_free(lt_metric_snap *s, int n)
{
    if (!s) return;
    for (int i = 0; i < n; i++) free(s[i].sorted);
    free(s);
}

int lt_metric_snap_rates(const lt_metric_snap *s, double *value_per_sec,
                         double *samples_per_sec)
{
    int64_t dt = s->last_ns - s->first_ns;
    if (s->n == 0 || dt <= 0) return 0;
    double sec = (double)dt * 1e-9;
    if (value_per_sec) *value_per_sec = s->window_sum / sec;
    if (samples_per_sec) *samples_per_sec = (double)s->n / sec;
    return 1;
}

double lt_metric_snap_percentile(const lt_metric_snap *s, double p)
{
    if (s->n == 0) return NAN;
    size_t idx = (size_t)(p * (double)s->n);
    if (idx >= (size_t)s->n) idx = (size_t)s->n - 1;
    return s->sorted[idx];
}

static int csnap_cmp(const void *a, const void *b)
{
    return strcmp(((const lt_counter_snap *)a)->name,
                  ((const lt_counter_snap *)b)->name);
}

int lt_counter_snaps(lt_counter_snap **out)
{
    int cap = atomic_load(&n_counters) + 1, n = 0;
    lt_counter_snap *s = calloc((size_t)cap, sizeof *s);
    if (!s) return -1;
    for (int i = 0; i < COUNTER_CAP && n < cap; i++) {
        struct lt_counter *c = atomic_load(&counters[i]);
        if (!c) continue;
        s[n].name = c->name;
        s[n].value = atomic_load_explicit(&c->value, memory_order_relaxed);
        n++;
    }
    qsort(s, (size_t)n, sizeof *s, csnap_cmp);
    *out = s;
    return n;
}

/* ---------------------------------------------------------------- names */

/* Newline-separated counter names sorted by name; malloc'd; NULL on malloc
 * failure. */
char *lt_counter_names(void)
{
    lt_counter_snap *s;
    int n = lt_counter_snaps(&s);
    if (n < 0) return NULL;
    lt_sb sb = {0};
    for (int i = 0; i < n; i++) lt_sb_printf(&sb, "%s\n", s[i].name);
    free(s);
    return lt_sb_take(&sb);
}

/* Newline-separated metric names in report order; malloc'd; NULL on malloc
 * failure. */
char *lt_metric_names(void)
{
    lt_metric_snap *s;
    int n = lt_metric_snaps(&s);
    if (n < 0) return NULL;
    lt_sb sb = {0};
    for (int i = 0; i < n; i++) lt_sb_printf(&sb, "%s\n", s[i].name);
    lt_metric_snaps_free(s, n);
    return lt_sb_take(&sb);
}

/* ---------------------------------------------------------------- notes */

typedef struct note_section {
    char name[64];
    int64_t added;                    /* lines ever added since clear */
    char *lines[LT_NOTE_RING];        /* ring, malloc'd lines */
} note_section;

static pthread_mutex_t notes_mu = PTHREAD_MUTEX_INITIALIZER;
static note_section sections[LT_NOTE_SECTIONS];
static int n_sections;

/* Appends a line (copied, truncated to LT_NOTE_LINE_MAX) to `section`
 * (created on first use; "" when NULL). Silently dropped when all
 * LT_NOTE_SECTIONS are taken or malloc fails. */
void lt_metrics_note(const char *section, const char *line)
{
    if (!section) section = "";
    if (!line) line = "";
    size_t len = strnlen(line, LT_NOTE_LINE_MAX - 1);
    char *copy = malloc(len + 1);
    if (!copy) return;
    memcpy(copy, line, len);
    copy[len] = 0;
    pthread_mutex_lock(&notes_mu);
    note_section *sec = NULL;
    for (int i = 0; i < n_sections; i++)
        if (strncmp(sections[i].name, section, sizeof sections[i].name - 1) == 0) {
            sec = &sections[i];
            break;
        }
    if (!sec && n_sections < LT_NOTE_SECTIONS) {
        sec = &sections[n_sections++];
        memset(sec, 0, sizeof *sec);
        strncpy(sec->name, section, sizeof sec->name - 1);
    }
    if (sec) {
        int slot = (int)(sec->added % LT_NOTE_RING);
        free(sec->lines[slot]);
        sec->lines[slot] = copy;
        sec->added++;
        copy = NULL;
    }
    pthread_mutex_unlock(&notes_mu);
    free(copy);
}

void lt_notes_walk(lt_note_section_fn secfn, lt_note_line_fn linefn,
                   void *ctx)
{
    pthread_mutex_lock(&notes_mu);
    for (int i = 0; i < n_sections; i++) {
        note_section *sec = &sections[i];
        if (sec->added == 0) continue;
        int64_t kept = sec->added < LT_NOTE_RING ? sec->added : LT_NOTE_RING;
        if (secfn) secfn(sec->name, sec->added - kept, ctx);
        for (int64_t k = sec->added - kept; k < sec->added; k++)
            if (linefn) linefn(sec->name, sec->lines[k % LT_NOTE_RING], ctx);
    }
    pthread_mutex_unlock(&notes_mu);
}

static void notes_clear(void)
{
    pthread_mutex_lock(&notes_mu);
    for (int i = 0; i < n_sections; i++) {
        for (int k = 0; k < LT_NOTE_RING; k++) {
            free(sections[i].lines[k]);
            sections[i].lines[k] = NULL;
        }
        sections[i].added = 0;
    }
    pthread_mutex_unlock(&notes_mu);
}
