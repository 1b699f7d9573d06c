/*
 * ipc_linux - the Linux side of `atoll bench ipc`: the micro-benchmarks of
 * the M3-IPC paper (IPC1, IPC2, IPC3, COPY1, COPY2) over the mechanisms a
 * Linux program would use instead of atoll's send/receive/notify/vcopy.
 *
 *   ipc_linux TEST MECH CORES ITERS [SIZE]
 *
 *   TEST   ipc1   64-byte message, 64-byte reply: one round trip an iteration
 *          ipc2   the same exchange (Linux has no sendrec)
 *          ipc3   notification ping-pong: 1 byte, or no payload at all for
 *                 eventfd, futex and shmspin
 *          copy1  the client copies SIZE bytes into the server, which acks
 *                 with 1 byte once the whole block is there
 *          copy2  a third process (the requester) asks for each copy from a
 *                 source to a destination; the destination acks the requester
 *   MECH   ipc*:  pipe fifo mqueue unix tcp eventfd futex shmspin
 *          copy*: pipe unix tcp cma memcpy
 *   CORES  same   every process on the first CPU we may run on (CPU 0)
 *          split  client (requester) on the first CPU, the other side on the
 *                 second; needs two CPUs
 *   ITERS  timed iterations, after ITERS/10 (at least 100) untimed ones
 *   SIZE   copy tests only: bytes per block [4096]
 *
 * Prints one line of JSON on stdout:
 *
 *   {"test":..,"mech":..,"cores":..,"iters":N,"size":B,"seconds":S,
 *    "ns_per_op":..,"ops_per_s":..,"gb_per_s":..,"copies":C,"note":".."}
 *
 * An op is a round trip (ipc) or a complete block copy (copy); size is 64
 * for ipc1/ipc2 and 1 for ipc3; gb_per_s is size*iters/seconds/1e9; copies
 * is how often the payload is copied on its way (2 through the kernel or
 * through shared memory, 1 for cma copy1 and memcpy, 0 for a futex or
 * shmspin notification, which has no payload). note says what differs from
 * the atoll side ("" when nothing does): ipc2 without sendrec, cma's
 * done/ack pipes, ... Messages carry sequence numbers and copied blocks a
 * pattern, both checked, so a broken mechanism fails instead of measuring
 * nothing.
 *
 * The FIFOs live in a mkdtemp directory under $TMPDIR (else /tmp), removed
 * as soon as both ends are open; message queues are unlinked as soon as
 * they are created (both processes hold descriptors), so a kill -9 leaves
 * nothing behind.
 *
 * Exit status: 0, 1 on a runtime failure, 2 on bad arguments or a
 * combination that does not exist. Whatever happens, children are killed and
 * reaped and named objects (FIFOs, message queues) removed; children die with
 * the parent (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE

#ifndef __linux__
#error "ipc_linux measures Linux mechanisms: it builds on Linux only"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64                 /* IPC1/IPC2 message and reply size */
#define MAX_SIZE (1UL << 30)   /* largest SIZE for the copy tests */
#define MAX_ITERS 10000000000ULL

enum test { IPC1, IPC2, IPC3, COPY1, COPY2 };
enum mech { PIPE, FIFO, MQUEUE, UNIX, TCP, EVENTFD, FUTEX, SHMSPIN, CMA, MEMCPY };

static const char *const test_names[] = {"ipc1", "ipc2", "ipc3", "copy1", "copy2"};
static const char *const mech_names[] = {"pipe", "fifo", "mqueue", "unix", "tcp",
                                         "eventfd", "futex", "shmspin", "cma", "memcpy"};

/* ---- processes, failure and cleanup ------------------------------------ */

/*
 * The parent is the client (or requester) and the only process that owns
 * anything: it kills and reaps the children and removes named objects on
 * every way out, including when a child dies (SIGCHLD) or it is signalled.
 * Children only ever _exit, so they never run the parent's cleanup.
 */
static pid_t g_parent;
static const char *g_role = "client";
static pid_t g_child[2];
static const char *g_child_role[2];
static volatile sig_atomic_t g_reaped[2];
static int g_status[2];
static int g_nchild;
static char g_fifo_dir[PATH_MAX], g_fifo_path[2][PATH_MAX];
static volatile sig_atomic_t g_fifo_live;

static void say(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* Async-signal-safe: used from signal handlers and from fail(). */
static void kill_children(void)
{
    for (int k = 0; k < g_nchild; k++) {
        if (g_child[k] <= 0 || g_reaped[k])
            continue;
        kill(g_child[k], SIGKILL);
        while (waitpid(g_child[k], NULL, 0) < 0 && errno == EINTR)
            ;
        g_reaped[k] = 1;
    }
}

static void remove_names(void)
{
    if (g_fifo_live) {
        unlink(g_fifo_path[0]);
        unlink(g_fifo_path[1]);
        rmdir(g_fifo_dir);
        g_fifo_live = 0;
    }
}

/* Async-signal-safe decimal. */
static void say_num(unsigned v)
{
    char b[12];
    int i = sizeof b;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    ssize_t r = write(2, b + i, sizeof b - (size_t)i);
    (void)r;
}

static void on_sigchld(int sig)
{
    (void)sig;
    int saved = errno;
    for (int k = 0; k < g_nchild; k++) {
        int st;
        if (g_child[k] <= 0 || g_reaped[k] || waitpid(g_child[k], &st, WNOHANG) != g_child[k])
            continue;
        g_reaped[k] = 1;
        g_status[k] = st;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            say("ipc_linux: the ");
            say(g_child_role[k]);
            if (WIFSIGNALED(st)) {
                say(" was killed by signal ");
                say_num((unsigned)WTERMSIG(st));
            } else {
                say(" exited with status ");
                say_num((unsigned)WEXITSTATUS(st));
            }
            say(", stopping\n");
            kill_children();
            remove_names();
            _exit(1);
        }
    }
    errno = saved;
}

static void on_fatal_signal(int sig)
{
    kill_children();
    remove_names();
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when the handler returns: we die of sig */
}

/* A runtime failure: the parent cleans up and exits 1, a child just exits 1. */
__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ipc_linux: %s: ", g_role);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (getpid() != g_parent)
        _exit(1);
    kill_children();
    remove_names();
    exit(1);
}

__attribute__((format(printf, 1, 2), noreturn)) static void usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ipc_linux: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nusage: ipc_linux ipc1|ipc2|ipc3 pipe|fifo|mqueue|unix|tcp|eventfd|futex|shmspin same|split ITERS\n"
          "       ipc_linux copy1|copy2 pipe|unix|tcp|cma|memcpy same|split ITERS [SIZE]\n",
          stderr);
    va_end(ap);
    exit(2);
}

static void install_parent_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigfillset(&sa.sa_mask);
    sa.sa_handler = on_sigchld;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a dead peer is EPIPE, reported, not a silent death */
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0)
        fail("sched_setaffinity(CPU %d): %s", cpu, strerror(errno));
}

/* Returns 0 in the child (pinned, dying with the parent), the pid in the parent. */
static pid_t start_child(const char *role, int cpu)
{
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* no SIGCHLD before the pid is recorded */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        fail("fork: %s", strerror(e));
    }
    if (pid == 0) {
        g_role = role;
        g_nchild = 0;
        g_fifo_live = 0;
        signal(SIGCHLD, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
            fail("prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
        if (getppid() != g_parent) /* the parent died before prctl */
            _exit(1);
        pin(cpu);
        return 0;
    }
    g_child_role[g_nchild] = role;
    g_child[g_nchild++] = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* Waits for every child and fails unless all exited 0. */
static void reap_all(void)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGCHLD);
    sigprocmask(SIG_BLOCK, &s, NULL);
    for (int k = 0; k < g_nchild; k++) {
        if (g_reaped[k])
            continue;
        int st;
        while (waitpid(g_child[k], &st, 0) < 0) {
            if (errno != EINTR)
                fail("waitpid: %s", strerror(errno));
        }
        g_reaped[k] = 1;
        g_status[k] = st;
    }
    for (int k = 0; k < g_nchild; k++) {
        int st = g_status[k];
        if (WIFSIGNALED(st))
            fail("the %s was killed by signal %d", g_child_role[k], WTERMSIG(st));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail("the %s exited with status %d", g_child_role[k], WEXITSTATUS(st));
    }
}

/* ---- file descriptors ---------------------------------------------------- */

/* Every descriptor made before forking, so each process can keep only its own. */
static int g_fds[64];
static int g_nfds;

static int track(int fd)
{
    if (g_nfds == (int)(sizeof g_fds / sizeof g_fds[0]))
        fail("too many descriptors");
    g_fds[g_nfds++] = fd;
    return fd;
}

/* Closes every tracked descriptor not in keep (-1 entries are ignored). */
static void keep_only(const int *keep, int n)
{
    for (int i = 0; i < g_nfds; i++) {
        int kept = 0;
        for (int j = 0; j < n; j++)
            kept |= keep[j] == g_fds[i];
        if (!kept)
            close(g_fds[i]);
    }
    g_nfds = 0;
}

static void write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            fail("write: %s", strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
}

static void read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            fail("read: %s", strerror(errno));
        }
        if (k == 0)
            fail("read: unexpected end of stream (peer gone)");
        p += k;
        n -= (size_t)k;
    }
}

static void set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        fail("setsockopt(TCP_NODELAY): %s", strerror(errno));
}

/* A connected loopback TCP pair, like socketpair(): sv[0] connected, sv[1] accepted. */
static void tcp_pair(int sv[2])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        fail("socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0)
        fail("listen on 127.0.0.1: %s", strerror(errno));
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
        fail("connect to 127.0.0.1:%d: %s", ntohs(a.sin_port), strerror(errno));
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        fail("accept: %s", strerror(errno));
    close(l);
    set_nodelay(c);
    set_nodelay(s);
    sv[0] = c;
    sv[1] = s;
}

/*
 * A link between a side A and a side B: A writes fd[0] and B reads fd[1];
 * unless oneway, B writes fd[2] and A reads fd[3]. pipe makes one pipe per
 * direction, unix and tcp one bidirectional connection.
 */
static void make_link(enum mech m, int oneway, int fd[4])
{
    int sv[2];
    fd[2] = fd[3] = -1;
    if (m == PIPE || m == CMA) {
        if (pipe2(sv, O_CLOEXEC) < 0)
            fail("pipe: %s", strerror(errno));
        fd[0] = track(sv[1]);
        fd[1] = track(sv[0]);
        if (!oneway) {
            if (pipe2(sv, O_CLOEXEC) < 0)
                fail("pipe: %s", strerror(errno));
            fd[2] = track(sv[1]);
            fd[3] = track(sv[0]);
        }
        return;
    }
    if (m == UNIX) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            fail("socketpair: %s", strerror(errno));
    } else {
        tcp_pair(sv);
    }
    fd[0] = track(sv[0]);
    fd[1] = track(sv[1]);
    if (!oneway) {
        fd[2] = sv[1];
        fd[3] = sv[0];
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* ---- IPC1, IPC2, IPC3 ---------------------------------------------------- */

/* One direction of shared-memory messaging; 128-byte aligned so the two
 * directions never share a cache line (nor an adjacent-line prefetch pair). */
struct slot {
    _Alignas(128) _Atomic uint32_t seq;
    unsigned char msg[MSG];
};
struct shared {
    struct slot to_server, to_client;
};

/* One process's end of a message channel. */
struct end {
    enum mech mech;
    int wfd, rfd;       /* fd mechanisms; eventfd: the one we signal, the one we wait on */
    mqd_t wq, rq;       /* mqueue */
    struct slot *out, *in; /* eventfd, futex, shmspin: where the payload travels */
    uint32_t nout, nin; /* futex, shmspin: messages sent and received */
    int yield;          /* shmspin on one core: let the peer run */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

/* Sends len bytes of buf (len 0: a bare notification, eventfd/futex/shmspin only). */
static void end_send(struct end *e, const void *buf, size_t len)
{
    static const uint64_t one = 1;
    switch (e->mech) {
    case PIPE: case FIFO: case UNIX: case TCP:
        write_full(e->wfd, buf, len);
        break;
    case MQUEUE:
        while (mq_send(e->wq, buf, len, 0) < 0) {
            if (errno != EINTR)
                fail("mq_send: %s", strerror(errno));
        }
        break;
    case EVENTFD:
        memcpy(e->out->msg, buf, len);
        write_full(e->wfd, &one, sizeof one);
        break;
    case FUTEX:
        memcpy(e->out->msg, buf, len);
        atomic_store_explicit(&e->out->seq, ++e->nout, memory_order_release);
        if (futex(&e->out->seq, FUTEX_WAKE, 1) < 0)
            fail("futex(FUTEX_WAKE): %s", strerror(errno));
        break;
    case SHMSPIN:
        memcpy(e->out->msg, buf, len);
        atomic_store_explicit(&e->out->seq, ++e->nout, memory_order_release);
        break;
    default:
        fail("mechanism %s cannot send messages", mech_names[e->mech]);
    }
}

/* Receives exactly len bytes into buf, which has room for MSG bytes. */
static void end_recv(struct end *e, void *buf, size_t len)
{
    uint64_t v;
    uint32_t want, seen;
    switch (e->mech) {
    case PIPE: case FIFO: case UNIX: case TCP:
        read_full(e->rfd, buf, len);
        break;
    case MQUEUE: {
        ssize_t n;
        while ((n = mq_receive(e->rq, buf, MSG, NULL)) < 0) {
            if (errno != EINTR)
                fail("mq_receive: %s", strerror(errno));
        }
        if ((size_t)n != len)
            fail("mq_receive: %zd bytes, expected %zu", n, len);
        break;
    }
    case EVENTFD:
        read_full(e->rfd, &v, sizeof v);
        if (v != 1)
            fail("eventfd counter is %llu, expected 1", (unsigned long long)v);
        memcpy(buf, e->in->msg, len);
        break;
    case FUTEX:
        want = ++e->nin;
        while ((seen = atomic_load_explicit(&e->in->seq, memory_order_acquire)) != want) {
            if (futex(&e->in->seq, FUTEX_WAIT, seen) < 0 && errno != EAGAIN && errno != EINTR)
                fail("futex(FUTEX_WAIT): %s", strerror(errno));
        }
        memcpy(buf, e->in->msg, len);
        break;
    case SHMSPIN:
        want = ++e->nin;
        while (atomic_load_explicit(&e->in->seq, memory_order_acquire) != want) {
            if (e->yield)
                sched_yield();
            else
                cpu_relax();
        }
        memcpy(buf, e->in->msg, len);
        break;
    default:
        fail("mechanism %s cannot receive messages", mech_names[e->mech]);
    }
}

static void put_seq(unsigned char *m, size_t len, uint64_t seq)
{
    if (len >= sizeof seq)
        memcpy(m, &seq, sizeof seq);
    else if (len == 1)
        m[0] = (unsigned char)seq;
}

/* Whether m carries seq (always true for a bare notification). */
static int has_seq(const unsigned char *m, size_t len, uint64_t seq)
{
    uint64_t got;
    if (len >= sizeof seq) {
        memcpy(&got, m, sizeof got);
        return got == seq;
    }
    return len == 0 || m[0] == (unsigned char)seq;
}

static void ipc_server(struct end *e, size_t len, uint64_t total)
{
    unsigned char req[MSG], rep[MSG];
    memset(rep, 0x5a, sizeof rep);
    for (uint64_t i = 0; i < total; i++) {
        end_recv(e, req, len);
        if (!has_seq(req, len, i))
            fail("message %llu arrived out of sequence", (unsigned long long)i);
        put_seq(rep, len, i + 1);
        end_send(e, rep, len);
    }
}

/* Returns the seconds the last `iters` round trips took. */
static double ipc_client(struct end *e, size_t len, uint64_t warm, uint64_t iters)
{
    unsigned char msg[MSG], rep[MSG];
    double t0 = 0;
    memset(msg, 0xa5, sizeof msg);
    for (uint64_t i = 0; i < warm + iters; i++) {
        if (i == warm)
            t0 = now();
        put_seq(msg, len, i);
        end_send(e, msg, len);
        end_recv(e, rep, len);
        if (!has_seq(rep, len, i + 1))
            fail("reply %llu does not carry the sequence number + 1", (unsigned long long)i);
    }
    return now() - t0;
}

static void open_fifo(const char *path, int flags, int *fd)
{
    while ((*fd = open(path, flags | O_CLOEXEC)) < 0) {
        if (errno != EINTR)
            fail("open %s: %s", path, strerror(errno));
    }
}

static mqd_t make_queue(char which)
{
    char name[64];
    struct mq_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = MSG;
    snprintf(name, sizeof name, "/ipc_linux.%d.%c", (int)getpid(), which);
    mqd_t q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600, &attr);
    if (q == (mqd_t)-1 && errno == EEXIST) { /* left by a killed run whose pid we reuse */
        mq_unlink(name);
        q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600, &attr);
    }
    if (q == (mqd_t)-1)
        fail("mq_open %s: %s", name, strerror(errno));
    /* Both processes use the descriptor (inherited by fork), so the name
     * can go at once and nothing is left behind, whatever happens next. */
    mq_unlink(name);
    return q;
}

static double run_ipc(enum test t, enum mech m, int cpu_client, int cpu_server,
                      uint64_t warm, uint64_t iters)
{
    int bare = t == IPC3 && (m == EVENTFD || m == FUTEX || m == SHMSPIN);
    size_t len = t == IPC3 ? (bare ? 0 : 1) : MSG;
    uint64_t total = warm + iters;
    struct end c, s; /* client's and server's ends */
    memset(&c, 0, sizeof c);
    memset(&s, 0, sizeof s);
    c.mech = s.mech = m;
    c.wfd = c.rfd = s.wfd = s.rfd = -1;

    int link[4];
    struct shared *shm = NULL;
    switch (m) {
    case PIPE: case UNIX: case TCP:
        make_link(m, 0, link);
        c.wfd = link[0], s.rfd = link[1], s.wfd = link[2], c.rfd = link[3];
        break;
    case FIFO: {
        const char *tmp = getenv("TMPDIR");
        /* Room for "/to_server" after the directory. */
        int n = snprintf(g_fifo_dir, sizeof g_fifo_dir - 16, "%s/ipc_linux.XXXXXX",
                         tmp && *tmp ? tmp : "/tmp");
        if (n < 0 || (size_t)n >= sizeof g_fifo_dir - 16)
            fail("TMPDIR is too long");
        if (!mkdtemp(g_fifo_dir))
            fail("mkdtemp %s: %s", g_fifo_dir, strerror(errno));
        memcpy(g_fifo_path[0], g_fifo_dir, (size_t)n);
        memcpy(g_fifo_path[1], g_fifo_dir, (size_t)n);
        strcpy(g_fifo_path[0] + n, "/to_server");
        strcpy(g_fifo_path[1] + n, "/to_client");
        g_fifo_live = 1;
        if (mkfifo(g_fifo_path[0], 0600) < 0 || mkfifo(g_fifo_path[1], 0600) < 0)
            fail("mkfifo in %s: %s", g_fifo_dir, strerror(errno));
        break;
    }
    case MQUEUE:
        c.wq = s.rq = make_queue('s');
        c.rq = s.wq = make_queue('c');
        break;
    case EVENTFD:
        c.wfd = s.rfd = track(eventfd(0, EFD_CLOEXEC));
        s.wfd = c.rfd = track(eventfd(0, EFD_CLOEXEC));
        if (c.wfd < 0 || s.wfd < 0)
            fail("eventfd: %s", strerror(errno));
        __attribute__((fallthrough)); /* the payload travels in shared memory */
    case FUTEX: case SHMSPIN:
        shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm == MAP_FAILED)
            fail("mmap: %s", strerror(errno));
        memset(shm, 0, sizeof *shm);
        c.out = s.in = &shm->to_server;
        c.in = s.out = &shm->to_client;
        c.yield = s.yield = m == SHMSPIN && cpu_client == cpu_server;
        break;
    default:
        fail("mechanism %s is not for ipc tests", mech_names[m]);
    }

    if (start_child("server", cpu_server) == 0) {
        int keep[2] = {s.wfd, s.rfd};
        keep_only(keep, 2);
        if (m == FIFO) { /* the same order on both sides: no deadlock */
            open_fifo(g_fifo_path[0], O_RDONLY, &s.rfd);
            open_fifo(g_fifo_path[1], O_WRONLY, &s.wfd);
        }
        ipc_server(&s, len, total);
        _exit(0);
    }
    pin(cpu_client);
    int keep[2] = {c.wfd, c.rfd};
    keep_only(keep, 2);
    if (m == FIFO) {
        open_fifo(g_fifo_path[0], O_WRONLY, &c.wfd);
        open_fifo(g_fifo_path[1], O_RDONLY, &c.rfd);
        remove_names(); /* both ends are open: the names are no longer needed */
    }
    double secs = ipc_client(&c, len, warm, iters);
    reap_all();
    return secs;
}

/* ---- COPY1, COPY2 -------------------------------------------------------- */

static unsigned char pattern(size_t pos)
{
    return (unsigned char)((pos * 131u + 7u) ^ (pos >> 9));
}

static unsigned char *alloc_block(size_t size, int fill)
{
    size_t rounded = (size + 4095) & ~(size_t)4095;
    unsigned char *b = aligned_alloc(4096, rounded);
    if (!b)
        fail("cannot allocate %zu bytes", size);
    for (size_t i = 0; i < size; i++) /* touches every page before timing */
        b[i] = fill ? pattern(i) : (unsigned char)~pattern(i);
    return b;
}

/*
 * The destination checks the first, middle and last byte after the first and
 * the last copy. Before the last copy it spoils them, so the last check can
 * only pass if that very copy arrived.
 */
static void check_block(unsigned char *b, size_t size, uint64_t i, uint64_t total)
{
    size_t at[3] = {0, size / 2, size - 1};
    if (i == 0 || i + 1 == total) {
        for (int k = 0; k < 3; k++) {
            if (b[at[k]] != pattern(at[k]))
                fail("copy %llu: byte %zu is 0x%02x, expected 0x%02x", (unsigned long long)i,
                     at[k], b[at[k]], pattern(at[k]));
        }
    }
    if (i + 2 == total) {
        for (int k = 0; k < 3; k++)
            b[at[k]] = (unsigned char)~pattern(at[k]);
    }
}

/* Copies n bytes between us and pid's address space, resuming short copies. */
static void vm_copy(pid_t pid, int to_remote, unsigned char *local, uintptr_t remote, size_t n)
{
    size_t done = 0;
    while (done < n) {
        struct iovec l = {local + done, n - done};
        struct iovec r = {(void *)(remote + done), n - done};
        ssize_t k = to_remote ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                              : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            fail("%s: %s%s", to_remote ? "process_vm_writev" : "process_vm_readv", strerror(errno),
                 errno == EPERM ? " (ptrace access to the child is denied: yama ptrace_scope "
                                  "or a seccomp profile)" : "");
        }
        if (k == 0)
            fail("%s copied nothing", to_remote ? "process_vm_writev" : "process_vm_readv");
        done += (size_t)k;
    }
}

static double run_memcpy(size_t size, uint64_t warm, uint64_t iters)
{
    unsigned char *src = alloc_block(size, 1), *dst = alloc_block(size, 0);
    double t0 = 0;
    for (uint64_t i = 0; i < warm + iters; i++) {
        if (i == warm)
            t0 = now();
        memcpy(dst, src, size);
        __asm__ __volatile__("" ::: "memory"); /* every copy happens */
        if (i == 0 || i + 2 >= warm + iters)
            check_block(dst, size, i, warm + iters);
    }
    double secs = now() - t0;
    free(src);
    free(dst);
    return secs;
}

/*
 * The destination process of a copy: tells its buffer's address (cma), then
 * for each block reads it from data_fd (or, with cma, waits for the 1-byte
 * notice that it was written), checks it and acknowledges on ack_fd.
 */
static void destination(enum mech m, size_t size, int data_fd, int notice_fd, int ack_fd,
                        uint64_t total)
{
    unsigned char *dst = alloc_block(size, 0), b, ack = 'a';
    if (m == CMA) {
        uintptr_t addr = (uintptr_t)dst;
        write_full(ack_fd, &addr, sizeof addr);
    }
    for (uint64_t i = 0; i < total; i++) {
        if (m == CMA)
            read_full(notice_fd, &b, 1);
        else
            read_full(data_fd, dst, size);
        check_block(dst, size, i, total);
        write_full(ack_fd, &ack, 1);
    }
    _exit(0);
}

/* COPY1: client (parent, source) -> server (child, destination). */
static double run_copy1(enum mech m, size_t size, int cpu_client, int cpu_server,
                        uint64_t warm, uint64_t iters)
{
    uint64_t total = warm + iters;
    unsigned char ack = 'a', b;
    int link[4];
    double t0 = 0;
    make_link(m, 0, link); /* cma: link[0]->[1] "done", link[2]->[3] address, then acks */

    pid_t server = start_child("server", cpu_server);
    if (server == 0) {
        keep_only((int[]){link[1], link[2]}, 2);
        destination(m, size, link[1], link[1], link[2], total);
    }
    pin(cpu_client);
    keep_only((int[]){link[0], link[3]}, 2);
    unsigned char *src = alloc_block(size, 1);
    uintptr_t addr = 0;
    if (m == CMA)
        read_full(link[3], &addr, sizeof addr);
    for (uint64_t i = 0; i < total; i++) {
        if (i == warm)
            t0 = now();
        if (m == CMA) {
            vm_copy(server, 1, src, addr, size);
            write_full(link[0], &ack, 1);
        } else {
            write_full(link[0], src, size);
        }
        read_full(link[3], &b, 1);
    }
    double secs = now() - t0;
    reap_all();
    free(src);
    return secs;
}

/*
 * COPY2: the requester (parent) has each block copied from the source to the
 * destination (children). pipe/unix/tcp: "go" to the source, the source
 * writes to the destination, the destination acks the requester. cma: the
 * requester reads from the source into its own buffer and writes that into
 * the destination, then tells the destination, which acks.
 */
static double run_copy2(enum mech m, size_t size, int cpu_req, int cpu_other,
                        uint64_t warm, uint64_t iters)
{
    uint64_t total = warm + iters;
    unsigned char ack = 'a', b;
    int go[4], data[4], done[4];
    g_role = "requester";
    double t0 = 0;
    /* go: requester -> source ("go"; cma: nothing, closed at the end);
     * data: source -> destination (cma: the source's address to the requester);
     * done: destination -> requester (acks; cma: first its address). */
    make_link(m, 1, go);
    make_link(m, 1, data);
    int notify[4] = {-1, -1, -1, -1}; /* cma: requester -> destination "copied" */
    make_link(m, 1, done);
    if (m == CMA)
        make_link(m, 1, notify);

    pid_t src_pid = start_child("source", cpu_other);
    if (src_pid == 0) {
        keep_only((int[]){go[1], data[0]}, 2);
        unsigned char *src = alloc_block(size, 1);
        if (m == CMA) {
            uintptr_t addr = (uintptr_t)src;
            write_full(data[0], &addr, sizeof addr);
            for (;;) { /* nothing comes: end of stream says the requester is done */
                ssize_t k = read(go[1], &b, 1);
                if (k == 0 || (k < 0 && errno != EINTR))
                    break;
            }
            _exit(0);
        }
        for (uint64_t i = 0; i < total; i++) {
            read_full(go[1], &b, 1);
            write_full(data[0], src, size);
        }
        _exit(0);
    }
    pid_t dst_pid = start_child("destination", cpu_other);
    if (dst_pid == 0) {
        keep_only((int[]){data[1], done[0], notify[1]}, 3);
        destination(m, size, data[1], notify[1], done[0], total);
    }
    pin(cpu_req);
    /* data reaches the requester only with cma: the source's address. */
    keep_only((int[]){go[0], m == CMA ? data[1] : -1, done[1], notify[0]}, 4);
    unsigned char *tmp = NULL;
    uintptr_t src_addr = 0, dst_addr = 0;
    if (m == CMA) {
        tmp = alloc_block(size, 0);
        read_full(data[1], &src_addr, sizeof src_addr);
        read_full(done[1], &dst_addr, sizeof dst_addr);
    }
    for (uint64_t i = 0; i < total; i++) {
        if (i == warm)
            t0 = now();
        if (m == CMA) {
            vm_copy(src_pid, 0, tmp, src_addr, size);
            vm_copy(dst_pid, 1, tmp, dst_addr, size);
            write_full(notify[0], &ack, 1);
        } else {
            write_full(go[0], &ack, 1);
        }
        read_full(done[1], &b, 1);
    }
    double secs = now() - t0;
    close(go[0]); /* cma: the source's signal to exit */
    reap_all();
    free(tmp);
    return secs;
}

/* ---- main ---------------------------------------------------------------- */

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0)
            return i;
    }
    return -1;
}

static uint64_t parse_count(const char *s, const char *what, uint64_t max)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        usage("%s must be a positive integer, not '%s'", what, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > max)
        usage("%s must be an integer from 1 to %llu, not '%s'", what, (unsigned long long)max, s);
    return v;
}

int main(int argc, char **argv)
{
    g_parent = getpid();
    if (argc < 5 || argc > 6)
        usage("expected 4 or 5 arguments, got %d", argc - 1);
    int t = lookup(argv[1], test_names, 5);
    int m = lookup(argv[2], mech_names, 10);
    if (t < 0)
        usage("unknown test '%s'", argv[1]);
    if (m < 0)
        usage("unknown mechanism '%s'", argv[2]);
    int copy = t == COPY1 || t == COPY2;
    int mech_ok = copy ? (m == PIPE || m == UNIX || m == TCP || m == CMA || m == MEMCPY)
                       : (m != CMA && m != MEMCPY);
    if (!mech_ok)
        usage("mechanism '%s' does not exist for %s", argv[2], argv[1]);
    int split = strcmp(argv[3], "split") == 0;
    if (!split && strcmp(argv[3], "same") != 0)
        usage("CORES must be 'same' or 'split', not '%s'", argv[3]);
    uint64_t iters = parse_count(argv[4], "ITERS", MAX_ITERS);
    size_t size = t == IPC3 ? 1 : MSG;
    if (argc == 6) {
        if (!copy)
            usage("SIZE is for the copy tests only");
        size = (size_t)parse_count(argv[5], "SIZE", MAX_SIZE);
    } else if (copy) {
        size = 4096;
    }

    /* The first two CPUs we may run on: CPU 0 and 1 on an unrestricted machine. */
    cpu_set_t allowed;
    int cpus[2] = {-1, -1}, ncpu = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) < 0) {
        fprintf(stderr, "ipc_linux: sched_getaffinity: %s\n", strerror(errno));
        return 1;
    }
    for (int c = 0; c < CPU_SETSIZE && ncpu < 2; c++) {
        if (CPU_ISSET(c, &allowed))
            cpus[ncpu++] = c;
    }
    if (split && m != MEMCPY && ncpu < 2) {
        fprintf(stderr, "ipc_linux: CORES=split needs two CPUs, but this process may only run on "
                        "CPU %d; use CORES=same\n", cpus[0]);
        return 2;
    }
    int cpu_a = cpus[0], cpu_b = split ? cpus[1] : cpus[0];

    install_parent_handlers();
    uint64_t warm = iters / 10 < 100 ? 100 : iters / 10;
    double secs;
    int copies = 2;
    char note[256] = "";
    if (t == IPC2)
        strcat(note, "Linux has no sendrec: the same send + receive exchange as ipc1; ");
    if (t == IPC3 && (m == EVENTFD || m == FUTEX || m == SHMSPIN))
        strcat(note, "no payload: the notification is the counter or sequence word alone; ");
    if (m == SHMSPIN && !split)
        strcat(note, "one core: the spin loop calls sched_yield; ");
    switch (t) {
    case IPC1: case IPC2: case IPC3:
        secs = run_ipc((enum test)t, (enum mech)m, cpu_a, cpu_b, warm, iters);
        if (t == IPC3 && (m == FUTEX || m == SHMSPIN))
            copies = 0; /* nothing but the sequence word */
        break;
    case COPY1: case COPY2:
        if (m == MEMCPY) {
            pin(cpu_a);
            secs = run_memcpy(size, warm, iters);
            copies = 1;
            strcat(note, "in-process memcpy: the bandwidth ceiling, CORES ignored; ");
        } else if (t == COPY1) {
            secs = run_copy1((enum mech)m, size, cpu_a, cpu_b, warm, iters);
            if (m == CMA) {
                copies = 1;
                strcat(note, "1 copy by process_vm_writev, then a 1-byte done and ack over pipes; ");
            }
        } else {
            secs = run_copy2((enum mech)m, size, cpu_a, cpu_b, warm, iters);
            if (m == CMA)
                strcat(note, "2 copies: process_vm_readv from the source into the requester, "
                             "process_vm_writev into the destination, then a 1-byte done and "
                             "ack over pipes; ");
        }
        break;
    }
    size_t n = strlen(note);
    if (n >= 2)
        note[n - 2] = '\0'; /* the last "; " */
    if (secs <= 0)
        secs = 1e-9;
    printf("{\"test\":\"%s\",\"mech\":\"%s\",\"cores\":\"%s\",\"iters\":%llu,\"size\":%zu,"
           "\"seconds\":%.9g,\"ns_per_op\":%.9g,\"ops_per_s\":%.9g,\"gb_per_s\":%.9g,"
           "\"copies\":%d,\"note\":\"%s\"}\n",
           test_names[t], mech_names[m], argv[3], (unsigned long long)iters, size, secs,
           secs * 1e9 / (double)iters, (double)iters / secs, (double)size * (double)iters / secs / 1e9,
           copies, note);
    if (fflush(stdout) != 0)
        fail("writing stdout: %s", strerror(errno));
    return 0;
}
