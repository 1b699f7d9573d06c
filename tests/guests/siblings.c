/*
 * siblings - children forked one after another are each a copy of their
 * parent, never of an elder sibling, whose instance the next fork may
 * reuse (a spare, crates/process/src/spare.rs).
 *
 *   siblings N KERNEL    KERNEL: an index on this node, or NODE.INDEX
 *
 * The parent fills a heap buffer with a pattern, sets a global, and leaves
 * a static buffer zero (it never touches it). Then, N times, it forks a
 * child on KERNEL and waits for it. Each child checks that the heap, the
 * global and the static buffer are as the parent has them, then writes
 * over all three; every other child also grows the memory, by allocating
 * and filling 2 MiB more. A child exits 0 if its checks held. The parent
 * prints one line, "siblings: N copies", and exits 0 when every child did,
 * and when its own memory is still its own.
 */
#include <atoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAP (512 << 10)
#define SCRATCH (256 << 10)

static unsigned char scratch[SCRATCH];
static int global = 1234;

static int heap_ok(const unsigned char *heap)
{
    for (size_t i = 0; i < HEAP; i++)
        if (heap[i] != (unsigned char)(5 + i * 13))
            return 0;
    return 1;
}

static int scratch_zero(void)
{
    for (size_t i = 0; i < SCRATCH; i++)
        if (scratch[i] != 0)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: siblings N KERNEL\n");
        return 2;
    }
    int n = atoi(argv[1]);
    const char *dot = strchr(argv[2], '.');
    int kernel = dot != NULL ? ATOLL_KERNEL(atoi(argv[2]), atoi(dot + 1)) : atoi(argv[2]);
    unsigned char *heap = malloc(HEAP);
    if (heap == NULL)
        return 1;
    for (size_t i = 0; i < HEAP; i++)
        heap[i] = (unsigned char)(5 + i * 13);

    for (int i = 0; i < n; i++) {
        atoll_pid_t pid = atoll_fork(kernel);
        if (pid < 0) {
            printf("siblings: fork %d failed\n", i);
            return 1;
        }
        if (pid == 0) {
            int ok = global == 1234 && heap_ok(heap) && scratch_zero();
            if (!ok)
                printf("siblings: child %d is not a copy of its parent\n", i);
            global = 99 + i;
            memset(heap, 0xa5, HEAP);
            memset(scratch, 0x5a, SCRATCH);
            if (i % 2 == 1) {
                unsigned char *more = malloc(2 << 20);
                if (more != NULL)
                    memset(more, 0x77, 2 << 20);
            }
            exit(ok ? 0 : 1);
        }
        int status = -1;
        if (atoll_wait(pid, &status, NULL) != 0 || status != 0) {
            printf("siblings: child %d ended with %d\n", i, status);
            return 1;
        }
    }
    if (global != 1234 || !heap_ok(heap) || !scratch_zero()) {
        printf("siblings: the parent's memory changed\n");
        return 1;
    }
    printf("siblings: %d copies\n", n);
    return 0;
}
