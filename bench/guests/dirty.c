/*
 * dirty - a process with a given memory size and writable working set, to
 * migrate: seed 000's and seed 002's experiments need both to vary.
 *
 *   dirty MIB WWS_KIB PASSES [PAGES64K]
 *   dirty MIB idle SECONDS [PAGES64K]
 *
 * It allocates MIB MiB (plus PAGES64K extra 64 KiB pages) and fills all of
 * it with non-zero bytes, so every block must travel. Then it makes PASSES
 * passes (0: forever) over the first WWS_KIB KiB, rewriting every 4 KiB
 * block with bytes that depend on the pass, and computes a little between
 * blocks. At the end it prints a checksum of the whole memory, which depends
 * only on the arguments: a run migrated any number of times, by any mode,
 * must print the same as one that was not (a block that pre-copy missed
 * would change it).
 *
 * With `idle` in place of WWS_KIB it writes nothing after filling its
 * memory and sleeps SECONDS seconds (0: forever), one second at a time: a
 * process that is asleep when it migrates, whose pre-copy measures the
 * link and the copies alone, without the process competing for a core.
 *
 *   dirty: ready          once filled (the benchmark migrates after this)
 *   dirty: pass N         every 64 passes
 *   dirty: checksum=0x... after the last pass
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: dirty MIB WWS_KIB PASSES [PAGES64K]\n"
                        "       dirty MIB idle SECONDS [PAGES64K]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 10) << 20;
    int idle = strcmp(argv[2], "idle") == 0;
    size_t wws = idle ? 0 : strtoull(argv[2], NULL, 10) << 10;
    unsigned long passes = strtoul(argv[3], NULL, 10);
    size += (argc > 4 ? strtoull(argv[4], NULL, 10) : 0) << 16;
    if (size < BLOCK)
        size = BLOCK;
    if (wws > size)
        wws = size;
    uint8_t *mem = malloc(size);
    if (!mem) {
        fprintf(stderr, "dirty: cannot allocate %zu bytes\n", size);
        return 1;
    }
    for (size_t i = 0; i < size; i += 8) {
        uint64_t v = mix(i) | 1;
        memcpy(mem + i, &v, size - i < 8 ? size - i : 8);
    }
    printf("dirty: ready\n");
    fflush(stdout);

    for (unsigned long s = 1; idle && (passes == 0 || s <= passes); s++)
        sleep(1);
    volatile uint64_t sink = 0;
    for (unsigned long pass = 1; !idle && (passes == 0 || pass <= passes); pass++) {
        for (size_t at = 0; at < wws; at += BLOCK) {
            uint64_t v = mix(pass * 0x9E3779B97F4A7C15ULL + at);
            size_t n = wws - at < BLOCK ? wws - at : BLOCK;
            for (size_t i = 0; i + 8 <= n; i += 8) {
                memcpy(mem + at + i, &v, 8);
                v += 0x2545F4914F6CDD1DULL;
            }
            /* A little computation per block, as a real program has. */
            uint64_t x = v;
            for (int k = 0; k < 64; k++)
                x = mix(x);
            sink += x;
        }
        if (pass % 64 == 0) {
            printf("dirty: pass %lu\n", pass);
            fflush(stdout);
        }
    }
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= size; i += 8) {
        uint64_t v;
        memcpy(&v, mem + i, 8);
        sum = mix(sum ^ v);
    }
    printf("dirty: checksum=0x%016" PRIx64 "\n", sum);
    return 0;
}
