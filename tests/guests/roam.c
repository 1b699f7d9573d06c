/*
 * roam - a process that moves itself from node to node of a cluster.
 *
 *   roam [-w BYTES] [-t] NODES ROUNDS [LOG]
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
 *
 * With -w, it also writes about BYTES of numbered lines to stdout before
 * each move, each line flushed as it goes: output written on every node,
 * whose order a reader can check. With -t, it traps right after its last
 * move, before it prints anything there: a process whose end comes while
 * its output from the node before is on its way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atoll.h>

static unsigned char buf[256 * 1024];

/* About `bytes` of lines "roam R.N: line I" to stdout, one write each. */
static void fill(long r, int n, long bytes)
{
    for (long i = 0, written = 0; written < bytes; i++) {
        int len = printf("roam %ld.%d: line %ld\n", r, n, i);
        fflush(stdout);
        written += len > 0 ? len : 1;
    }
}

int main(int argc, char **argv)
{
    long fill_bytes = 0;
    int trap = 0;
    if (argc > 2 && strcmp(argv[1], "-w") == 0) {
        fill_bytes = strtol(argv[2], NULL, 10);
        argv += 2;
        argc -= 2;
    }
    if (argc > 1 && strcmp(argv[1], "-t") == 0) {
        trap = 1;
        argv++;
        argc--;
    }
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
            fill(r, n, fill_bytes);
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
            if (trap && r == rounds - 1 && n == nodes - 1)
                __builtin_trap();
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
