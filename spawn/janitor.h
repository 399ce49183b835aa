/*
 * spawn/janitor.h — cleans up after a launcher that was killed.
 *
 * The launcher forks the janitor before its workers. The janitor runs in a
 * session of its own (a signal to the launcher's process group, e.g. from
 * mpirun's daemon, does not reach it), with nothing open but the read end
 * of a pipe from the launcher. It learns the workers' process groups
 * through the pipe. When the pipe closes without "done" (the launcher
 * died, even by SIGKILL), it SIGKILLs those groups (a group whose number
 * now belongs to a process that is not the worker, i.e. started at another
 * time: a reused pid, is left alone); in every case it then
 * unlinks the shared-memory segment (a no-op if the launcher did) and
 * exits. Together with the workers' parent-death signal this guarantees
 * that no worker and no /dev/shm entry outlives the launcher.
 */
#ifndef LT_JANITOR_H
#define LT_JANITOR_H

#include <sys/types.h>

typedef struct lt_janitor {
    pid_t pid;      /* 0: none */
    int fd;         /* write end of the pipe, -1: none */
} lt_janitor;

/* Forks the janitor for segment `shm_name`. Call while the process has a
 * single thread. Returns 0, or -1 with errno set (j is then inert: the
 * launcher runs without one). */
int lt_janitor_start(lt_janitor *j, const char *shm_name);

/* Tells the janitor about a worker's process group. No-op when inert. */
void lt_janitor_watch(lt_janitor *j, pid_t pgid);

/* Normal end (workers reaped): the janitor just unlinks the segment and
 * exits; waits for it. No-op when inert. */
void lt_janitor_done(lt_janitor *j);

#endif
