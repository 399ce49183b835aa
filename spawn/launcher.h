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
 *   LAZYTPU_OMP_THREADS (the core's kernels) unless set;
 *   OPENBLAS_NUM_THREADS=1 unless set (the core splits GEMMs itself);
 *   OMP_WAIT_POLICY=PASSIVE unless set when N > online CPUs
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
 * Even if the launcher itself is killed (SIGKILL): workers get SIGKILL as
 * their parent-death signal, and a janitor process (forked first, in its
 * own session) unlinks the segment and kills the workers' groups when the
 * launcher's end of its pipe closes without "done".
 *
 * Several hosts (num_hosts > 1, docs/multihost.md): this launcher is the
 * leader of host `host_index`; its workers are global ordinals
 * host_index * nprocs + k and also get LAZYTPU_HOST_INDEX,
 * LAZYTPU_NUM_HOSTS (OMPI_* / PMIX_* variables are removed from their
 * environment: workers never join the MPI job). `link` connects the
 * leaders: it serves the host's collectives (spawn/hostlink.h), carries a
 * local failure to every other host (which stop all their workers and
 * report the same message, naming host, ordinal and cause), and at the end
 * waits for every host and gathers the metrics reports to host 0, which
 * writes the merged file (per host and total).
 */
#ifndef LT_LAUNCHER_H
#define LT_LAUNCHER_H

#include <stddef.h>
#include "lazytpu.h"

typedef struct lt_world lt_world;

/* The inter-host link of a host leader (over MPI: spawn/hosts.h, linked
 * into lazytpu-run only, so that liblazytpu never needs MPI). Callbacks run
 * on the launcher's thread. */
typedef struct lt_launch_link {
    void *ctx;
    /* After the workers are forked: connects to the other hosts and serves
     * this host's collectives on w (in a thread of its own). Returns a file
     * descriptor that is readable while an event is pending, or -1 with
     * the message set. */
    int (*start)(void *ctx, lt_world *w);
    /* The pending event: 0 none; 1 a failure elsewhere or of the link
     * itself (*code, *ordinal (global, -1 if none) and msg filled); 2 every
     * host finished (after finish). */
    int (*event)(void *ctx, int *code, int *ordinal, char *msg, size_t cap);
    /* The first local failure: tell every other host (asynchronous). */
    void (*fault)(void *ctx, int code, int ordinal, const char *msg);
    /* Every local worker exited 0: wait for the other hosts. reports[k] is
     * local worker k's metrics report (malloc'd or NULL; n entries; the
     * link takes ownership of the strings, not of the array). Event 2 or 1
     * follows. */
    void (*finish)(void *ctx, char **reports, int n);
    /* After event 2, on host 0: the reports of every worker in global
     * ordinal order (num_hosts * nprocs entries, NULL when missing) and of
     * every host's proxy (num_hosts entries). Owned by the link. */
    void (*reports)(void *ctx, char ***ordinals, char ***hosts);
    /* Ends the link: delivers a pending fault (bounded wait), stops the
     * thread, leaves MPI. NULL-safe on a link never started. */
    void (*stop)(void *ctx);
} lt_launch_link;

typedef struct lt_launch_opts {
    int nprocs;               /* workers, 1..LT_WORLD_MAX_RANKS */
    double timeout_s;         /* wall-clock limit for the job; <= 0: none */
    double grace_s;           /* SIGTERM -> SIGKILL delay; <= 0: 5 s */
    size_t shm_bytes;         /* 0: LAZYTPU_SHM_BYTES or the default */
    const char *metrics_path; /* merge per-ordinal metrics here; NULL: off */
    int quiet;                /* 1: do not print the failure line */
    int host_index;           /* this host (0 on one host) */
    int num_hosts;            /* 0 or 1: one host; > 1: needs link */
    const lt_launch_link *link;
} lt_launch_opts;

typedef struct lt_launch_result {
    int exit_code;            /* 0 ok; worker's code; 128+signal; 124 timeout */
    int failed_ordinal;       /* first failing worker (global), -1 if none */
    char message[1024];       /* "worker 3 died: killed by signal 9 (SIGKILL)",
                                 "worker 5 (host 1, local ordinal 1) died: ...",
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
