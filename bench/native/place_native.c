/*
 * place_native - what bench/guests/placebench measures, with Linux
 * processes: the baseline of `atoll bench placement`.
 *
 *   place_native fork|fork_exec|kill N HEAP_KIB TARGET
 *
 * First takes HEAP_KIB KiB of heap and touches it. Then, N times, one at a
 * time:
 *   fork       fork(); the child _exit(0)s; waitpid()
 *   fork_exec  fork(); the child execv(TARGET) (a program that exits 0); waitpid()
 *   kill       fork() a child that pause()s; kill(SIGKILL); waitpid()
 * and prints
 *
 *   place_native what=W n=N us=U
 *
 * with U the mean microseconds per iteration. Exit status: 0, 1 if a call
 * failed or a child ended otherwise than expected, 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: place_native fork|fork_exec|kill N HEAP_KIB TARGET\n");
        return 2;
    }
    const char *what = argv[1], *target = argv[4];
    long n = strtol(argv[2], NULL, 10), kib = strtol(argv[3], NULL, 10);
    if (n < 1 || kib < 0)
        return 2;
    char *heap = malloc((size_t)kib * 1024 + 1);
    if (heap == NULL)
        return 1;
    memset(heap, 1, (size_t)kib * 1024 + 1);
    int mode = strcmp(what, "fork") == 0 ? 0 : strcmp(what, "fork_exec") == 0 ? 1
             : strcmp(what, "kill") == 0 ? 2 : -1;
    if (mode < 0)
        return 2;

    int bad = 0;
    double t0 = now_us();
    for (long i = 0; i < n && !bad; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (mode == 1) {
                char *args[] = {(char *)target, NULL};
                execv(target, args);
            } else if (mode == 2) {
                pause();
            }
            _exit(mode == 1 ? 127 : 0);
        }
        if (pid < 0) {
            bad = 1;
            break;
        }
        if (mode == 2 && kill(pid, SIGKILL) != 0)
            bad = 1;
        int status;
        if (waitpid(pid, &status, 0) != pid)
            bad = 1;
        else if (mode == 2)
            bad |= !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        else
            bad |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    double us = (now_us() - t0) / (double)n;
    if (bad) {
        fprintf(stderr, "place_native: %s failed\n", what);
        return 1;
    }
    printf("place_native what=%s n=%ld us=%.2f\n", what, n, us);
    return heap[kib * 1024] == 1 ? 0 : 1;
}
