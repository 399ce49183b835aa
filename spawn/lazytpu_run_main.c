/*
 * spawn/lazytpu_run_main.c — `lazytpu-run`: run a command as N workers, one
 * simulated core each, over a shared-memory world (see spawn/launcher.h).
 *
 *   lazytpu-run -n 8 [--timeout SECONDS] [--grace SECONDS] [--metrics FILE]
 *               [--shm-bytes BYTES] [--status-file FILE] [--quiet] [--] CMD...
 *
 * Exit code: 0 when every worker exited 0; else the first failing worker's
 * exit code, 128+signal if it was killed, 124 on timeout, 128+signal when
 * the launcher itself was interrupted; 2 on a usage error.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "launcher.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazytpu-run -n N [--timeout SECONDS] [--grace SECONDS]\n"
            "                   [--metrics FILE] [--shm-bytes BYTES]\n"
            "                   [--status-file FILE] [--quiet] [--] CMD [ARGS...]\n"
            "Runs CMD as N worker processes (ordinals 0..N-1), each driving one\n"
            "simulated core, with a shared-memory world for collectives.\n"
            "  -n, --nprocs N       number of workers (1..64)\n"
            "  --timeout SECONDS    stop everything after this long (exit 124)\n"
            "  --grace SECONDS      SIGTERM -> SIGKILL delay on failure (default 5)\n"
            "  --metrics FILE       merge the workers' metrics reports into FILE\n"
            "  --shm-bytes BYTES    shared-memory size (default 256 MiB)\n"
            "  --status-file FILE   write \"<exit code>\\t<ordinal>\\t<message>\"\n"
            "  --quiet              do not print the failure line\n");
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < 0) return 0;
    *out = v;
    return 1;
}

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
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    lt_launch_opts o;
    memset(&o, 0, sizeof o);
    o.nprocs = 8;
    const char *status_file = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "+n:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 64) {
                fprintf(stderr, "lazytpu-run: -n wants 1..64, got '%s'\n", optarg);
                return 2;
            }
            o.nprocs = (int)v;
            break;
        }
        case 't':
            if (!parse_double(optarg, &o.timeout_s)) {
                fprintf(stderr, "lazytpu-run: bad --timeout '%s'\n", optarg);
                return 2;
            }
            break;
        case 'g':
            if (!parse_double(optarg, &o.grace_s)) {
                fprintf(stderr, "lazytpu-run: bad --grace '%s'\n", optarg);
                return 2;
            }
            break;
        case 'm': o.metrics_path = optarg; break;
        case 's': o.shm_bytes = (size_t)strtoull(optarg, NULL, 0); break;
        case 'f': status_file = optarg; break;
        case 'q': o.quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    lt_launch_result res;
    lt_status st = lt_launch(&o, argv + optind, &res);
    if (st != LT_OK) {
        fprintf(stderr, "%s\n", lt_last_error());
        if (!res.exit_code) res.exit_code = 1;
        if (!res.message[0])
            snprintf(res.message, sizeof res.message, "%s", lt_last_error());
    }
    if (status_file) {
        FILE *f = fopen(status_file, "w");
        if (f) {
            fprintf(f, "%d\t%d\t%s\n", res.exit_code, res.failed_ordinal,
                    res.message);
            fclose(f);
        }
    }
    return res.exit_code;
}
