/*
 * asks - a process that asks to move while another move of it is under way.
 *
 *   asks MIB MS KERNEL
 *
 * Writes MIB MiB of memory, prints "ready", then keeps rewriting all of
 * it for MS milliseconds (a copy-mode migration of it starts meanwhile,
 * and its pre-copy cannot converge), then asks to move to kernel KERNEL
 * of its node with kmigrate_to() and prints "kmigrate_to(KERNEL) = ERR,
 * on NODE.INDEX". Exit status 0 if it runs on KERNEL then, 1 if not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atoll.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: asks MIB MS KERNEL\n");
        return 2;
    }
    size_t bytes = (size_t)strtoul(argv[1], NULL, 10) << 20;
    long ms = strtol(argv[2], NULL, 10);
    int kernel = atoi(argv[3]);
    if (bytes == 0) {
        fprintf(stderr, "asks: MIB must be at least 1\n");
        return 2;
    }
    unsigned char *memory = malloc(bytes);
    if (!memory) {
        perror("asks");
        return 2;
    }
    for (size_t i = 0; i < bytes; i += 4096)
        memory[i] = (unsigned char)(i >> 12);
    printf("ready\n");
    fflush(stdout);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    /* The clock is read every MiB: while the pre-copy tracks them, each
     * page's first write after a round costs a fault. */
    for (size_t i = 0;; i = (i + 4096) % bytes) {
        memory[i]++;
        if (i % (1 << 20))
            continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L >= ms)
            break;
    }
    int err = kmigrate_to(kernel);
    printf("kmigrate_to(%d) = %d, on %d.%d\n", kernel, err, atoll_kernel_node(),
           atoll_kernel_index());
    return atoll_kernel_index() == kernel ? 0 : 1;
}
