/*
 * swarm_native - many Linux processes alive at once, each blocked in read(),
 * the baseline for bench/guests/swarm.
 *
 *   swarm_native N HOLD
 *
 * Forks N children. Each writes one byte to a shared "ready" pipe, then
 * blocks reading a 4-byte request from a shared request pipe, writes back
 * 2 * value + 1 on a shared reply pipe and exits 0. Once every child is
 * ready the parent prints
 *
 *   swarm ready n=N seconds=S
 *
 * and waits until the file HOLD exists (polling every 20 ms), then writes
 * the N requests, reads the N replies, reaps the children and prints
 *
 *   swarm done answered=A gone=0 clean=C seconds=S
 *
 * as swarm does. Exit status: 0, 1 on a failure, 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads exactly len bytes; 0 on success. */
static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long n = argc == 3 ? strtol(argv[1], NULL, 10) : 0;
    if (n < 1) {
        fprintf(stderr, "usage: swarm_native N HOLD   (N >= 1)\n");
        return 2;
    }
    const char *hold = argv[2];
    int ready[2], request[2], reply[2];
    if (pipe(ready) || pipe(request) || pipe(reply)) {
        perror("swarm_native: pipe");
        return 1;
    }
    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "swarm_native: fork %ld: %s\n", i, strerror(errno));
            return 1;
        }
        if (pid == 0) {
            char one = 1;
            int32_t v;
            if (write(ready[1], &one, 1) != 1 || read_all(request[0], &v, sizeof v))
                _exit(3);
            v = 2 * v + 1;
            _exit(write(reply[1], &v, sizeof v) == sizeof v ? 0 : 4);
        }
    }
    for (long i = 0; i < n; i++) {
        char one;
        if (read_all(ready[0], &one, 1)) {
            fprintf(stderr, "swarm_native: a child did not start\n");
            return 1;
        }
    }
    printf("swarm ready n=%ld seconds=%.6f\n", n, now_seconds() - start);
    fflush(stdout);

    struct timespec tick = {0, 20 * 1000 * 1000};
    while (access(hold, F_OK) != 0)
        nanosleep(&tick, NULL);

    start = now_seconds();
    int64_t want = 0, got = 0;
    for (long i = 0; i < n; i++) {
        int32_t v = (int32_t)i;
        want += 2 * (int64_t)i + 1;
        if (write(request[1], &v, sizeof v) != sizeof v) {
            perror("swarm_native: write");
            return 1;
        }
    }
    for (long i = 0; i < n; i++) {
        int32_t v;
        if (read_all(reply[0], &v, sizeof v)) {
            fprintf(stderr, "swarm_native: a reply is missing\n");
            return 1;
        }
        got += v;
    }
    long clean = 0;
    for (long i = 0; i < n; i++) {
        int status;
        if (wait(&status) < 0) {
            perror("swarm_native: wait");
            return 1;
        }
        clean += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    printf("swarm done answered=%ld gone=0 clean=%ld seconds=%.6f\n",
           got == want ? n : 0, clean, now_seconds() - start);
    return got == want && clean == n ? 0 : 1;
}
