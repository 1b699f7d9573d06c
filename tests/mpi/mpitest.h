/*
 * mpitest.h - what the MPI tests share: checks that name the rank and line,
 * and moving the rank between kernels while a test runs.
 *
 * With ATOLL_MPI_TEST_MOVE=1 in the environment, `move()` migrates the
 * calling rank to the next kernel of its node (or, with =node, to the same
 * kernel index of the next node), so every test also runs with its ranks
 * moving in the middle of point-to-point traffic and collectives.
 */
#ifndef MPITEST_H
#define MPITEST_H

#include <atoll.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_rank, test_size, test_moves;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", test_rank, __FILE__,     \
                    __LINE__, #cond);                                                      \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS)

static inline void move(void)
{
    const char *how = getenv("ATOLL_MPI_TEST_MOVE");
    if (how == NULL || how[0] == '\0' || strcmp(how, "0") == 0)
        return;
    int to;
    if (strcmp(how, "node") == 0) {
        /* The next node of a cluster of ATOLL_MPI_TEST_NODES nodes. */
        int nodes = atoi(getenv("ATOLL_MPI_TEST_NODES") ? getenv("ATOLL_MPI_TEST_NODES") : "1");
        to = ATOLL_KERNEL((atoll_kernel_node() + 1) % nodes, atoll_kernel_index());
    } else {
        to = (atoll_kernel_index() + 1) % atoll_kernel_count();
    }
    int err = atoll_migrate_to(to);
    CHECK(err == 0 || err == EAGAIN);
    if (err == 0)
        test_moves++;
}

static inline void test_init(int *argc, char ***argv)
{
    OK(MPI_Init(argc, argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &test_rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &test_size));
}

/* Ends the test: every rank agrees it passed, rank 0 says so. */
static inline int test_end(const char *name)
{
    int moves = 0;
    OK(MPI_Reduce(&test_moves, &moves, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (test_rank == 0)
        printf("ok %s (%d ranks, %s)\n", name, test_size, moves > 0 ? "moving" : "still");
    OK(MPI_Finalize());
    return 0;
}

#endif
