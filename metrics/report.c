/* metrics/report.c — the text report in torch_xla's format, between the
 * sections other parts register (metrics/report.h); with lazy/'s, the
 * report reads:
 *
 *   lazytpu: f32 matrix products at matmul precision 'f32' (full f32, as XLA:CPU)
 *                             (HEAD, lazy/precision.c)
 *   Metric: CompileTime
 *     TotalSamples: 3
 *     Accumulator: 02s694ms418.595us
 *     ValueRate: 512ms001.250us / second
 *     Rate: 1.5 / second
 *     Percentiles: 1%=...; 5%=...; 10%=...; 20%=...; 50%=...; 80%=...; 90%=...; 95%=...; 99%=...
 *   Counter: CachedCompile
 *     Value: 12
 *   == recompilation ==
 *   <note lines>
 *   == fallback ==            (ANALYSIS, lazy/diagnose.c: op, calls, time,
 *                              frames, hint)
 *   == host reads ==          (ANALYSIS, lazy/host_reads.c: line, reads per
 *                              step, waits)
 *   == kernel profile ==      (LAZYTPU_PROFILE=1, lazy/profile.c: the
 *                              KernelTime::<op> metrics as one table, largest
 *                              total first; "per run" divides by the
 *                              ExecuteTime samples, i.e. programs run)
 *
 * Metrics come in report order (registry.h), counters by name. Metrics with
 * no sample and counters at 0 (e.g. after lt_metrics_clear_all) are left out.
 * ValueRate/Rate are over the kept sample window and printed only when it
 * spans time (as torch_xla does). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "registry.h"
#include "report.h"

/* ---- registered sections ---- */

typedef struct section {
    lt_report_place place;
    int order;
    lt_report_section_fn fn;
} section;

static pthread_mutex_t sections_mu = PTHREAD_MUTEX_INITIALIZER;
static section sections[LT_REPORT_MAX_SECTIONS];
static int n_sections;

int lt_report_section_add(lt_report_place place, int order, lt_report_section_fn fn)
{
    int rc = 0;
    pthread_mutex_lock(&sections_mu);
    int known = 0;
    for (int i = 0; i < n_sections; i++)
        if (sections[i].fn == fn) known = 1;
    if (!known && n_sections == LT_REPORT_MAX_SECTIONS) {
        rc = -1;
    } else if (!known) {
        /* insertion after every section of a lower or equal (place, order) */
        int at = n_sections;
        while (at > 0 && (sections[at - 1].place > place ||
                          (sections[at - 1].place == place && sections[at - 1].order > order))) {
            sections[at] = sections[at - 1];
            at--;
        }
        sections[at] = (section){place, order, fn};
        n_sections++;
    }
    pthread_mutex_unlock(&sections_mu);
    return rc;
}

/* Appends the text of every section registered at `place`. */
static void emit_sections(lt_sb *sb, lt_report_place place)
{
    section copy[LT_REPORT_MAX_SECTIONS];
    pthread_mutex_lock(&sections_mu);
    int n = n_sections;
    memcpy(copy, sections, (size_t)n * sizeof *copy);
    pthread_mutex_unlock(&sections_mu);
    for (int i = 0; i < n; i++) {
        if (copy[i].place != place) continue;
        char *text = copy[i].fn();
        if (text) {
            lt_sb_puts(sb, text);
            free(text);
        }
    }
}

static void emit_metric(lt_sb *sb, const lt_metric_snap *s)
{
    char buf[96];
    lt_sb_printf(sb, "Metric: %s\n", s->name);
    lt_sb_printf(sb, "  TotalSamples: %lld\n", (long long)s->total_samples);
    lt_sb_printf(sb, "  Accumulator: %s\n",
                 lt_fmt_value(s->unit, s->accumulator, buf, sizeof buf));
    double vrate, rate;
    if (lt_metric_snap_rates(s, &vrate, &rate)) {
        lt_sb_printf(sb, "  ValueRate: %s / second\n",
                     lt_fmt_value(s->unit, vrate, buf, sizeof buf));
        lt_sb_printf(sb, "  Rate: %s / second\n", lt_fmt_g(rate, buf, sizeof buf));
    }
    if (s->n > 0) {
        lt_sb_puts(sb, "  Percentiles: ");
        for (int i = 0; i < LT_NUM_PERCENTILES; i++) {
            double p = lt_metric_percentiles[i];
            char pct[32];
            lt_fmt_g(p * 100.0, pct, sizeof pct);
            lt_sb_printf(sb, "%s%s%%=%s", i ? "; " : "", pct,
                         lt_fmt_value(s->unit, lt_metric_snap_percentile(s, p),
                                      buf, sizeof buf));
        }
        lt_sb_puts(sb, "\n");
    }
}

static void note_section(const char *section, int64_t dropped, void *ctx)
{
    lt_sb *sb = ctx;
    lt_sb_printf(sb, "== %s ==\n", section);
    if (dropped > 0)
        lt_sb_printf(sb, "(%lld earlier lines dropped)\n", (long long)dropped);
}

static void note_line(const char *section, const char *line, void *ctx)
{
    lt_sb_printf((lt_sb *)ctx, "%s\n", line);
}

#define PROFILE_PREFIX "KernelTime::"

static int by_total_desc(const void *a, const void *b)
{
    const lt_metric_snap *x = *(const lt_metric_snap *const *)a;
    const lt_metric_snap *y = *(const lt_metric_snap *const *)b;
    return (x->accumulator < y->accumulator) - (x->accumulator > y->accumulator);
}

/* The kernel profile table from the KernelTime:: metrics; nothing when
 * there are none. */
static void emit_profile(lt_sb *sb, const lt_metric_snap *ms, int nm)
{
    size_t plen = strlen(PROFILE_PREFIX);
    int n = 0;
    int64_t runs = 0;
    double total = 0;
    for (int i = 0; i < nm; i++) {
        if (strcmp(ms[i].name, "ExecuteTime") == 0) runs = ms[i].total_samples;
        if (ms[i].total_samples > 0 && strncmp(ms[i].name, PROFILE_PREFIX, plen) == 0) {
            n++;
            total += ms[i].accumulator;
        }
    }
    if (n == 0) return;
    const lt_metric_snap **rows = malloc((size_t)n * sizeof *rows);
    if (!rows) return;
    n = 0;
    for (int i = 0; i < nm; i++)
        if (ms[i].total_samples > 0 && strncmp(ms[i].name, PROFILE_PREFIX, plen) == 0)
            rows[n++] = &ms[i];
    qsort(rows, (size_t)n, sizeof *rows, by_total_desc);
    lt_sb_printf(sb, "== kernel profile ==\n%-32s %10s %12s %12s %7s\n", "op", "calls",
                 "total ms", "ms per run", "share");
    for (int i = 0; i < n; i++) {
        const lt_metric_snap *r = rows[i];
        lt_sb_printf(sb, "%-32s %10lld %12.3f %12.4f %6.1f%%\n", r->name + plen,
                     (long long)r->total_samples, r->accumulator * 1e-6,
                     runs > 0 ? r->accumulator * 1e-6 / (double)runs : 0.0,
                     total > 0 ? 100.0 * r->accumulator / total : 0.0);
    }
    lt_sb_printf(sb, "%-32s %10s %12.3f %12.4f  (%lld runs)\n", "all kernels", "",
                 total * 1e-6, runs > 0 ? total * 1e-6 / (double)runs : 0.0, (long long)runs);
    free(rows);
}

/* The whole report; malloc'd (caller frees); NULL on malloc failure. */
char *lt_metrics_report(void)
{
    lt_sb sb = {0};
    emit_sections(&sb, LT_REPORT_HEAD);
    lt_metric_snap *ms;
    int nm = lt_metric_snaps(&ms);
    if (nm < 0) {
        free(lt_sb_take(&sb));
        return NULL;
    }
    for (int i = 0; i < nm; i++)
        if (ms[i].total_samples > 0) emit_metric(&sb, &ms[i]);
    lt_sb prof = {0};                   /* the table goes after the notes */
    emit_profile(&prof, ms, nm);
    lt_metric_snaps_free(ms, nm);

    lt_counter_snap *cs;
    int nc = lt_counter_snaps(&cs);
    if (nc < 0) {
        free(lt_sb_take(&sb));
        return NULL;
    }
    for (int i = 0; i < nc; i++)
        if (cs[i].value != 0)
            lt_sb_printf(&sb, "Counter: %s\n  Value: %lld\n", cs[i].name,
                         (long long)cs[i].value);
    free(cs);

    lt_notes_walk(note_section, note_line, &sb);
    emit_sections(&sb, LT_REPORT_ANALYSIS);
    char *pt = lt_sb_take(&prof);
    if (pt) {
        lt_sb_puts(&sb, pt);
        free(pt);
    }
    return lt_sb_take(&sb);
}
