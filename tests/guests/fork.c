/*
 * fork - atoll_fork(): a child that is a copy of its parent (globals, heap,
 * stack, descriptors) returns 0 from the same call, on the kernel asked for.
 *
 *   fork [KERNEL [MIB]]  KERNEL: an index on this node, NODE.INDEX, or any
 *                        (default: the next kernel of this node); MIB: the
 *                        heap (default 4), and the child says when it
 *                        starts, checks the heap, says how that went and
 *                        then waits to be killed
 *
 * The parent fills MIB MiB of heap with a pattern and sets a global and a
 * local, then forks. The child checks all three, changes them, reports the
 * kernel it runs on, forks a grandchild on its own kernel (which checks
 * the child's changes), and exits with 40 + the grandchild's status. The
 * parent checks that its own copies did not change and that the child
 * ended with 47. Prints one line per check; exits 0 when all held.
 */
#include <atoll.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t heap_bytes = 4 << 20;

static int global = 1234;

static int pattern_ok(const unsigned char *p, unsigned char seed)
{
    for (size_t i = 0; i < heap_bytes; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

static int parse_kernel(const char *arg)
{
    if (strcmp(arg, "any") == 0)
        return ATOLL_KERNEL_ANY;
    const char *dot = strchr(arg, '.');
    if (dot != NULL)
        return ATOLL_KERNEL(atoi(arg), atoi(dot + 1));
    return atoi(arg);
}

static int grandchild(int local)
{
    atoll_pid_t pid = atoll_fork(atoll_kernel_index());
    if (pid < 0) {
        printf("child: fork failed: %s\n", strerror((int)-pid));
        return 1;
    }
    if (pid == 0) {
        /* The grandchild sees the child's changes. */
        int ok = global == 99 && local == 77;
        printf("grandchild: sees its parent's changes: %s\n", ok ? "yes" : "no");
        exit(ok ? 7 : 1);
    }
    int status = -1;
    if (atoll_wait(pid, &status, NULL) != 0)
        return 1;
    return status;
}

int main(int argc, char **argv)
{
    int to = argc > 1 ? parse_kernel(argv[1])
                      : (atoll_kernel_index() + 1) % atoll_kernel_count();
    int tell = argc > 2;
    if (tell)
        heap_bytes = (size_t)atoi(argv[2]) << 20;
    unsigned char *heap = malloc(heap_bytes);
    if (heap == NULL)
        return 1;
    for (size_t i = 0; i < heap_bytes; i++)
        heap[i] = (unsigned char)(3 + i * 7);
    int local = 55;

    atoll_pid_t pid = atoll_fork(to);
    if (pid < 0) {
        printf("parent: fork failed: %s\n", strerror((int)-pid));
        return 1;
    }
    if (pid == 0) {
        if (tell) {
            printf("child: started\n");
            fflush(stdout);
        }
        int ok = global == 1234 && local == 55 && pattern_ok(heap, 3) &&
                 atoll_getpid() != 0;
        printf("child: a copy of its parent: %s\n", ok ? "yes" : "no");
        if (tell) {
            fflush(stdout);
            for (;;)
                sleep(1);
        }
        printf("child: on node %d kernel %d\n", atoll_kernel_node(), atoll_kernel_index());
        global = 99;
        local = 77;
        memset(heap, 0, heap_bytes);
        fflush(stdout);
        int status = grandchild(local);
        return ok ? 40 + status : 1;
    }
    int status = -1;
    atoll_pid_t who = 0;
    if (atoll_wait(pid, &status, &who) != 0 || who != pid) {
        printf("parent: no child to wait for\n");
        return 1;
    }
    int ok = global == 1234 && local == 55 && pattern_ok(heap, 3);
    printf("parent: its own memory unchanged: %s\n", ok ? "yes" : "no");
    printf("parent: child ended with %d\n", status);
    return ok && status == 47 ? 0 : 1;
}
