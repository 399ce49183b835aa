/*
 * metrics/report.h — report sections that other parts of lazytpu register
 * with the metrics report (lt_metrics_report), so metrics/ calls nothing
 * outside itself and base/: the parts above it (lazy/'s matmul precision
 * header, fallback and host-read analyses) hand it a callback instead.
 *
 * The report is, in order: the HEAD sections, the metrics, the counters,
 * the notes (lt_metrics_note), the ANALYSIS sections, the kernel profile
 * table. Within a place, sections come by ascending `order` (then by
 * registration).
 */
#ifndef LT_METRICS_REPORT_H
#define LT_METRICS_REPORT_H

typedef enum lt_report_place {
    LT_REPORT_HEAD = 0,       /* before the metrics */
    LT_REPORT_ANALYSIS        /* after the notes, before the kernel profile */
} lt_report_place;

/* Returns the section's text (malloc'd, the report frees it; "" or NULL
 * adds nothing). Called on the thread asking for the report, without any
 * metrics lock held: it may read counters and metrics. */
typedef char *(*lt_report_section_fn)(void);

/* Adds fn to the report at `place`, sorted by `order`. Registering the same
 * fn again changes nothing. Thread-safe; may run before main (a part
 * registers from a constructor, so the report has its section whether or not
 * lt_init ran). Returns 0, or -1 when LT_REPORT_MAX_SECTIONS are already
 * registered (fn is then left out). */
#define LT_REPORT_MAX_SECTIONS 16
int lt_report_section_add(lt_report_place place, int order, lt_report_section_fn fn);

#endif
