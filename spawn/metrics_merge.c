/*
 * spawn/metrics_merge.c — merges per-ordinal metrics reports (torch_xla
 * format, see metrics/report.c) into one file after a multi-process run:
 * sums over ordinals, then (several hosts) one row per host, then one row
 * per ordinal for what differs between them (compiles, fallbacks, loader
 * waits, time totals), then each ordinal's report verbatim.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "metrics_merge.h"
#include "registry.h"

typedef struct mm_entry {
    char name[128];
    int is_counter;        /* 1: Counter Value; 0: Metric TotalSamples */
    long long sum;
    int seen;              /* ordinals reporting it */
    long long *val;        /* per ordinal (value / total samples) */
    char (*acc)[40];       /* per ordinal Accumulator text (metrics) */
    double acc_sum;        /* parsed accumulators, summed (metrics) */
    int unit;              /* lt_metric_unit of the accumulator; -1 unknown */
    long long *hval;       /* per host (hosts > 1) */
    double *hacc;
} mm_entry;

typedef struct mm_table {
    mm_entry *e;
    int n, cap;
    int nord, hosts;
} mm_table;

static mm_entry *mm_find(mm_table *t, const char *name, int is_counter)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].is_counter == is_counter && strcmp(t->e[i].name, name) == 0)
            return &t->e[i];
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        mm_entry *e = realloc(t->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        t->e = e;
        t->cap = cap;
    }
    mm_entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->val = calloc((size_t)t->nord + 1, sizeof *e->val);
    e->acc = calloc((size_t)t->nord + 1, sizeof *e->acc);
    e->hval = calloc((size_t)t->hosts + 1, sizeof *e->hval);
    e->hacc = calloc((size_t)t->hosts + 1, sizeof *e->hacc);
    if (!e->val || !e->acc || !e->hval || !e->hacc) {
        free(e->val);
        free(e->acc);
        free(e->hval);
        free(e->hacc);
        return NULL;
    }
    t->n++;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->is_counter = is_counter;
    e->unit = -1;
    return e;
}

static void mm_free(mm_table *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->e[i].val);
        free(t->e[i].acc);
        free(t->e[i].hval);
        free(t->e[i].hacc);
    }
    free(t->e);
}

/* Parses an Accumulator text: "02m57s694ms418.595us" (time), "1.50MB"
 * (bytes, base 1024) or "12.00" (count). Returns 0 on success. */
static int parse_acc(const char *s, double *v, int *unit)
{
    size_t len = strlen(s);
    if (!len) return -1;
    if (len > 2 && strcmp(s + len - 2, "us") == 0) {
        double ns = 0, sign = 1;
        const char *p = s;
        if (*p == '-') {
            sign = -1;
            p++;
        }
        while (*p) {
            char *end;
            double x = strtod(p, &end);
            if (end == p) return -1;
            double scale;
            if (strncmp(end, "ms", 2) == 0) { scale = 1e6; end += 2; }
            else if (strncmp(end, "us", 2) == 0) { scale = 1e3; end += 2; }
            else if (*end == 'd') { scale = 86400e9; end++; }
            else if (*end == 'h') { scale = 3600e9; end++; }
            else if (*end == 'm') { scale = 60e9; end++; }
            else if (*end == 's') { scale = 1e9; end++; }
            else return -1;
            ns += x * scale;
            p = end;
        }
        *v = sign * ns;
        *unit = LT_UNIT_NS;
        return 0;
    }
    char *end;
    double x = strtod(s, &end);
    if (end == s) return -1;
    static const char *const sfx[] = { "B", "KB", "MB", "GB", "TB", "PB" };
    for (int k = 0; k < 6; k++)
        if (strcmp(end, sfx[k]) == 0) {
            *v = x * pow(1024.0, k);
            *unit = LT_UNIT_BYTES;
            return 0;
        }
    if (*end) return -1;
    *v = x;
    *unit = LT_UNIT_COUNT;
    return 0;
}

/* Parses one report into the table: ordinal k (-1: a host proxy's report)
 * of host h (-1: one host). */
static void mm_parse(mm_table *t, char *text, int k, int h)
{
    mm_entry *cur = NULL;
    int ok = k >= 0 && k < t->nord;
    int hk = h >= 0 && h < t->hosts;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        long long v;
        if (strncmp(line, "Counter: ", 9) == 0) {
            cur = mm_find(t, line + 9, 1);
        } else if (strncmp(line, "Metric: ", 8) == 0) {
            cur = mm_find(t, line + 8, 0);
        } else if (cur && cur->is_counter && sscanf(line, "  Value: %lld", &v) == 1) {
            cur->sum += v;
            cur->seen += ok;
            if (ok) cur->val[k] = v;
            if (hk) cur->hval[h] += v;
            cur = NULL;
        } else if (cur && !cur->is_counter &&
                   sscanf(line, "  TotalSamples: %lld", &v) == 1) {
            cur->sum += v;
            cur->seen += ok;
            if (ok) cur->val[k] = v;
            if (hk) cur->hval[h] += v;
        } else if (cur && !cur->is_counter &&
                   strncmp(line, "  Accumulator: ", 15) == 0) {
            if (ok) snprintf(cur->acc[k], sizeof cur->acc[k], "%s", line + 15);
            double a;
            int unit;
            if (parse_acc(line + 15, &a, &unit) == 0) {
                cur->acc_sum += a;
                cur->unit = unit;
                if (hk) cur->hacc[h] += a;
            }
            cur = NULL;
        } else if (line[0] != ' ') {
            cur = NULL;
        }
    }
}

/* 1 if the entry's per-ordinal values (or accumulators) are not all equal
 * over the reports found. */
static int mm_differs(const mm_entry *e, char *const *texts, int n)
{
    int first = -1;
    for (int k = 0; k < n; k++) {
        if (!texts[k]) continue;
        if (first < 0) {
            first = k;
            continue;
        }
        if (e->val[k] != e->val[first]) return 1;
        if (!e->is_counter && strcmp(e->acc[k], e->acc[first]) != 0) return 1;
    }
    return 0;
}

/* Rows per ordinal: every counter whose value differs between ordinals
 * (compiles, CPU fallbacks aten::*, loader waits, ...), and for metrics the
 * samples and accumulated totals when they differ (times always do). */
static void mm_write_per_ordinal(FILE *f, const mm_table *t, char *const *texts,
                                 int n)
{
    fprintf(f, "== per ordinal (where ordinals differ) ==\n");
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < t->n; i++) {
            const mm_entry *e = &t->e[i];
            if (e->is_counter != pass || !e->seen || !mm_differs(e, texts, n))
                continue;
            fprintf(f, "%s: %s\n", e->is_counter ? "Counter" : "Metric", e->name);
            fprintf(f, e->is_counter ? "  PerOrdinal:" : "  PerOrdinalSamples:");
            for (int k = 0; k < n; k++)
                if (texts[k]) fprintf(f, " %lld", e->val[k]);
            fputc('\n', f);
            if (e->is_counter) continue;
            fprintf(f, "  PerOrdinalAccumulator:");
            for (int k = 0; k < n; k++)
                if (texts[k]) fprintf(f, " %s", e->acc[k][0] ? e->acc[k] : "-");
            fputc('\n', f);
        }
}

static void mm_write_per_host(FILE *f, const mm_table *t)
{
    char buf[64];
    fprintf(f, "== per host ==\n");
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < t->n; i++) {
            const mm_entry *e = &t->e[i];
            if (e->is_counter != pass) continue;
            fprintf(f, "%s: %s\n", e->is_counter ? "Counter" : "Metric", e->name);
            fprintf(f, e->is_counter ? "  PerHost:" : "  PerHostSamples:");
            for (int h = 0; h < t->hosts; h++) fprintf(f, " %lld", e->hval[h]);
            fputc('\n', f);
            if (e->is_counter || e->unit < 0) continue;
            fprintf(f, "  PerHostAccumulator:");
            for (int h = 0; h < t->hosts; h++)
                fprintf(f, " %s", lt_fmt_value((lt_metric_unit)e->unit,
                                               e->hacc[h], buf, sizeof buf));
            fputc('\n', f);
        }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[len] = 0;
    return buf;
}

char *lt_metrics_read_report(const char *path, int ordinal)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.ordinal-%d", path, ordinal);
    char *text = slurp(p);
    if (text) remove(p);
    return text;
}

static void put_text(FILE *f, const char *text)
{
    if (!text) {
        fputs("(no report written)\n", f);
        return;
    }
    fputs(text, f);
    size_t l = strlen(text);
    if (l && text[l - 1] != '\n') fputc('\n', f);
}

int lt_metrics_merge_reports(const char *path, char *const *reports, int n,
                             int hosts, char *const *host_reports)
{
    if (hosts < 1 || n % hosts) hosts = 1;
    int per = n / hosts;
    mm_table t = { 0 };
    t.nord = n;
    t.hosts = hosts;
    int found = 0;
    for (int k = 0; k < n; k++) {
        if (!reports[k]) continue;
        found++;
        char *copy = strdup(reports[k]);
        if (copy) {
            mm_parse(&t, copy, k, hosts > 1 ? k / per : -1);
            free(copy);
        }
    }
    for (int h = 0; hosts > 1 && host_reports && h < hosts; h++) {
        if (!host_reports[h]) continue;
        char *copy = strdup(host_reports[h]);
        if (copy) {
            mm_parse(&t, copy, -1, h);
            free(copy);
        }
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        mm_free(&t);
        return -1;
    }
    char buf[64];
    if (hosts > 1)
        fprintf(f, "== merged over %d ordinals on %d hosts (%d reports) ==\n",
                n, hosts, found);
    else
        fprintf(f, "== merged over %d ordinals (%d reports) ==\n", n, found);
    for (int i = 0; i < t.n; i++) {
        if (t.e[i].is_counter) continue;
        fprintf(f, "Metric: %s\n  TotalSamples: %lld\n", t.e[i].name, t.e[i].sum);
        if (hosts > 1 && t.e[i].unit >= 0)
            fprintf(f, "  Accumulator: %s\n",
                    lt_fmt_value((lt_metric_unit)t.e[i].unit, t.e[i].acc_sum,
                                 buf, sizeof buf));
    }
    for (int i = 0; i < t.n; i++)
        if (t.e[i].is_counter)
            fprintf(f, "Counter: %s\n  Value: %lld\n", t.e[i].name, t.e[i].sum);
    if (hosts > 1) mm_write_per_host(f, &t);
    mm_write_per_ordinal(f, &t, reports, n);
    for (int h = 0; hosts > 1 && h < hosts; h++) {
        fprintf(f, "== host %d proxy ==\n", h);
        put_text(f, host_reports ? host_reports[h] : NULL);
    }
    for (int k = 0; k < n; k++) {
        if (hosts > 1)
            fprintf(f, "== ordinal %d (host %d) ==\n", k, k / per);
        else
            fprintf(f, "== ordinal %d ==\n", k);
        put_text(f, reports[k]);
    }
    fclose(f);
    mm_free(&t);
    return found;
}

int lt_metrics_merge_files(const char *path, int n)
{
    char **texts = calloc((size_t)n + 1, sizeof *texts);
    if (!texts) return -1;
    for (int k = 0; k < n; k++) texts[k] = lt_metrics_read_report(path, k);
    int found = lt_metrics_merge_reports(path, texts, n, 1, NULL);
    for (int k = 0; k < n; k++) free(texts[k]);
    free(texts);
    return found;
}
