/*
 * metrics/trace_events.h — Chrome/Perfetto trace events for
 * LAZYTPU_TRACE=<file.json> (public side: lt_trace_event, lt_trace_enabled,
 * lt_trace_flush in include/lazytpu.h).
 *
 * The file is one JSON object {"traceEvents": [...], "displayTimeUnit":
 * "ms"}: "M" metadata (process_name "lazytpu ordinal N", thread_name
 * "host" / "loader" / "core K") then "X" complete events with ts/dur in
 * microseconds on the lt_now_ns clock, pid = LAZYTPU_ORDINAL (or 0), tid =
 * the core index, LT_TRACE_HOST_TID for "host", +1 for "loader". Events are
 * buffered in memory and written in batches; after every batch the file
 * ends with the closing "]}" again, so it is valid JSON whenever no write is
 * in progress (flushed at lt_shutdown and at exit). Under spawn (world size
 * > 1) each process writes its own file: "{ordinal}" or "%d" in the path is
 * replaced by the ordinal, else ".<ordinal>" is inserted before the
 * extension.
 */
#ifndef LT_TRACE_EVENTS_H
#define LT_TRACE_EVENTS_H

#include <stdint.h>
#include "lazytpu.h"
#include "registry.h"

#define LT_TRACE_HOST_TID 100

/* Opens the LAZYTPU_TRACE file (truncating it) when the variable is set;
 * n_cores names the core threads. Reports an unwritable path once on
 * stderr and leaves tracing off. */
void lt_trace_events_init(int n_cores);
/* Flushes and closes the file (lt_shutdown); tracing is off afterwards. */
void lt_trace_events_close(void);
/* lt_trace_event with an "args" object body (`"graph": "1f2e", "bytes": 4`,
 * valid JSON members, may be NULL). */
void lt_trace_event_args(const char *name, const char *cat, int64_t start_ns,
                         int64_t dur_ns, int tid, const char *args_json);

/* One recorded event (the file sink's batch and the capture session's
 * buffer): name and category truncated to fit, args dropped when too long. */
typedef struct lt_trace_ev {
    int64_t ts_ns, dur_ns;
    int tid;
    char name[48];
    char cat[16];
    char args[112];
} lt_trace_ev;

/* Fills *e from an event's fields (strings copied, truncated). */
void lt_trace_ev_fill(lt_trace_ev *e, const char *name, const char *cat, int64_t start_ns,
                      int64_t dur_ns, int tid, const char *args_json);
/* The JSON "tid" of an event's thread: the core index, LT_TRACE_HOST_TID for
 * the host, LT_TRACE_HOST_TID + 1 for the loader. */
int lt_trace_ev_tid(int tid);
/* Appends ",\n{...}" (one "X" event, ts/dur in us) to sb. */
void lt_trace_ev_json(lt_sb *sb, const lt_trace_ev *e, int pid);
/* Appends ",\n" thread_name and thread_sort_index "M" events to sb. */
void lt_trace_thread_meta(lt_sb *sb, int pid, int tid, const char *name, int sort);
/* Capture sessions (trace_capture.c) turn recording into their buffer on
 * and off: lt_trace_enabled() is true while either sink records. */
void lt_trace_events_set_capture(int on);

#endif
