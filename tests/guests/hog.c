/*
 * hog - takes memory a mebibyte at a time until malloc says no, to check
 * `atoll run --memory`: the limit holds, malloc fails cleanly (the program
 * goes on), the limit moves with the process and children inherit it.
 *
 *   hog MAX_MIB [move] [child]
 *
 * Takes up to MAX_MIB MiB, touching every page. With `move`, it moves to the
 * next kernel halfway (after MAX_MIB/4 MiB). With `child`, it first runs
 * itself as a child (`hog MAX_MIB`) and waits for it.
 *
 * Prints "hog: took N MiB" and "hog: malloc returned NULL" if it did;
 * exits 0, or 1 when it could not spawn or wait for the child.
 */
#include <atoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the blocks are kept, so that the compiler cannot drop the
 * allocations as unused. */
static char *volatile blocks[4096];

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hog MAX_MIB [move] [child]\n");
        return 2;
    }
    int max = atoi(argv[1]);
    if (max < 0 || max > 4096) {
        fprintf(stderr, "hog: MAX_MIB must be 0 to 4096\n");
        return 2;
    }
    int move = 0, child = 0;
    for (int i = 2; i < argc; i++) {
        move |= strcmp(argv[i], "move") == 0;
        child |= strcmp(argv[i], "child") == 0;
    }
    if (child) {
        char *args[] = {"hog", argv[1], NULL};
        atoll_pid_t pid;
        int status;
        if (atoll_spawn(NULL, args, ATOLL_KERNEL_ANY, &pid) != 0 ||
            atoll_wait(pid, &status, NULL) != 0) {
            fprintf(stderr, "hog: no child\n");
            return 1;
        }
        printf("hog: child ended with %d\n", status);
    }
    int took = 0;
    for (; took < max; took++) {
        if (move && took == max / 4 && atoll_migrate_to((atoll_kernel_index() + 1) %
                                                        atoll_kernel_count()) == 0)
            printf("hog: moved\n");
        char *p = malloc(1 << 20);
        if (p == NULL) {
            printf("hog: took %d MiB\nhog: malloc returned NULL\n", took);
            return 0;
        }
        memset(p, 1, 1 << 20);
        blocks[took] = p;
    }
    printf("hog: took %d MiB\n", took);
    return 0;
}
