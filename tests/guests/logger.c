/*
 * logger - keeps writing an open file, to migrate it mid-write.
 *
 *   logger PATH LINES WORK
 *
 * Opens PATH once, then writes LINES numbered lines through that one
 * descriptor, computing WORK rounds between lines, and closes it. The file
 * must hold exactly lines 1..LINES, in order, whatever kernels the process
 * wrote them from. Prints "logger: wrote N lines" at the end; a failed
 * write ends it with status 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: logger PATH LINES WORK\n");
        return 2;
    }
    unsigned long lines = strtoul(argv[2], NULL, 10);
    unsigned long work = strtoul(argv[3], NULL, 10);
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror("logger: fopen");
        return 1;
    }
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (unsigned long i = 1; i <= lines; i++) {
        for (unsigned long w = 0; w < work; w++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if (fprintf(f, "line %lu %016llx\n", i, (unsigned long long)x) < 0 || fflush(f)) {
            perror("logger: write");
            return 1;
        }
    }
    if (fclose(f) != 0) {
        perror("logger: fclose");
        return 1;
    }
    printf("logger: wrote %lu lines\n", lines);
    return 0;
}
