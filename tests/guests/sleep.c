/*
 * sleep - sleeps with usleep() and checks on the monotonic clock that at least
 * that much time passed (a blocked process must not wake early, and must hold
 * no OS thread while it sleeps: run many of these at once to see that).
 *
 *   sleep [MS]         default 50
 *
 * Expected: "slept at least MSms: yes", exit 0 ("no" and exit 1 if it woke
 * early).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long ms = argc > 1 ? strtol(argv[1], NULL, 10) : 50;
    if (ms < 0 || ms > 3600 * 1000L) {
        fprintf(stderr, "usage: sleep [MS]   (0 <= MS <= 3600000)\n");
        return 2;
    }

    int64_t start = now_ns();
    /* POSIX allows usleep to refuse a second or more: go in steps. */
    for (long left = ms; left > 0; left -= 500)
        usleep((useconds_t)(left < 500 ? left : 500) * 1000);
    int64_t elapsed = now_ns() - start;

    int enough = elapsed >= (int64_t)ms * 1000000;
    printf("slept at least %ldms: %s\n", ms, enough ? "yes" : "no");
    return enough ? 0 : 1;
}
