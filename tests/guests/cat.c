/*
 * cat - copies standard input to standard output, as read(2) gives it.
 *
 *   cat [CHUNK]      CHUNK: bytes asked per read (default 4096)
 *
 * Ends at end of input; prints "cat: N bytes" to stderr. A read or write
 * that fails ends it with status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t chunk = argc > 1 ? strtoul(argv[1], NULL, 10) : 4096;
    char *buf = malloc(chunk ? chunk : 1);
    unsigned long total = 0;
    for (;;) {
        ssize_t n = read(0, buf, chunk);
        if (n < 0) {
            perror("cat: read");
            return 1;
        }
        if (n == 0)
            break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(1, buf + done, n - done);
            if (w <= 0) {
                perror("cat: write");
                return 1;
            }
            done += w;
        }
        total += n;
    }
    fprintf(stderr, "cat: %lu bytes\n", total);
    return 0;
}
