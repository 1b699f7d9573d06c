/*
 * roam - a process that moves itself from node to node of a cluster.
 *
 *   roam NODES ROUNDS [LOG]
 *
 * ROUNDS times, visits kernel 0 of nodes 0 to NODES-1 in turn with
 * kmigrate_to(ATOLL_KERNEL(node, 0)), checking after each move that it runs
 * on the node it asked for, with the same pid, and that its memory came
 * along (a running checksum over a buffer it keeps rewriting). Prints one
 * line per move that does not depend on where it runs, and "roam: ok SUM"
 * at the end. Exit status 1 on a failed check.
 *
 * With LOG (a path beneath a preopened directory), it opens LOG before it
 * first moves, writes a line to it after each move through that one open
 * file, then reads it back: "roam: LOG has N lines, SUM".
 */
#include <stdio.h>
#include <stdlib.h>

#include <atoll.h>

static unsigned char buf[256 * 1024];

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 2;
    long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
    const char *path = argc > 3 ? argv[3] : NULL;
    FILE *log = NULL;
    if (path && !(log = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    atoll_pid_t me = atoll_getpid();
    unsigned sum = 0;
    for (long r = 0; r < rounds; r++) {
        for (int n = 0; n < nodes; n++) {
            int to = (atoll_kernel_node() + 1) % nodes;
            for (size_t i = 0; i < sizeof buf; i++)
                buf[i] = (unsigned char)(buf[i] * 7 + i + (unsigned)to);
            int err = kmigrate_to(ATOLL_KERNEL(to, 0));
            if (err != 0 || atoll_kernel_node() != to || atoll_kernel_index() != 0 ||
                atoll_getpid() != me) {
                fprintf(stderr, "roam: kmigrate_to(node %d) = %d, now on %d.%d\n", to, err,
                        atoll_kernel_node(), atoll_kernel_index());
                return 1;
            }
            for (size_t i = 0; i < sizeof buf; i += 4096)
                sum = sum * 31 + buf[i];
            printf("roam %ld.%d: moved\n", r, n);
            if (log && (fprintf(log, "roam %ld.%d: on node %d\n", r, n, to) < 0 || fflush(log))) {
                perror(path);
                return 1;
            }
        }
    }
    if (log) {
        if (fclose(log) || !(log = fopen(path, "r"))) {
            perror(path);
            return 1;
        }
        int lines = 0, c;
        unsigned file_sum = 0;
        while ((c = getc(log)) != EOF) {
            file_sum = file_sum * 31 + (unsigned)c;
            lines += c == '\n';
        }
        fclose(log);
        printf("roam: %s has %d lines, %u\n", path, lines, file_sum);
    }
    printf("roam: ok %u\n", sum);
    return 0;
}
