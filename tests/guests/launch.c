/*
 * launch - starts another program by path and waits for it.
 *
 *   launch MODULE [ARGS...]
 *
 * Spawns MODULE (a path beneath a preopened directory) with argv
 * MODULE ARGS..., on any kernel, waits for it, and prints
 * "launch: MODULE exited with status N"; or, if the spawn fails,
 * "launch: MODULE: spawn failed: ERRNO" and exits 1.
 */
#include <stdio.h>
#include <string.h>

#include <atoll.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: launch MODULE [ARGS...]\n");
        return 2;
    }
    atoll_pid_t child;
    int err = atoll_spawn(argv[1], argv + 1, ATOLL_KERNEL_ANY, &child);
    if (err != 0) {
        printf("launch: %s: spawn failed: %s\n", argv[1], strerror(err));
        return 1;
    }
    int status;
    err = atoll_wait(child, &status, NULL);
    if (err != 0) {
        printf("launch: wait failed: %s\n", strerror(err));
        return 1;
    }
    printf("launch: %s exited with status %d\n", argv[1], status);
    return 0;
}
