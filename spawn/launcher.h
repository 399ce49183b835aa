/*
 * spawn/launcher.h — starts N worker processes over a fresh shared-memory
 * world and supervises them (the library behind `lazytpu-run`).
 *
 * Each worker is fork+exec'd in its own process group with
 *   LAZYTPU_ORDINAL=k  LAZYTPU_LOCAL_ORDINAL=k  LAZYTPU_WORLD_SIZE=N
 *   LAZYTPU_LOCAL_WORLD_SIZE=N  LAZYTPU_SHM_NAME=/lazytpu-...
 *   LAZYTPU_NUM_CORES=1 (one simulated core per process)
 *   OMP_NUM_THREADS=max(1, online CPUs / N) unless already set, and the
 *   same budget (OMP_NUM_THREADS when the user set it) as
 *   LAZYTPU_OMP_THREADS (the core's kernels) and OPENBLAS_NUM_THREADS
 *   unless set; OMP_WAIT_POLICY=PASSIVE unless set when N > online CPUs
 *   LAZYTPU_METRICS_FILE=<metrics_path>.ordinal-{ordinal} with metrics_path
 * Its stderr goes through a pipe and is forwarded line by line to the
 * launcher's stderr as "[ordinal k] line"; the last non-empty line is kept
 * so a Python traceback's last line can be reported. stdout is inherited.
 *
 * When a worker exits non-zero or dies by a signal (or the timeout expires,
 * or the launcher gets SIGINT/SIGTERM/SIGHUP): the world is aborted (peers
 * blocked in collectives fail at once), the other workers' process groups
 * get SIGTERM, then SIGKILL after a grace period; all are reaped, leftover
 * members of the workers' process groups are killed, and the segment is
 * unlinked. No process or /dev/shm entry is left behind.
 */
#ifndef LT_LAUNCHER_H
#define LT_LAUNCHER_H

#include <stddef.h>
#include "lazytpu.h"

typedef struct lt_launch_opts {
    int nprocs;               /* workers, 1..LT_WORLD_MAX_RANKS */
    double timeout_s;         /* wall-clock limit for the job; <= 0: none */
    double grace_s;           /* SIGTERM -> SIGKILL delay; <= 0: 5 s */
    size_t shm_bytes;         /* 0: LAZYTPU_SHM_BYTES or the default */
    const char *metrics_path; /* merge per-ordinal metrics here; NULL: off */
    int quiet;                /* 1: do not print the failure line */
} lt_launch_opts;

typedef struct lt_launch_result {
    int exit_code;            /* 0 ok; worker's code; 128+signal; 124 timeout */
    int failed_ordinal;       /* first failing worker, -1 if none */
    char message[1024];       /* "worker 3 died: killed by signal 9 (SIGKILL)",
                                 "worker 1 exited with code 1: ValueError: boom",
                                 "timed out after 5 s; still running: 2, 5";
                                 "" on success */
} lt_launch_result;

/* Runs argv (argv[0] searched in PATH) as nprocs workers and waits for all.
 * Returns LT_OK when the job ran (res->exit_code tells how it ended; a
 * failure is also printed as "lazytpu-run: <message>" unless quiet), or
 * LT_ERR_ARG / LT_ERR_INTERNAL when it could not start (message set).
 * Temporarily blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP in the calling thread
 * (call it from a single-threaded process, like the CLI). */
lt_status lt_launch(const lt_launch_opts *opts, char *const argv[],
                    lt_launch_result *res);

/* "SIGKILL" etc. for a signal number ("SIG?" if unknown). */
const char *lt_signal_name(int sig);

#endif
