/*
 * exec - atoll_exec(): a new program in the same process (same PID, same
 * parent, same descriptors), optionally on another kernel.
 *
 *   exec start KERNEL   prints its PID, then becomes `exec after PID` on
 *                       KERNEL (an index, NODE.INDEX, or any)
 *   exec after PID      says whether its PID is PID and where it runs;
 *                       exits 5
 *   exec child KERNEL   forks; the child becomes `exec after CHILD` on
 *                       KERNEL; the parent waits and prints its status
 *   exec missing        asks for a module that does not exist, and goes on
 *   exec module PATH    becomes PATH (found beneath a --dir), argv "from-exec"
 */
#include <atoll.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_kernel(const char *arg)
{
    if (strcmp(arg, "any") == 0)
        return ATOLL_KERNEL_ANY;
    const char *dot = strchr(arg, '.');
    return dot != NULL ? ATOLL_KERNEL(atoi(arg), atoi(dot + 1)) : atoi(arg);
}

/* Becomes `exec after PID` on `kernel`; returns only on failure. */
static int become_after(atoll_pid_t pid, int kernel)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)pid);
    char *args[] = {"exec", "after", num, NULL};
    fflush(stdout);
    int err = atoll_exec(NULL, args, kernel);
    printf("exec failed: %s\n", strerror(err));
    return 1;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "start") == 0 && argc > 2) {
        printf("start: pid %lld\n", (long long)atoll_getpid());
        return become_after(atoll_getpid(), parse_kernel(argv[2]));
    }
    if (strcmp(what, "after") == 0 && argc > 2) {
        int same = atoll_getpid() == (atoll_pid_t)strtoll(argv[2], NULL, 10);
        printf("after: same pid: %s; on node %d kernel %d\n", same ? "yes" : "no",
               atoll_kernel_node(), atoll_kernel_index());
        return 5;
    }
    if (strcmp(what, "child") == 0 && argc > 2) {
        atoll_pid_t pid = atoll_fork(ATOLL_KERNEL_ANY);
        if (pid == 0)
            return become_after(atoll_getpid(), parse_kernel(argv[2]));
        int status = -1;
        if (pid < 0 || atoll_wait(pid, &status, NULL) != 0)
            return 1;
        printf("child: ended with %d\n", status);
        return 0;
    }
    if (strcmp(what, "missing") == 0) {
        char *args[] = {"nothing", NULL};
        int err = atoll_exec("/no/such.wasm", args, ATOLL_KERNEL_ANY);
        printf("missing: %s; still here\n", strerror(err));
        return 0;
    }
    if (strcmp(what, "module") == 0 && argc > 2) {
        char *args[] = {argv[2], "from-exec", NULL};
        fflush(stdout);
        int err = atoll_exec(argv[2], args, ATOLL_KERNEL_ANY);
        printf("module: %s\n", strerror(err));
        return 1;
    }
    fprintf(stderr, "usage: exec start|after|child|missing|module ...\n");
    return 2;
}
