/*
 * spawn/lazytpu_run_main.c — `lazytpu-run`: run a command as N workers, one
 * simulated core each, over a shared-memory world (see spawn/launcher.h);
 * on several hosts, one lazytpu-run per host under mpirun
 * (docs/multihost.md).
 *
 *   lazytpu-run -n 8 [--timeout SECONDS] [--grace SECONDS] [--metrics FILE]
 *               [--shm-bytes BYTES] [--status-file FILE] [--quiet] [--] CMD...
 *   mpirun -np H [mpirun options] lazytpu-run -n C [...] [--] CMD...
 *   lazytpu-run --hosts H -n C [--hostfile FILE] [--mpirun PATH]
 *               [--mpi-arg ARG]... [...] [--] CMD...
 *
 * Under mpirun (OMPI_COMM_WORLD_SIZE > 1 in the environment) the launcher
 * is the leader of host OMPI_COMM_WORLD_RANK. --hosts runs mpirun for you
 * (one launcher per host, by default all on this machine).
 *
 * Exit code: 0 when every worker exited 0; else the first failing worker's
 * exit code, 128+signal if it was killed, 124 on timeout, 128+signal when
 * the launcher itself was interrupted; 2 on a usage error.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "launcher.h"
#include "options.h"
#ifdef LAZYTPU_HAVE_MPI
#include "hosts.h"
#endif

#define MAX_MPI_ARGS 64

#ifndef LAZYTPU_HAVE_MPI
static const char *how_to_enable =
    "this lazytpu-run was built without MPI: install Open MPI "
    "(apt-get install libopenmpi-dev openmpi-bin) and rebuild lazytpu "
    "(cmake -DLAZYTPU_MPI=ON finds it with FindMPI)";
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazytpu-run -n N [--timeout SECONDS] [--grace SECONDS]\n"
            "                   [--metrics FILE] [--shm-bytes BYTES]\n"
            "                   [--status-file FILE] [--quiet] [--] CMD [ARGS...]\n"
            "       lazytpu-run --hosts H -n N [--hostfile FILE] [--mpirun PATH]\n"
            "                   [--mpi-arg ARG]... [options] [--] CMD [ARGS...]\n"
            "       mpirun -np H [mpirun options] lazytpu-run -n N [options] CMD\n"
            "Runs CMD as N worker processes (ordinals 0..N-1), each driving one\n"
            "simulated core, with a shared-memory world for collectives. On H\n"
            "hosts (one lazytpu-run per host under mpirun) the world has H x N\n"
            "ordinals; the launchers connect the hosts over MPI.\n"
            "  -n, --nprocs N       workers per host (1..64)\n"
            "  --timeout SECONDS    stop everything after this long (exit 124)\n"
            "  --grace SECONDS      SIGTERM -> SIGKILL delay on failure (default 5)\n"
            "  --metrics FILE       merge the workers' metrics reports into FILE\n"
            "  --shm-bytes BYTES    shared-memory size (default 256 MiB)\n"
            "  --status-file FILE   write \"<exit code>\\t<ordinal>\\t<message>\"\n"
            "                       (ordinal global; on several hosts every host\n"
            "                       writes its own outcome)\n"
            "  --quiet              do not print the failure line\n"
            "  --hosts H            run H hosts through mpirun (this machine\n"
            "                       unless --hostfile; needs MPI)\n"
            "  --hostfile FILE      mpirun's hostfile: one launcher per node\n"
            "  --mpirun PATH        mpirun to use (default: $LAZYTPU_MPIRUN or\n"
            "                       mpirun in PATH)\n"
            "  --mpi-arg ARG        pass ARG to mpirun (repeatable)\n");
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < 0) return 0;
    *out = v;
    return 1;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* OMPI_COMM_WORLD_RANK / _SIZE: 1 and the values when both are valid, 0
 * when absent, -1 when malformed. */
static int mpi_env(int *rank, int *size)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    if (!s || !*s) return 0;
    if (!r || !parse_int(s, 1, INT_MAX, size) ||
        !parse_int(r, 0, *size - 1, rank))
        return -1;
    return 1;
}

typedef struct cli {
    lt_launch_opts o;
    const char *status_file;
    int hosts;
    const char *hostfile, *mpirun;
    const char *mpi_args[MAX_MPI_ARGS];
    int n_mpi_args;
    char *const *cmd;
    int argc;
    char **argv;
} cli;

#ifdef LAZYTPU_HAVE_MPI
/* Execs mpirun -np H ... <this lazytpu-run> <the options> -- CMD. Returns
 * only on failure (exit code). */
static int exec_mpirun(const cli *c, int cmd_index)
{
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "lazytpu-run: cannot find its own executable\n");
        return 1;
    }
    self[len] = 0;
    const char *mpirun = c->mpirun ? c->mpirun : lt_opt_str(LT_OPT_MPIRUN);
    char **av = calloc((size_t)c->argc + MAX_MPI_ARGS + 64, sizeof *av);
    if (!av) return 1;
    int a = 0;
    char np[16];
    snprintf(np, sizeof np, "%d", c->hosts);
    av[a++] = (char *)mpirun;
    av[a++] = "-np";
    av[a++] = np;
    /* the workers of a host share its CPUs: do not bind the launcher (its
     * workers would inherit one core) */
    av[a++] = "--bind-to";
    av[a++] = "none";
    if (c->hostfile) {
        av[a++] = "--hostfile";
        av[a++] = (char *)c->hostfile;
        av[a++] = "--map-by";
        av[a++] = "ppr:1:node";
    } else {
        av[a++] = "--oversubscribe";   /* simulated hosts on one machine */
    }
    if (geteuid() == 0) av[a++] = "--allow-run-as-root";
    /* forward lazytpu's settings to remote nodes too */
    static char xbuf[64][160];
    int nx = 0;
    extern char **environ;
    for (char **e = environ; *e && nx < 60; e++) {
        if (strncmp(*e, "LAZYTPU_", 8) != 0 && strncmp(*e, "PATH=", 5) != 0 &&
            strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0 &&
            strncmp(*e, "PYTHONPATH=", 11) != 0 &&
            strncmp(*e, "OMP_", 4) != 0 && strncmp(*e, "OPENBLAS_", 9) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq || (size_t)(eq - *e) >= sizeof xbuf[0]) continue;
        snprintf(xbuf[nx], sizeof xbuf[nx], "%.*s", (int)(eq - *e), *e);
        av[a++] = "-x";
        av[a++] = xbuf[nx++];
    }
    for (int i = 0; i < c->n_mpi_args; i++) av[a++] = (char *)c->mpi_args[i];
    av[a++] = self;
    /* our own options again, without the mpirun-only ones */
    static char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", c->o.nprocs);
    av[a++] = "-n";
    av[a++] = nbuf;
    static char tbuf[32], gbuf[32], sbuf[32];
    if (c->o.timeout_s > 0) {
        snprintf(tbuf, sizeof tbuf, "%g", c->o.timeout_s);
        av[a++] = "--timeout";
        av[a++] = tbuf;
    }
    if (c->o.grace_s > 0) {
        snprintf(gbuf, sizeof gbuf, "%g", c->o.grace_s);
        av[a++] = "--grace";
        av[a++] = gbuf;
    }
    if (c->o.metrics_path) {
        av[a++] = "--metrics";
        av[a++] = (char *)c->o.metrics_path;
    }
    if (c->o.shm_bytes) {
        snprintf(sbuf, sizeof sbuf, "%zu", c->o.shm_bytes);
        av[a++] = "--shm-bytes";
        av[a++] = sbuf;
    }
    if (c->status_file) {
        av[a++] = "--status-file";
        av[a++] = (char *)c->status_file;
    }
    if (c->o.quiet) av[a++] = "--quiet";
    av[a++] = "--";
    for (int i = cmd_index; i < c->argc; i++) av[a++] = c->argv[i];
    av[a] = NULL;
    fflush(stdout);
    execvp(mpirun, av);
    fprintf(stderr, "lazytpu-run: cannot run %s: %m (--hosts needs Open MPI's "
            "mpirun: apt-get install openmpi-bin, or --mpirun PATH)\n", mpirun);
    free(av);
    return 127;
}
#endif

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "nprocs", required_argument, 0, 'n' },
        { "timeout", required_argument, 0, 't' },
        { "grace", required_argument, 0, 'g' },
        { "metrics", required_argument, 0, 'm' },
        { "shm-bytes", required_argument, 0, 's' },
        { "status-file", required_argument, 0, 'f' },
        { "quiet", no_argument, 0, 'q' },
        { "hosts", required_argument, 0, 'H' },
        { "hostfile", required_argument, 0, 'F' },
        { "mpirun", required_argument, 0, 'M' },
        { "mpi-arg", required_argument, 0, 'A' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    cli c;
    memset(&c, 0, sizeof c);
    c.o.nprocs = 8;
    c.argc = argc;
    c.argv = argv;
    int opt;
    while ((opt = getopt_long(argc, argv, "+n:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            if (!parse_int(optarg, 1, 64, &c.o.nprocs)) {
                fprintf(stderr, "lazytpu-run: -n wants 1..64, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 't':
            if (!parse_double(optarg, &c.o.timeout_s)) {
                fprintf(stderr, "lazytpu-run: bad --timeout '%s'\n", optarg);
                return 2;
            }
            break;
        case 'g':
            if (!parse_double(optarg, &c.o.grace_s)) {
                fprintf(stderr, "lazytpu-run: bad --grace '%s'\n", optarg);
                return 2;
            }
            break;
        case 'm': c.o.metrics_path = optarg; break;
        case 's': c.o.shm_bytes = (size_t)strtoull(optarg, NULL, 0); break;
        case 'f': c.status_file = optarg; break;
        case 'q': c.o.quiet = 1; break;
        case 'H':
            if (!parse_int(optarg, 1, 64, &c.hosts)) {
                fprintf(stderr, "lazytpu-run: --hosts wants 1..64, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'F': c.hostfile = optarg; break;
        case 'M': c.mpirun = optarg; break;
        case 'A':
            if (c.n_mpi_args == MAX_MPI_ARGS) {
                fprintf(stderr, "lazytpu-run: too many --mpi-arg\n");
                return 2;
            }
            c.mpi_args[c.n_mpi_args++] = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    int mrank = 0, msize = 1;
    int under_mpi = mpi_env(&mrank, &msize);
    if (under_mpi < 0) {
        fprintf(stderr, "lazytpu-run: malformed OMPI_COMM_WORLD_RANK / "
                "OMPI_COMM_WORLD_SIZE\n");
        return 2;
    }
    if (c.hosts > 1 || c.hostfile) {
        if (under_mpi) {
            fprintf(stderr, "lazytpu-run: --hosts/--hostfile start mpirun; "
                    "under mpirun already, leave them out\n");
            return 2;
        }
#ifndef LAZYTPU_HAVE_MPI
        fprintf(stderr, "lazytpu-run: --hosts %d: %s\n", c.hosts, how_to_enable);
        return 2;
#else
        if (c.hosts < 1) c.hosts = 1;
        return exec_mpirun(&c, optind);
#endif
    }
    lt_launch_link *link = NULL;
    if (under_mpi && msize > 1) {
#ifndef LAZYTPU_HAVE_MPI
        fprintf(stderr, "lazytpu-run: started by mpirun as host %d of %d, but "
                "%s\n", mrank, msize, how_to_enable);
        return 2;
#else
        link = lt_hosts_link_new(mrank, msize);
        if (!link) {
            fprintf(stderr, "lazytpu-run: out of memory\n");
            return 1;
        }
        c.o.host_index = mrank;
        c.o.num_hosts = msize;
        c.o.link = link;
#endif
    }
    lt_launch_result res;
    lt_status st = lt_launch(&c.o, argv + optind, &res);
    if (st != LT_OK) {
        fprintf(stderr, "%s\n", lt_last_error());
        if (!res.exit_code) res.exit_code = 1;
        if (!res.message[0])
            snprintf(res.message, sizeof res.message, "%s", lt_last_error());
    }
    if (c.status_file) {
        /* every host writes (Python's spawn on each host reads its own);
         * atomically, as hosts on one machine may share the path */
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", c.status_file, (int)getpid());
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "%d\t%d\t%s\n", res.exit_code, res.failed_ordinal,
                    res.message);
            fclose(f);
            if (rename(tmp, c.status_file) != 0) remove(tmp);
        }
    }
    fflush(stdout);
    fflush(stderr);
    /* after a failure MPI was left without MPI_Finalize (another host may
     * be gone): leave without running its destructors */
    if (link && res.exit_code != 0) _exit(res.exit_code);
#ifdef LAZYTPU_HAVE_MPI
    lt_hosts_link_free(link);
#endif
    return res.exit_code;
}
