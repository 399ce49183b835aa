/* metrics/json.c — the metrics as JSON (same data as the text report, raw
 * numbers instead of formatted ones; every known name, zeros included):
 *
 * {"metrics": {"CompileTime": {"unit": "ns", "total_samples": 3,
 *    "accumulator": 1.2e9, "kept_samples": 3, "value_rate": 2.1e8,
 *    "rate": 1.5, "percentiles": {"1": 1e6, ..., "99": 4e8}}, ...},
 *  "counters": {"CachedCompile": 12, ...},
 *  "notes": {"recompilation": {"dropped": 0, "lines": ["..."]}, ...}}
 *
 * value_rate/rate are null when the kept window spans no time; percentiles
 * are {} without samples. */
#include <math.h>
#include <stdlib.h>
#include "registry.h"

static void json_num(lt_sb *sb, double v)
{
    if (isfinite(v)) lt_sb_printf(sb, "%.17g", v);
    else lt_sb_puts(sb, "null");
}

static const char *unit_name(lt_metric_unit u)
{
    return u == LT_UNIT_NS ? "ns" : u == LT_UNIT_BYTES ? "bytes" : "count";
}

typedef struct notes_ctx {
    lt_sb *sb;
    int n_sections;
    int n_lines;
} notes_ctx;

static void note_section(const char *section, int64_t dropped, void *p)
{
    notes_ctx *c = p;
    if (c->n_sections++) lt_sb_puts(c->sb, "]}, ");
    lt_sb_json_str(c->sb, section);
    lt_sb_printf(c->sb, ": {\"dropped\": %lld, \"lines\": [", (long long)dropped);
    c->n_lines = 0;
}

static void note_line(const char *section, const char *line, void *p)
{
    notes_ctx *c = p;
    if (c->n_lines++) lt_sb_puts(c->sb, ", ");
    lt_sb_json_str(c->sb, line);
}

/* The JSON document; malloc'd (caller frees); NULL on malloc failure. */
char *lt_metrics_json(void)
{
    lt_sb sb = {0};
    lt_metric_snap *ms;
    int nm = lt_metric_snaps(&ms);
    if (nm < 0) return NULL;
    lt_sb_puts(&sb, "{\"metrics\": {");
    for (int i = 0; i < nm; i++) {
        const lt_metric_snap *s = &ms[i];
        if (i) lt_sb_puts(&sb, ", ");
        lt_sb_json_str(&sb, s->name);
        lt_sb_printf(&sb, ": {\"unit\": \"%s\", \"total_samples\": %lld, "
                     "\"accumulator\": ", unit_name(s->unit),
                     (long long)s->total_samples);
        json_num(&sb, s->accumulator);
        lt_sb_printf(&sb, ", \"kept_samples\": %d, \"value_rate\": ", s->n);
        double vr = NAN, r = NAN;
        lt_metric_snap_rates(s, &vr, &r);
        json_num(&sb, vr);
        lt_sb_puts(&sb, ", \"rate\": ");
        json_num(&sb, r);
        lt_sb_puts(&sb, ", \"percentiles\": {");
        for (int k = 0; s->n > 0 && k < LT_NUM_PERCENTILES; k++) {
            lt_sb_printf(&sb, "%s\"%g\": ", k ? ", " : "",
                         lt_metric_percentiles[k] * 100.0);
            json_num(&sb, lt_metric_snap_percentile(s, lt_metric_percentiles[k]));
        }
        lt_sb_puts(&sb, "}}");
    }
    lt_metric_snaps_free(ms, nm);

    lt_counter_snap *cs;
    int nc = lt_counter_snaps(&cs);
    if (nc < 0) {
        free(lt_sb_take(&sb));
        return NULL;
    }
    lt_sb_puts(&sb, "}, \"counters\": {");
    for (int i = 0; i < nc; i++) {
        if (i) lt_sb_puts(&sb, ", ");
        lt_sb_json_str(&sb, cs[i].name);
        lt_sb_printf(&sb, ": %lld", (long long)cs[i].value);
    }
    free(cs);

    lt_sb_puts(&sb, "}, \"notes\": {");
    notes_ctx c = {&sb, 0, 0};
    lt_notes_walk(note_section, note_line, &c);
    if (c.n_sections) lt_sb_puts(&sb, "]}");
    lt_sb_puts(&sb, "}}");
    return lt_sb_take(&sb);
}
