/*
 * repl - an interactive adder: prompts, reads a line of integers, prints
 * their sum; "quit" or end of input ends it.
 *
 *   > 1 2 3
 *   6
 *   > quit
 *   bye
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char line[256];
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            break;
        if (strncmp(line, "quit", 4) == 0)
            break;
        long sum = 0;
        char *p = line, *end;
        for (long v = strtol(p, &end, 10); end != p; v = strtol(p, &end, 10)) {
            sum += v;
            p = end;
        }
        printf("%ld\n", sum);
    }
    puts("bye");
    return 0;
}
