/*
 * ipcbench - seed 003's IPC micro-benchmarks on atoll.
 *
 *   ipcbench TEST WHERE ITERS [SIZE]
 *
 * TEST   ipc1   send + receive ping-pong (the server answers with send)
 *        ipc2   sendrec; the server receives and answers with send
 *        ipc3   notify ping-pong: notify, then receive the peer's notify
 *        copy1  vcopy of SIZE bytes from this process into a server's
 *               memory (granted to it)
 *        copy2  vcopy of SIZE bytes between two servers, requested by this
 *               process (a third party), with both grants
 * WHERE  same   the servers run on this process's kernel
 *        other  the servers run on the next kernel
 *        nodeN  the servers run on kernel 0 of node N of the cluster
 * SIZE   block size of the copy tests, default 4096.
 *
 * Runs ITERS/10 (at least 100) untimed rounds, then ITERS timed ones, and
 * prints one JSON line:
 *   {"test":"ipc2","where":"same","iters":N,"size":64,"seconds":S,"ns_per_op":X}
 * Exit status 1 on a failed call or a wrong answer, 2 on bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atoll.h>

#define EXPECT0(call)                                                        \
    do {                                                                     \
        int e_ = (call);                                                     \
        if (e_ != 0) {                                                       \
            fprintf(stderr, "ipcbench:%d: %s = %d\n", __LINE__, #call, e_);  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Server of ipc1 and ipc2: answer each message with its number + 1. */
static int serve_echo(void)
{
    message m;
    for (;;) {
        EXPECT0(ipc_receive(ANY, &m, NULL));
        if (m.m_type == 0)
            return 0;
        m.m1_i1 += 1;
        EXPECT0(ipc_send(m.m_source, &m));
    }
}

/* Server of ipc3: answer each notification with one. */
static int serve_notify(void)
{
    message m;
    for (;;) {
        EXPECT0(ipc_receive(ANY, &m, NULL));
        if (m.m_type != NOTIFY_MESSAGE)
            return 0;
        EXPECT0(ipc_notify(m.m_source));
    }
}

/* Server of the copy tests: grants the requester a SIZE-byte buffer
 * (access from argv), says where it is, and waits for the end. */
static int serve_buffer(const char *size_arg, const char *access_arg)
{
    uint32_t size = (uint32_t)strtoul(size_arg, NULL, 10);
    unsigned access = (unsigned)strtoul(access_arg, NULL, 10);
    uint8_t *buf = aligned_alloc(65536, size);
    if (buf == NULL)
        return 1;
    memset(buf, 0x5a, size);
    message m;
    EXPECT0(ipc_receive(ANY, &m, NULL));
    uint32_t id = 0;
    EXPECT0(atoll_grant(m.m_source, buf, size, access, &id));
    m.m2_ll1 = (int64_t)(uintptr_t)buf;
    EXPECT0(ipc_send(m.m_source, &m));
    EXPECT0(ipc_receive(ANY, &m, NULL));
    return 0;
}

static atoll_pid_t spawn_server(int kernel, char **argv)
{
    atoll_pid_t pid = 0;
    EXPECT0(atoll_spawn(NULL, argv, kernel, &pid));
    return pid;
}

/* Asks a buffer server where its buffer is. */
static uint8_t *buffer_of(atoll_pid_t server)
{
    message m;
    memset(&m, 0, sizeof m);
    EXPECT0(ipc_sendrec(server, &m));
    return (uint8_t *)(uintptr_t)m.m2_ll1;
}

static void end_server(atoll_pid_t server)
{
    message m;
    memset(&m, 0, sizeof m);
    EXPECT0(ipc_send(server, &m));
    EXPECT0(atoll_wait(server, NULL, NULL));
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "serve-echo") == 0)
        return serve_echo();
    if (argc >= 2 && strcmp(argv[1], "serve-notify") == 0)
        return serve_notify();
    if (argc >= 4 && strcmp(argv[1], "serve-buffer") == 0)
        return serve_buffer(argv[2], argv[3]);

    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: ipcbench ipc1|ipc2|ipc3|copy1|copy2 same|other|nodeN ITERS [SIZE]\n");
        return 2;
    }
    const char *test = argv[1], *where = argv[2];
    long iters = strtol(argv[3], NULL, 10);
    const char *size_arg = argc == 5 ? argv[4] : "4096";
    uint32_t size = (uint32_t)strtoul(size_arg, NULL, 10);
    int here = atoll_kernel_index();
    int kernel;
    if (strcmp(where, "same") == 0)
        kernel = here;
    else if (strcmp(where, "other") == 0 && atoll_kernel_count() > 1)
        kernel = (here + 1) % atoll_kernel_count();
    else if (strncmp(where, "node", 4) == 0 && where[4] != '\0')
        kernel = ATOLL_KERNEL(atoi(where + 4), 0);
    else {
        fprintf(stderr, "ipcbench: WHERE is same, other (needs 2 kernels) or nodeN\n");
        return 2;
    }
    if (iters < 1 || size < 1) {
        fprintf(stderr, "ipcbench: ITERS and SIZE must be positive\n");
        return 2;
    }
    long warmup = iters / 10 > 100 ? iters / 10 : 100;
    message m;
    memset(&m, 0, sizeof m);
    double t0 = 0, t1 = 0;
    int copies = strncmp(test, "copy", 4) == 0;

    if (strcmp(test, "ipc1") == 0 || strcmp(test, "ipc2") == 0) {
        int sendrec = test[3] == '2';
        char *sargv[] = {"ipcbench", "serve-echo", NULL};
        atoll_pid_t server = spawn_server(kernel, sargv);
        for (long i = -warmup; i < iters; i++) {
            if (i == 0)
                t0 = now();
            m.m_type = 1;
            m.m1_i1 = (int32_t)i;
            if (sendrec) {
                EXPECT0(ipc_sendrec(server, &m));
            } else {
                EXPECT0(ipc_send(server, &m));
                EXPECT0(ipc_receive(server, &m, NULL));
            }
            if (m.m1_i1 != (int32_t)i + 1) {
                fprintf(stderr, "ipcbench: answer %d to request %ld\n", m.m1_i1, i);
                return 1;
            }
        }
        t1 = now();
        end_server(server);
    } else if (strcmp(test, "ipc3") == 0) {
        char *sargv[] = {"ipcbench", "serve-notify", NULL};
        atoll_pid_t server = spawn_server(kernel, sargv);
        for (long i = -warmup; i < iters; i++) {
            if (i == 0)
                t0 = now();
            EXPECT0(ipc_notify(server));
            EXPECT0(ipc_receive(server, &m, NULL));
            if (m.m_type != NOTIFY_MESSAGE || m.m_source != server) {
                fprintf(stderr, "ipcbench: not the server's notification\n");
                return 1;
            }
        }
        t1 = now();
        end_server(server);
    } else if (copies) {
        int third = strcmp(test, "copy2") == 0;
        uint8_t *mine = aligned_alloc(65536, size);
        if (mine == NULL)
            return 1;
        memset(mine, 0xa5, size);
        char rd[] = "1", wr[] = "3"; /* the destination is read back once, to check it */
        char *dargv[] = {"ipcbench", "serve-buffer", (char *)size_arg, wr, NULL};
        char *sargv[] = {"ipcbench", "serve-buffer", (char *)size_arg, rd, NULL};
        atoll_pid_t dst = spawn_server(kernel, dargv);
        uint8_t *dst_buf = buffer_of(dst);
        atoll_pid_t src = SELF;
        const uint8_t *src_buf = mine;
        if (third) {
            src = spawn_server(kernel, sargv);
            src_buf = buffer_of(src);
        }
        for (long i = -warmup; i < iters; i++) {
            if (i == 0)
                t0 = now();
            EXPECT0(atoll_vcopy(src, src_buf, dst, dst_buf, size));
        }
        t1 = now();
        /* Check the last block arrived whole. */
        uint8_t probe[2];
        EXPECT0(atoll_vcopy(dst, dst_buf, SELF, probe, 1));
        EXPECT0(atoll_vcopy(dst, dst_buf + size - 1, SELF, probe + 1, 1));
        uint8_t want = third ? 0x5a : 0xa5;
        if (probe[0] != want || probe[1] != want) {
            fprintf(stderr, "ipcbench: copied block is wrong\n");
            return 1;
        }
        end_server(dst);
        if (third)
            end_server(src);
        free(mine);
    } else {
        fprintf(stderr, "ipcbench: unknown test %s\n", test);
        return 2;
    }

    double s = t1 - t0;
    printf("{\"test\":\"%s\",\"where\":\"%s\",\"iters\":%ld,\"size\":%u,\"seconds\":%.6f,\"ns_per_op\":%.1f}\n",
           test, where, iters, copies ? size : 64u, s, s * 1e9 / (double)iters);
    return 0;
}
