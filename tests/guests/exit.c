/*
 * exit - exits with the status given as its argument.
 *
 *   exit [CODE]        default 0
 *
 * Expected: no output, exit status CODE (through exit(), not a return from
 * main, so the libc exit path is what is tested). A CODE that is not a
 * decimal integer prints "usage: exit [CODE]" on stderr and exits 2.
 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long code = 0;
    if (argc > 1) {
        char *end;
        code = strtol(argv[1], &end, 10);
        if (argv[1][0] == '\0' || *end != '\0') {
            fprintf(stderr, "usage: exit [CODE]\n");
            return 2;
        }
    }
    exit((int)code);
}
