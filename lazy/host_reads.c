/*
 * lazy/host_reads.c — the per-line table of host reads (see host_reads.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diagnose.h"
#include "host_reads.h"
#include "registry.h"
#include "report.h"

#define HR_MAX_LINES 128

typedef struct hr_line {
    char frame[160];
    int64_t reads, synced, waited, wait_ns, bytes;
    int64_t first_step;          /* step count when first seen */
} hr_line;

static pthread_mutex_t hr_mu = PTHREAD_MUTEX_INITIALIZER;
static hr_line *hr_lines;        /* HR_MAX_LINES, allocated on first use */
static int hr_n;
static int64_t hr_steps;         /* step boundaries seen */

void lt_host_read_record(int core, int64_t bytes, int64_t wait_ns, int synced,
                         const char *frame)
{
    static lt_counter *c_reads, *c_waited;
    static lt_metric *m_wait;
    if (!c_reads) {   /* benign race: every thread gets the same handles */
        c_reads = lt_counter_get("HostReads");
        c_waited = lt_counter_get("HostReadsWaited");
        m_wait = lt_metric_get("HostReadWaitTime", LT_UNIT_NS);
    }
    lt_counter_add(c_reads, 1);
    if (wait_ns > 0) {
        lt_counter_add(c_waited, 1);
        lt_metric_add(m_wait, (double)wait_ns);
    }
    lt_diagnose_value_read(core, frame);
    const char *f = frame && frame[0] ? frame : "<unknown line>";
    pthread_mutex_lock(&hr_mu);
    if (!hr_lines) hr_lines = calloc(HR_MAX_LINES, sizeof *hr_lines);
    hr_line *l = NULL;
    for (int i = 0; hr_lines && i < hr_n; i++)
        if (strncmp(hr_lines[i].frame, f, sizeof hr_lines[i].frame - 1) == 0) {
            l = &hr_lines[i];
            break;
        }
    if (!l && hr_lines && hr_n < HR_MAX_LINES) {
        l = &hr_lines[hr_n++];
        snprintf(l->frame, sizeof l->frame, "%s", f);
        l->first_step = hr_steps;
    }
    if (l) {
        l->reads++;
        l->synced += synced != 0;
        l->waited += wait_ns > 0;
        if (wait_ns > 0) l->wait_ns += wait_ns;
        l->bytes += bytes;
    }
    pthread_mutex_unlock(&hr_mu);
}

void lt_host_read_step(void)
{
    pthread_mutex_lock(&hr_mu);
    hr_steps++;
    pthread_mutex_unlock(&hr_mu);
}

static int hr_cmp(const void *a, const void *b)
{
    const hr_line *x = a, *y = b;
    if (x->reads != y->reads) return x->reads > y->reads ? -1 : 1;
    return strcmp(x->frame, y->frame);
}

/* "== host reads ==" in the report, after diagnose.c's fallback section
 * (metrics/report.h). */
__attribute__((constructor)) static void register_host_read_report(void)
{
    lt_report_section_add(LT_REPORT_ANALYSIS, 20, lt_host_read_report);
}

char *lt_host_read_report(void)
{
    pthread_mutex_lock(&hr_mu);
    int n = hr_n;
    int64_t steps = hr_steps;
    hr_line *copy = n ? malloc((size_t)n * sizeof *copy) : NULL;
    if (copy) memcpy(copy, hr_lines, (size_t)n * sizeof *copy);
    pthread_mutex_unlock(&hr_mu);
    if (!copy) return calloc(1, 1);
    qsort(copy, (size_t)n, sizeof *copy, hr_cmp);
    lt_sb sb = {0};
    lt_sb_puts(&sb, "== host reads ==\n");
    for (int i = 0; i < n; i++) {
        hr_line *l = &copy[i];
        char t[64];
        int64_t st = steps - l->first_step + 1;   /* the step the first read was in */
        lt_sb_printf(&sb, "%s: %lld read%s", l->frame, (long long)l->reads,
                     l->reads == 1 ? "" : "s");
        if (st > 0)
            lt_sb_printf(&sb, " (%.2f per step over %lld steps)",
                         (double)l->reads / (double)st, (long long)st);
        lt_sb_printf(&sb, ", %lld ran the pending graph, %lld waited for the device, "
                     "%s waiting\n", (long long)l->synced, (long long)l->waited,
                     lt_fmt_time((double)l->wait_ns, t, sizeof t));
        if (st >= 3 && l->reads >= st - 1)     /* about one read per step */
            lt_sb_puts(&sb, "  hint: a read every step makes the host wait for the device "
                       "each step; read every N steps, or log from a step closure that "
                       "runs off the host's path: add_step_closure(fn, run_async=True)\n");
    }
    free(copy);
    char *s = lt_sb_take(&sb);
    return s ? s : calloc(1, 1);
}

void lt_host_read_reset(void)
{
    pthread_mutex_lock(&hr_mu);
    free(hr_lines);
    hr_lines = NULL;
    hr_n = 0;
    hr_steps = 0;
    pthread_mutex_unlock(&hr_mu);
}
