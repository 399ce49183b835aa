/*
 * spawn/hosts.h — the inter-host link of a host leader over MPI (Open MPI):
 * the lt_launch_link of spawn/launcher.h. Compiled into lazytpu-run only
 * (LAZYTPU_HAVE_MPI), never into liblazytpu: workers do not use MPI.
 *
 * One thread per leader ("the proxy") calls MPI (MPI_THREAD_FUNNELED:
 * MPI_Init_thread, every call and MPI_Finalize happen on it). It
 *   - connects: checks that every host runs the same number of cores and
 *     agrees on the usable result-slot size (the smallest);
 *   - serves its host's requests (hostlink.h): AGREE exchanges fixed-size
 *     records point to point (so that a host that does not arrive is
 *     named), REDUCE is an alltoallv of host partials + a reduction in host
 *     order + an in-place allgatherv, RSCATTER an alltoall + reduction,
 *     GATHER an in-place allgather, BCAST a broadcast. Every MPI call is
 *     nonblocking and polled, together with the fault channel, the
 *     launcher's commands and the collective timeout
 *     (LAZYTPU_COLLECTIVE_TIMEOUT), so the proxy never blocks in MPI;
 *   - carries faults: a local failure is sent (synchronous-mode sends,
 *     waited for up to 3 s so the message arrives before this launcher
 *     exits and mpirun ends the job) to every other leader, which has a
 *     receive posted on a communicator of its own;
 *   - finishes: sends a FINISHED record to every host (a host still in a
 *     collective then fails with a message naming both sides), gathers
 *     the metrics reports to host 0 and leaves MPI.
 */
#ifndef LT_HOSTS_H
#define LT_HOSTS_H

#include "launcher.h"

/* A link for host `host_index` of `num_hosts` (from OMPI_COMM_WORLD_RANK /
 * _SIZE: read before MPI_Init, which happens in start). NULL if out of
 * memory. Free with lt_hosts_link_free after stop. */
lt_launch_link *lt_hosts_link_new(int host_index, int num_hosts);
void lt_hosts_link_free(lt_launch_link *link);

#endif
