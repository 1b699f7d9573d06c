/*
 * pollin - waits for its standard input with poll(2) and a timeout, as an
 * event loop does: prints "timeout" each time the time comes first, and
 * "got: LINE" for each line that comes; ends at "quit" or the end of its
 * input ("eof").
 *
 *   pollin [TIMEOUT_MS]   (default 100)
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int timeout = argc > 1 ? atoi(argv[1]) : 100;
    char line[4096];
    size_t have = 0;
    for (;;) {
        struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = poll(&in, 1, timeout);
        if (n < 0) {
            perror("poll");
            return 1;
        }
        if (n == 0) {
            puts("timeout");
            fflush(stdout);
            continue;
        }
        if (!(in.revents & POLLIN)) {
            fprintf(stderr, "poll: revents %#x\n", in.revents);
            return 1;
        }
        ssize_t got = read(STDIN_FILENO, line + have, sizeof line - 1 - have);
        if (got < 0) {
            perror("read");
            return 1;
        }
        if (got == 0) {
            puts("eof");
            return 0;
        }
        have += (size_t)got;
        line[have] = '\0';
        char *start = line, *nl;
        while ((nl = strchr(start, '\n')) != NULL) {
            *nl = '\0';
            if (strcmp(start, "quit") == 0) {
                puts("bye");
                return 0;
            }
            printf("got: %s\n", start);
            start = nl + 1;
        }
        fflush(stdout);
        have = strlen(start);
        memmove(line, start, have);
    }
}
