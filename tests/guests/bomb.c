/*
 * bomb - a fork bomb that stops at its first refusal, to show a process
 * quota (`--max-processes`) containing it.
 *
 *   bomb [HOLD_MS [ROUNDS]]      defaults: 300 1
 *
 * Every process forks (children wherever the node places them) until a
 * fork fails, then holds its place for HOLD_MS so that the others find the
 * quota full, waits for its children, and exits with the number of
 * processes it and its descendants made (at most 255). The first process
 * does this ROUNDS times, each once every process of the round before has
 * ended, and prints for each "bomb: made N; refused: <reason>". Exits 0.
 */
#include <atoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One round; returns what the first process and its descendants made (a
 * child exits here instead), and why the first's last fork failed. */
static int detonate(int hold_ms, int *refused)
{
    int child = 0, made = 0;
    for (;;) {
        atoll_pid_t pid = atoll_fork(ATOLL_KERNEL_ANY);
        if (pid < 0) {
            *refused = (int)-pid;
            break;
        }
        if (pid == 0) {
            /* A bomb of its own, with nothing made yet. */
            child = 1;
            made = 0;
            continue;
        }
        made++;
    }
    usleep(hold_ms * 1000);
    int status;
    while (atoll_wait(ATOLL_ANY, &status, NULL) == 0)
        made += status;
    if (child)
        exit(made > 255 ? 255 : made);
    return made;
}

int main(int argc, char **argv)
{
    int hold_ms = argc > 1 ? atoi(argv[1]) : 300;
    int rounds = argc > 2 ? atoi(argv[2]) : 1;
    for (int r = 0; r < rounds; r++) {
        int refused = 0;
        int made = detonate(hold_ms, &refused);
        printf("bomb: made %d; refused: %s\n", made, strerror(refused));
        fflush(stdout);
    }
    return 0;
}
