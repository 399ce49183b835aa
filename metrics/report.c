/* metrics/report.c — the text report in torch_xla's format:
 *
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
 *   == fallback ==            (lazy/diagnose.c: op, calls, time, frames, hint)
 *   == host reads ==          (lazy/host_reads.c: line, reads per step, waits)
 *
 * Metrics come in report order (registry.h), counters by name. Metrics with
 * no sample and counters at 0 (e.g. after lt_metrics_clear_all) are left out.
 * ValueRate/Rate are over the kept sample window and printed only when it
 * spans time (as torch_xla does). */
#include <stdio.h>
#include <stdlib.h>
#include "registry.h"

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

/* The whole report; malloc'd (caller frees); NULL on malloc failure. */
char *lt_metrics_report(void)
{
    lt_sb sb = {0};
    lt_metric_snap *ms;
    int nm = lt_metric_snaps(&ms);
    if (nm < 0) return NULL;
    for (int i = 0; i < nm; i++)
        if (ms[i].total_samples > 0) emit_metric(&sb, &ms[i]);
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
    char *fb = lt_fallback_report();   /* "" when nothing fell back */
    if (fb) {
        lt_sb_puts(&sb, fb);
        free(fb);
    }
    char *hr = lt_host_read_report();  /* "" when nothing was read */
    if (hr) {
        lt_sb_puts(&sb, hr);
        free(hr);
    }
    return lt_sb_take(&sb);
}
