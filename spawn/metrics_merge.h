/*
 * spawn/metrics_merge.h — merges the per-ordinal metrics reports written by
 * workers (LAZYTPU_METRICS_FILE=<path>.ordinal-{ordinal}) into one file.
 */
#ifndef LT_METRICS_MERGE_H
#define LT_METRICS_MERGE_H

/* Reads <path>.ordinal-0 .. <path>.ordinal-(n-1) (missing ones are noted),
 * writes <path>: first "== merged over N ordinals ==" with every Counter
 * summed and every Metric's TotalSamples summed, then each ordinal's report
 * verbatim under "== ordinal k ==". Removes the per-ordinal files.
 * Returns the number of reports found, or -1 if <path> cannot be written. */
int lt_metrics_merge_files(const char *path, int n);

/* Reads and removes <path>.ordinal-<ordinal>: malloc'd text (caller frees)
 * or NULL if absent. */
char *lt_metrics_read_report(const char *path, int ordinal);

/* Writes the merge of reports[0..n) (global ordinal order; NULL = missing)
 * into path. hosts <= 1: the format of lt_metrics_merge_files. hosts > 1
 * (n / hosts ordinals per host): the header names the hosts, totals also
 * sum the Accumulators, then "== per host ==" rows (PerHost for counters,
 * PerHostSamples and PerHostAccumulator for metrics, including each host
 * proxy's metrics, e.g. InterHostProxyTime), the per-ordinal rows, each
 * host proxy's report (host_reports[h], may be NULL) and each ordinal's
 * report as "== ordinal k (host h) ==". Does not free the inputs.
 * Returns the number of reports present, or -1 if path cannot be written. */
int lt_metrics_merge_reports(const char *path, char *const *reports, int n,
                             int hosts, char *const *host_reports);

#endif
