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

#endif
