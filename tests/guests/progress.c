/*
 * progress - a long deterministic computation that reports as it goes, to
 * freeze a process mid-run, move it, and check that it carries on exactly
 * where it was.
 *
 *   progress [STEPS [WORK]]      defaults: STEPS=20 WORK=10000000
 *
 * Between lines it runs WORK rounds of xorshift64 on its state: pure
 * computation, no calls, so the only safepoints inside a step are the loop
 * headers that `atoll prepare` instruments. Output:
 *
 *   step 1/20 value=0x...
 *   ...
 *   step 20/20 value=0x...
 *   progress: done value=0x...
 *
 * Every line is flushed as it is printed, so an observer sees how far it got.
 * The values depend only on STEPS and WORK: a run that was moved any number
 * of times prints the same bytes as one that was not.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    unsigned long steps = argc > 1 ? strtoul(argv[1], NULL, 10) : 20;
    unsigned long work = argc > 2 ? strtoul(argv[2], NULL, 10) : 10000000;

    uint64_t x = 0x9E3779B97F4A7C15u;
    for (unsigned long i = 1; i <= steps; i++) {
        for (unsigned long w = 0; w < work; w++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        printf("step %lu/%lu value=0x%016" PRIx64 "\n", i, steps, x);
        fflush(stdout);
    }
    printf("progress: done value=0x%016" PRIx64 "\n", x);
    return 0;
}
