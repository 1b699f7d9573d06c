/*
 * flood - writes numbered lines to standard output as fast as it can.
 *
 *   flood LINES
 *
 * Line i is "line i\n", i = 1..LINES, each written with its own write(2),
 * so a reader can check that every line came, once, in order. Prints
 * "flood: done" to stderr at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    unsigned long lines = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
    char buf[32];
    for (unsigned long i = 1; i <= lines; i++) {
        int len = snprintf(buf, sizeof buf, "line %lu\n", i);
        for (int done = 0; done < len;) {
            ssize_t w = write(1, buf + done, len - done);
            if (w <= 0) {
                perror("flood: write");
                return 1;
            }
            done += w;
        }
    }
    fputs("flood: done\n", stderr);
    return 0;
}
