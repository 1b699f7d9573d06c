/*
 * abort.c - a failing rank ends the whole job, as under mpirun.
 *
 *   abort.wasm abort   rank 1 calls MPI_Abort(MPI_COMM_WORLD, 3): the job's
 *                      status is 3
 *   abort.wasm trap    rank 1 traps (status 134)
 *   abort.wasm exit    rank 1 returns 5 from main without MPI_Finalize
 * The other ranks wait in MPI_Recv for a message that never comes; the
 * job ends only because they are ended.
 */
#include "mpitest.h"

int main(int argc, char **argv)
{
    test_init(&argc, &argv);
    CHECK(argc == 2);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (test_rank == 1) {
        if (strcmp(argv[1], "abort") == 0)
            MPI_Abort(MPI_COMM_WORLD, 3);
        if (strcmp(argv[1], "trap") == 0)
            __builtin_trap();
        return 5;
    }
    int v;
    OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    printf("rank %d got a message that was never sent\n", test_rank);
    return test_end("abort");
}
