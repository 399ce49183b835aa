/*
 * metrics/registry.h — internals of the metrics registry (the public API is in
 * include/lazytpu.h: lt_counter_*, lt_metric_*, lt_metrics_*).
 *
 * The registry is the one piece of global mutable state besides the core
 * table. Names are interned on first use into fixed-capacity open-addressing
 * tables whose slots are published atomically: lookups never lock, creation
 * takes one mutex. Counters are atomic int64. A metric keeps a bounded ring of
 * the last LT_METRIC_RING (value, timestamp) samples plus the total sample
 * count and the accumulator over all samples; adding a sample locks only that
 * metric. Notes are free-form lines per section, each section a bounded ring.
 *
 * report.c (text) and json.c read the registry through the snapshot
 * functions below, so neither holds a lock while formatting.
 */
#ifndef LT_METRICS_REGISTRY_H
#define LT_METRICS_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include "lazytpu.h"

#define LT_METRIC_RING 1024        /* samples kept per metric */
#define LT_NOTE_RING 256           /* lines kept per notes section */
#define LT_NOTE_SECTIONS 16        /* distinct sections */
#define LT_NOTE_LINE_MAX 512       /* longer lines are truncated */

/* The 9 percentiles of the report, as fractions. */
#define LT_NUM_PERCENTILES 9
extern const double lt_metric_percentiles[LT_NUM_PERCENTILES];

/* A consistent copy of one metric taken under its lock. */
typedef struct lt_metric_snap {
    const char *name;          /* interned: valid for the process lifetime */
    lt_metric_unit unit;
    int64_t total_samples;     /* all samples since the last clear */
    double accumulator;        /* sum of all samples since the last clear */
    int n;                     /* samples kept (<= LT_METRIC_RING) */
    double window_sum;         /* sum of the kept samples */
    int64_t first_ns, last_ns; /* timestamps of the oldest / newest kept */
    double *sorted;            /* the n kept values, ascending (malloc'd) */
} lt_metric_snap;

/* Snapshot of every known metric, in report order (CompileTime,
 * ExecuteTime, TransferToDeviceTime, TransferFromDeviceTime,
 * TensorsGraphSize, InboundData, OutboundData, then the others by name).
 * Returns the count and a malloc'd array in *out (free with
 * lt_metric_snaps_free); -1 on malloc failure. */
int lt_metric_snaps(lt_metric_snap **out);
void lt_metric_snaps_free(lt_metric_snap *s, int n);

/* Rates over the kept window; return 0 when the window spans no time. */
int lt_metric_snap_rates(const lt_metric_snap *s, double *value_per_sec,
                         double *samples_per_sec);
/* Percentile p (0..1) of the kept samples, torch_xla's rule:
 * sorted[(size_t)(p * n)]; NAN if n == 0. */
double lt_metric_snap_percentile(const lt_metric_snap *s, double p);

typedef struct lt_counter_snap {
    const char *name;          /* interned */
    int64_t value;
} lt_counter_snap;

/* Every known counter sorted by name; malloc'd (free()); count returned, -1
 * on malloc failure. */
int lt_counter_snaps(lt_counter_snap **out);

/* Notes: calls fn(section, line, ctx) for every kept line, sections in order
 * of first use, lines oldest first; `dropped` is called once per section
 * before its lines with the number of lines that fell out of the ring
 * (possibly 0). Holds the notes lock during the walk: fn must not call
 * lt_metrics_note. */
typedef void (*lt_note_section_fn)(const char *section, int64_t dropped,
                                   void *ctx);
typedef void (*lt_note_line_fn)(const char *section, const char *line,
                                void *ctx);
void lt_notes_walk(lt_note_section_fn sec, lt_note_line_fn line, void *ctx);

/* ---- format.c ---- */

/* torch_xla-style time from ns: "02m57s694ms418.595us", "694ms418.595us",
 * "418.595us" (leading units zero-padded to their width: "001ms...").
 * Writes into buf (always NUL-terminated); returns buf. */
char *lt_fmt_time(double ns, char *buf, size_t cap);
/* Bytes, base 1024, 2 decimals: "12.00B", "512.00KB", "1.50MB". */
char *lt_fmt_bytes(double bytes, char *buf, size_t cap);
/* Plain value, 2 decimals: "3.00". */
char *lt_fmt_count(double v, char *buf, size_t cap);
/* Dispatch on the unit. */
char *lt_fmt_value(lt_metric_unit unit, double v, char *buf, size_t cap);
/* C++ ostream default formatting of a double (%g, 6 digits): "13.0716". */
char *lt_fmt_g(double v, char *buf, size_t cap);

/* Growable string builder; on malloc failure it stops growing and marks
 * itself failed (lt_sb_take then returns NULL). */
typedef struct lt_sb {
    char *p;
    size_t len, cap;
    int failed;
} lt_sb;
void lt_sb_printf(lt_sb *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void lt_sb_puts(lt_sb *sb, const char *s);
/* Appends s as a JSON string literal (quoted, escaped). */
void lt_sb_json_str(lt_sb *sb, const char *s);
/* Returns the malloc'd string (never NULL unless failed) and resets sb. */
char *lt_sb_take(lt_sb *sb);

#endif
