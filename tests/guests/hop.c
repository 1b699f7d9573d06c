/*
 * hop - a process that moves itself from kernel to kernel.
 *
 *   hop ROUNDS
 *
 * Visits every kernel of the node ROUNDS times with kmigrate_to(), checking
 * after each move that it runs where it asked to, with the same pid, and
 * that its memory came along (a running checksum). Prints one line per move
 * and "hop: ok SUM" at the end. Also checks that a kernel that does not
 * exist is EINVAL and the current one is 0. Exit status 1 on a failed check.
 */
#include <stdio.h>
#include <stdlib.h>

#include <atoll.h>

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 1;
    int n = atoll_kernel_count();
    atoll_pid_t me = atoll_getpid();
    unsigned sum = 0;
    if (kmigrate_to(n) != EINVAL || kmigrate_to(-1) != EINVAL || kmigrate_to(atoll_kernel_index()) != 0) {
        fprintf(stderr, "hop: bad kernels not refused\n");
        return 1;
    }
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < n; k++) {
            int to = (atoll_kernel_index() + 1) % n;
            sum = sum * 31 + (unsigned)to;
            int err = kmigrate_to(to);
            if (err != 0 || atoll_kernel_index() != to || atoll_getpid() != me) {
                fprintf(stderr, "hop: kmigrate_to(%d) = %d, now on %d\n", to, err, atoll_kernel_index());
                return 1;
            }
            printf("hop %ld.%d: on kernel %d\n", r, k, to);
        }
    }
    printf("hop: ok %u\n", sum);
    return 0;
}
