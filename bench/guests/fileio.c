/*
 * fileio - file I/O throughput and the cost of one small file call.
 *
 *   fileio PATH MIB OPS
 *
 * Writes MIB MiB to PATH in 1 MiB writes, reads it back in 1 MiB reads
 * (checking every byte, untimed), then makes OPS 4 KiB preads at offset 0, and
 * removes PATH. Prints one JSON line: write and read rates (MB/s) and ns
 * per small pread. The same source is built natively (build/native) and
 * for atoll, where PATH's directory may belong to another node.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static unsigned char buf[CHUNK], back[CHUNK];

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fileio PATH MIB OPS\n");
        return 2;
    }
    const char *path = argv[1];
    long mib = atol(argv[2]), ops = atol(argv[3]);
    for (size_t i = 0; i < CHUNK; i++)
        buf[i] = (unsigned char)(i * 31 + 7);

    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0)
        fail("open");
    double t0 = now_ns();
    for (long m = 0; m < mib; m++)
        for (size_t done = 0; done < CHUNK;) {
            ssize_t n = write(fd, buf + done, CHUNK - done);
            if (n <= 0)
                fail("write");
            done += (size_t)n;
        }
    double t1 = now_ns();
    if (lseek(fd, 0, SEEK_SET) != 0)
        fail("lseek");
    double checking = 0;
    for (long m = 0; m < mib; m++) {
        for (size_t done = 0; done < CHUNK;) {
            ssize_t n = read(fd, back + done, CHUNK - done);
            if (n <= 0)
                fail("read");
            done += (size_t)n;
        }
        double c = now_ns();
        if (memcmp(buf, back, CHUNK) != 0) {
            fprintf(stderr, "fileio: MiB %ld reads back wrong\n", m);
            return 1;
        }
        checking += now_ns() - c;
    }
    double t2 = now_ns() - checking;
    double t2_end = now_ns();
    for (long i = 0; i < ops; i++)
        if (pread(fd, back, 4096, 0) != 4096)
            fail("pread");
    double t3 = now_ns();
    close(fd);
    if (unlink(path) != 0)
        fail("unlink");
    double bytes = (double)mib * CHUNK;
    printf("{\"write_mbps\":%.1f,\"read_mbps\":%.1f,\"op_ns\":%.1f}\n", bytes / (t1 - t0) * 1e3,
           bytes / (t2 - t1) * 1e3, ops ? (t3 - t2_end) / ops : 0.0);
    return 0;
}
