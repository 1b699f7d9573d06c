/*
 * env - prints its arguments and environment, to check what a process was
 * started with (and that it still has it after a move).
 *
 *   env [ARGS...]
 *
 * Expected, for "env a 'b c'" with environment B=2 A=1:
 *
 *   argc=3
 *   argv[0]=env
 *   argv[1]=a
 *   argv[2]=b c
 *   env A=1
 *   env B=2
 *
 * Environment lines are sorted (byte order), so the output does not depend on
 * the order the runtime passes them in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);

    size_t count = 0;
    while (environ != NULL && environ[count] != NULL)
        count++;
    char **sorted = malloc((count + 1) * sizeof *sorted);
    if (sorted == NULL)
        return 1;
    memcpy(sorted, environ, count * sizeof *sorted);
    qsort(sorted, count, sizeof *sorted, compare_strings);
    for (size_t i = 0; i < count; i++)
        printf("env %s\n", sorted[i]);
    free(sorted);
    return 0;
}
