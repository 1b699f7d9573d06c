/*
 * spin - burns CPU in a tight loop that makes no calls, to check that a
 * spinning process cannot starve the others on its kernel.
 *
 *   spin [ITERATIONS]      default: forever
 *
 * Expected: "spin: spinning" (flushed before the loop starts); then, only
 * when ITERATIONS is given and reached, "spin: done N iterations" and exit 0.
 * Without ITERATIONS it never ends by itself: kill it.
 */
#include <stdio.h>
#include <stdlib.h>

/* volatile: the compiler must keep every increment, so the loop really runs
 * and cannot be folded away or proven infinite-and-pointless. */
static volatile unsigned long long counter;

int main(int argc, char **argv)
{
    unsigned long long limit = argc > 1 ? strtoull(argv[1], NULL, 10) : 0;

    printf("spin: spinning\n");
    fflush(stdout);

    if (limit == 0) {
        for (;;)
            counter++;
    }
    while (counter < limit)
        counter++;

    printf("spin: done %llu iterations\n", limit);
    return 0;
}
