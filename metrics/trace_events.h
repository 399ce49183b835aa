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

#endif
