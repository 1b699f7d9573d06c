/*
 * far - a parent here waiting on children on another node, to lose that
 * node under it.
 *
 *   far NODE
 *
 * Starts two copies of itself on kernel 0 of node NODE: one that spins,
 * and a server that takes one request and never replies. Prints
 * "far: ready", then calls the server with ipc_sendrec, which can only end
 * when the server's node is lost (EDEADSRCDST), then waits for both
 * children, which end with the status of a process lost with its node
 * (128 + SIGKILL). One line per result; exit status 0 only if each is the
 * expected one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atoll.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "spin") == 0) {
        for (volatile unsigned long i = 0;; i++)
            ;
    }
    if (argc > 1 && strcmp(argv[1], "serve") == 0) {
        message m;
        ipc_receive(ANY, &m, NULL);
        for (;;)
            sleep(1);
    }
    int node = argc > 1 ? atoi(argv[1]) : 1;
    char *spin[] = {argv[0], "spin", NULL};
    char *serve[] = {argv[0], "serve", NULL};
    atoll_pid_t spinner, server;
    if (atoll_spawn(NULL, spin, ATOLL_KERNEL(node, 0), &spinner) != 0 ||
        atoll_spawn(NULL, serve, ATOLL_KERNEL(node, 0), &server) != 0) {
        fprintf(stderr, "far: cannot start children on node %d\n", node);
        return 1;
    }
    printf("far: ready\n");
    fflush(stdout);
    message m = {0};
    int err = ipc_sendrec(server, &m);
    if (err == EDEADSRCDST)
        printf("far: sendrec EDEADSRCDST\n");
    else
        printf("far: sendrec returned %d\n", err);
    int ok = err == EDEADSRCDST;
    for (int i = 0; i < 2; i++) {
        int status = -1;
        atoll_pid_t who = 0;
        err = atoll_wait(ATOLL_ANY, &status, &who);
        printf("far: %s ended with status %d\n", who == spinner ? "spinner" : "server", status);
        ok = ok && err == 0 && status == 128 + 9;
    }
    return ok ? 0 : 1;
}
