/*
 * spawn/metrics_merge.c — merges per-ordinal metrics reports (torch_xla
 * format, see metrics/report.c) into one file after a multi-process run:
 * sums over ordinals, then one row per ordinal for what differs between
 * them (compiles, fallbacks, loader waits, time totals), then each
 * ordinal's report verbatim.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "metrics_merge.h"

#define MM_MAX_ORD 64

typedef struct mm_entry {
    char name[128];
    int is_counter;        /* 1: Counter Value; 0: Metric TotalSamples */
    long long sum;
    int seen;              /* ordinals reporting it */
    long long val[MM_MAX_ORD];   /* per ordinal (value / total samples) */
    char acc[MM_MAX_ORD][40];    /* per ordinal Accumulator text (metrics) */
} mm_entry;

typedef struct mm_table {
    mm_entry *e;
    int n, cap;
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
    mm_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->is_counter = is_counter;
    return e;
}

/* Parses ordinal k's report text into the table. */
static void mm_parse(mm_table *t, char *text, int k)
{
    mm_entry *cur = NULL;
    int ok = k >= 0 && k < MM_MAX_ORD;
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
            cur->seen++;
            if (ok) cur->val[k] = v;
            cur = NULL;
        } else if (cur && !cur->is_counter &&
                   sscanf(line, "  TotalSamples: %lld", &v) == 1) {
            cur->sum += v;
            cur->seen++;
            if (ok) cur->val[k] = v;
        } else if (cur && !cur->is_counter &&
                   strncmp(line, "  Accumulator: ", 15) == 0) {
            if (ok) snprintf(cur->acc[k], sizeof cur->acc[k], "%s", line + 15);
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
    for (int k = 0; k < n && k < MM_MAX_ORD; k++) {
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
            if (e->is_counter != pass || !mm_differs(e, texts, n)) continue;
            fprintf(f, "%s: %s\n", e->is_counter ? "Counter" : "Metric", e->name);
            fprintf(f, e->is_counter ? "  PerOrdinal:" : "  PerOrdinalSamples:");
            for (int k = 0; k < n && k < MM_MAX_ORD; k++)
                if (texts[k]) fprintf(f, " %lld", e->val[k]);
            fputc('\n', f);
            if (e->is_counter) continue;
            fprintf(f, "  PerOrdinalAccumulator:");
            for (int k = 0; k < n && k < MM_MAX_ORD; k++)
                if (texts[k]) fprintf(f, " %s", e->acc[k][0] ? e->acc[k] : "-");
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

int lt_metrics_merge_files(const char *path, int n)
{
    char **texts = calloc((size_t)n, sizeof *texts);
    if (!texts) return -1;
    mm_table t = { 0 };
    int found = 0;
    for (int k = 0; k < n; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s.ordinal-%d", path, k);
        texts[k] = slurp(p);
        if (!texts[k]) continue;
        found++;
        remove(p);
        char *copy = strdup(texts[k]);
        if (copy) {
            mm_parse(&t, copy, k);
            free(copy);
        }
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        for (int k = 0; k < n; k++) free(texts[k]);
        free(texts);
        free(t.e);
        return -1;
    }
    fprintf(f, "== merged over %d ordinals (%d reports) ==\n", n, found);
    for (int i = 0; i < t.n; i++)
        if (!t.e[i].is_counter)
            fprintf(f, "Metric: %s\n  TotalSamples: %lld\n", t.e[i].name,
                    t.e[i].sum);
    for (int i = 0; i < t.n; i++)
        if (t.e[i].is_counter)
            fprintf(f, "Counter: %s\n  Value: %lld\n", t.e[i].name, t.e[i].sum);
    mm_write_per_ordinal(f, &t, texts, n);
    for (int k = 0; k < n; k++) {
        fprintf(f, "== ordinal %d ==\n", k);
        if (texts[k]) {
            fputs(texts[k], f);
            size_t l = strlen(texts[k]);
            if (l && texts[k][l - 1] != '\n') fputc('\n', f);
        } else {
            fputs("(no report written)\n", f);
        }
        free(texts[k]);
    }
    fclose(f);
    free(texts);
    free(t.e);
    return found;
}
