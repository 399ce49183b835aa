/*
 * spawn/janitor.c — the launcher's janitor process (see janitor.h).
 * Protocol on the pipe: "w <pgid>\n" per worker, "d\n" for a normal end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "janitor.h"

#define JAN_MAX_GROUPS 256

/* Start time of process `pid` (clock ticks since boot, /proc/<pid>/stat
 * field 22), 0 if there is no such process. */
static unsigned long long start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');           /* after "pid (comm)" */
    if (!p) return 0;
    unsigned long long v = 0;
    /* fields 3.. follow; starttime is field 22 */
    for (int field = 3; p && field <= 22; field++) {
        p = strchr(p + 1, ' ');
        if (p && field == 22) v = strtoull(p + 1, NULL, 10);
    }
    return v;
}

/* Whether group `pgid` may still be ours: its leader, the worker, was
 * killed by its parent-death signal and reaped by someone else meanwhile,
 * so its number may already belong to another process. A number whose
 * process is gone can only still be a group id if that group is ours; a
 * process with that number that started at another time than the worker
 * (`born`, 0 if the worker was already gone when we were told) is not. */
static int may_be_ours(pid_t pgid, unsigned long long born)
{
    unsigned long long now = start_time(pgid);
    return now == 0 || (born != 0 && now == born);
}

static void janitor_main(int fd, const char *shm_name)
{
    pid_t groups[JAN_MAX_GROUPS];
    unsigned long long born[JAN_MAX_GROUPS];
    int ngroups = 0, done = 0;
    char buf[4096], line[64];
    size_t ll = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] != '\n') {
                if (ll + 1 < sizeof line) line[ll++] = buf[i];
                continue;
            }
            line[ll] = 0;
            ll = 0;
            if (line[0] == 'd') done = 1;
            else if (line[0] == 'w' && ngroups < JAN_MAX_GROUPS) {
                groups[ngroups] = (pid_t)atol(line + 1);
                born[ngroups] = start_time(groups[ngroups]);
                ngroups++;
            }
        }
    }
    if (!done)
        for (int i = 0; i < ngroups; i++)
            if (groups[i] > 1 && may_be_ours(groups[i], born[i]))
                kill(-groups[i], SIGKILL);
    shm_unlink(shm_name);
    _exit(0);
}

int lt_janitor_start(lt_janitor *j, const char *shm_name)
{
    j->pid = 0;
    j->fd = -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    char name[256];
    snprintf(name, sizeof name, "%s", shm_name);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        setsid();
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGCHLD, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(p[1]);
        int fd = fcntl(p[0], F_DUPFD, 10);
        if (fd < 0) fd = p[0];
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
        }
        dup2(fd, 3);
        close_range(4, ~0U, 0);
        janitor_main(3, name);
    }
    close(p[0]);
    j->pid = pid;
    j->fd = p[1];
    return 0;
}

void lt_janitor_watch(lt_janitor *j, pid_t pgid)
{
    if (j->fd < 0) return;
    char line[32];
    int n = snprintf(line, sizeof line, "w %d\n", (int)pgid);
    if (write(j->fd, line, (size_t)n) != n) { /* janitor gone: nothing to do */ }
}

void lt_janitor_done(lt_janitor *j)
{
    if (j->fd >= 0) {
        if (write(j->fd, "d\n", 2) != 2) { /* janitor gone */ }
        close(j->fd);
        j->fd = -1;
    }
    if (j->pid > 0) {
        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR) {}
        j->pid = 0;
    }
}
