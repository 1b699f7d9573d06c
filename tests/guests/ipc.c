/*
 * ipc - the Minix 3 IPC scenarios of the integration tests.
 *
 *   ipc SCENARIO WHERE [ARGS]
 *
 * WHERE is "same" (peers on the caller's kernel), "other" (on the next
 * kernel) or "nodesN" (on kernel 0 of the next of N nodes of a cluster):
 * every scenario must behave the same every way. Scenarios:
 *
 *   pingpong N        sendrec and send/receive with sequence numbers
 *   senda N           N asynchronous letters, in order, through a full
 *                     window (EAGAIN, then a notification), some with
 *                     bodies of 1 byte to ATOLL_BODY_MAX; EINVAL to
 *                     oneself, EMSGSIZE and EFAULT for bad bodies; late
 *                     EDEADSRCDST from an ended receiver
 *   restored-sender   a child sends letters to this process; the test
 *                     checkpoints and restores the child meanwhile: every
 *                     letter must come, in order
 *   restored-receiver this process sends letters to a child the test
 *                     checkpoints and restores: letters sent while it was
 *                     a file are refused, the rest come in order
 *   notify            coalescing, NOTIFY status, sendnb's and receivenb's
 *                     ENOTREADY; a message and then a notification, taken
 *                     in that order
 *   locked            ELOCKED for cycles of 1, 2 and 3 processes
 *   dead              EDEADSRCDST for ended, exiting and killed peers
 *   errors            EBADSRCDST, EFAULT, EINVAL, bind/unbind rules
 *   domain            ECALLDENIED across domains (needs domain "other")
 *   grants            safecopy, vcopy (COPY1), third-party vcopy (COPY2)
 *   killed-copier N   N children killed while they copy into it; what
 *                     they copied is intact
 *   moved-copier MS   a child copies into it for MS ms (the test moves
 *                     the child meanwhile); what it copied is intact
 *   stress PAIRS N    PAIRS client/server pairs, N sequenced calls each
 *   moved             a grant and pending notifications survive the
 *                     migrations of both processes (kmigrate_to)
 *   hold              one sendrec, then blocks for ever sending to a
 *                     sleeping child while another child waits in receive
 *                     (for `atoll ps`)
 *   sleeper           sleeps for ever (for domain end)
 *
 * Prints "ok SCENARIO" and exits 0; on a failed check prints the line and
 * exits 1. Child roles are argv[1] = "child-*".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atoll.h>

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "ipc:%d: check failed: %s\n", __LINE__, #cond); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define EXPECT(call, want)                                                   \
    do {                                                                     \
        int got_ = (call);                                                   \
        if (got_ != (want)) {                                                \
            fprintf(stderr, "ipc:%d: %s = %d, want %d (%s)\n", __LINE__,     \
                    #call, got_, (int)(want), #want);                        \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static const char *where = "same";

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The kernel a peer goes to: this one, the next, or one of the next node. */
static int peer_kernel(int nth)
{
    int here = atoll_kernel_index();
    if (strcmp(where, "same") == 0)
        return here;
    if (strncmp(where, "nodes", 5) == 0) {
        int nodes = atoi(where + 5);
        return ATOLL_KERNEL((atoll_kernel_node() + 1 + nth) % nodes, 0);
    }
    return (here + 1 + nth) % atoll_kernel_count();
}

static atoll_pid_t spawn_on(int kernel, const char *role, const char *arg)
{
    char *argv[] = {"ipc", (char *)role, (char *)where, (char *)arg, NULL};
    if (arg == NULL)
        argv[3] = NULL;
    atoll_pid_t pid = 0;
    EXPECT(atoll_spawn(NULL, argv, kernel, &pid), 0);
    return pid;
}

static atoll_pid_t spawn_peer(const char *role, const char *arg)
{
    return spawn_on(peer_kernel(0), role, arg);
}

static void reap(atoll_pid_t pid, int want)
{
    int status = -1;
    EXPECT(atoll_wait(pid, &status, NULL), 0);
    if (status != want) {
        fprintf(stderr, "ipc: child exited with %d, want %d\n", status, want);
        exit(1);
    }
}

/* ------------------------------------------------------------ roles */

/* Answers every message with its sequence number + 1; type 0 ends it. */
static int child_echo(void)
{
    for (;;) {
        message m;
        int status = 0;
        EXPECT(ipc_receive(ANY, &m, &status), 0);
        if (m.m_type == 0)
            return 0;
        CHECK(IPC_STATUS_CALL(status) == SEND || IPC_STATUS_CALL(status) == SENDREC);
        atoll_pid_t client = m.m_source;
        m.m_type = 2;
        m.m1_i1 += 1;
        EXPECT(ipc_send(client, &m), 0);
    }
}

/* Takes letters (status SENDA, type 1) until the one numbered n - 1, in
 * increasing order and all from one sender, stored in *sender; returns how
 * many came. From ANY: a receive from the sender by name would fail while
 * the sender is a checkpoint file. */
/* The body of letter i of the letter scenarios: a quarter of them carry
 * one, of a few sizes, and one in 5000 the largest there is. */
static size_t body_len(int i)
{
    static const size_t sizes[] = {1, 52, 300, 1000, 4096};
    if (i % 5000 == 1)
        return ATOLL_BODY_MAX;
    return i % 4 == 1 ? sizes[(i / 4) % 5] : 0;
}

static uint8_t body_byte(int i, size_t k)
{
    return (uint8_t)(i * 31 + (int)k);
}

static uint8_t body[ATOLL_BODY_MAX];

/* Checks the body of letter i, just received with `status`. */
static void check_body(int i, int status)
{
    size_t len = body_len(i);
    CHECK(IPC_STATUS_BODY(status) == len);
    if (len == 0) {
        EXPECT(ipc_body(body, 1), ENOMSG);
        return;
    }
    /* A short buffer takes the first bytes; a long one the whole body. */
    memset(body, 0, len);
    EXPECT(ipc_body(body, 1), 0);
    CHECK(body[0] == body_byte(i, 0) && (len == 1 || body[1] == 0));
    EXPECT(ipc_body(body, sizeof body), 0);
    for (size_t k = 0; k < len; k++)
        if (body[k] != body_byte(i, k)) {
            fprintf(stderr, "ipc: letter %d: body byte %zu is wrong\n", i, k);
            exit(1);
        }
}

/* Takes letters up to number n - 1 from one sender; returns how many, and
 * in `more` how many said that the next one was there already. */
static int take_letters(int n, atoll_pid_t *sender, int *more)
{
    int count = 0, last = -1, status = 0;
    *sender = 0;
    *more = 0;
    while (last != n - 1) {
        message m;
        /* The letter before said the next one was there: it comes at once. */
        if (IPC_STATUS_MORE(status)) {
            EXPECT(ipc_receivenb(ANY, &m, &status), 0);
            ++*more;
        } else {
            EXPECT(ipc_receive(ANY, &m, &status), 0);
        }
        CHECK(IPC_STATUS_CALL(status) == SENDA && m.m_type == 1);
        if (m.m1_i1 <= last) {
            fprintf(stderr, "ipc: letter %d came after %d\n", m.m1_i1, last);
            exit(1);
        }
        check_body(m.m1_i1, status);
        CHECK(*sender == 0 || m.m_source == *sender);
        *sender = m.m_source;
        last = m.m1_i1;
        count++;
    }
    return count;
}

/* Takes N letters (argument), every one in order, slowly at first so that
 * the sender fills its window, then answers with a send of type 3. */
static int child_letters(const char *count)
{
    int n = (int)strtol(count, NULL, 10);
    sleep_ms(100);
    atoll_pid_t sender;
    int more;
    EXPECT(take_letters(n, &sender, &more), n);
    /* Asleep while the sender filled its window, it found letters waiting;
     * after the last, the sender waits for this answer and sends nothing. */
    CHECK(n <= ATOLL_ASYNC_WINDOW || more > 0);
    message m;
    int status = 0;
    EXPECT(ipc_receivenb(ANY, &m, &status), ENOTREADY);
    memset(&m, 0, sizeof m);
    m.m_type = 3;
    EXPECT(ipc_send(sender, &m), 0);
    return 0;
}

static int child_notified(void)
{
    atoll_pid_t parent = 0;
    sleep_ms(150);
    message m;
    int status = 0;
    /* receivenb takes what is there (notifications first) and never waits. */
    EXPECT(ipc_receivenb(ANY, &m, &status), 0);
    CHECK(IPC_STATUS_CALL(status) == NOTIFY);
    CHECK(m.m_type == NOTIFY_MESSAGE);
    parent = m.m_source;
    /* Three notifications coalesced into one: next is the real message,
     * once the parent's send is waiting. */
    int err;
    for (int tries = 0; (err = ipc_receivenb(ANY, &m, &status)) == ENOTREADY && tries < 5000; tries++)
        sleep_ms(1);
    EXPECT(err, 0);
    CHECK(IPC_STATUS_CALL(status) == SEND);
    CHECK(m.m_type == 7 && m.m_source == parent);
    EXPECT(ipc_receivenb(ANY, &m, &status), ENOTREADY);
    EXPECT(ipc_receivenb(parent, &m, &status), ENOTREADY);
    EXPECT(ipc_receivenb(SELF, &m, &status), ENOTREADY);
    EXPECT(ipc_notify(parent), 0);
    return 0;
}

/*
 * One process of a cycle (argv[3]: the parent's pid, which alone it first
 * receives from): told by the parent whom to send to (peer), whom
 * to receive from afterwards to release its predecessor (prev, or 0), how
 * long to wait first, and what its send must return.
 */
static int child_cycle(const char *parent)
{
    message m;
    EXPECT(ipc_receive(strtoll(parent, NULL, 10), &m, NULL), 0);
    atoll_pid_t peer = m.m_u.m_m9.m9ll1, prev = m.m_u.m_m9.m9ll2;
    long delay = (long)m.m_u.m_m9.m9ll3;
    int want = (int)m.m_u.m_m9.m9ll4;
    sleep_ms(delay);
    m.m_type = 5;
    EXPECT(ipc_send(peer, &m), want);
    if (prev != 0)
        EXPECT(ipc_receive(prev, &m, NULL), 0);
    return 0;
}

static int child_sleepexit(const char *ms)
{
    sleep_ms(strtol(ms, NULL, 10));
    return 0;
}

/* Takes a sendrec request and ends without answering. */
static int child_noreply(void)
{
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    return 0;
}

/* Receives the pid of a victim, waits, kills it. */
static int child_killer(void)
{
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    sleep_ms(50);
    EXPECT(atoll_kill(m.m2_ll1, ATOLL_SIGKILL), 0);
    return 0;
}

static int child_rebind(void)
{
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    EXPECT(atoll_unbind(), 0);
    CHECK(atoll_domain() == -1);
    EXPECT(atoll_bind("other"), 0);
    CHECK(atoll_domain() > 0);
    for (;;)
        sleep_ms(1000);
}

#define BLOCK (16u << 20)

/*
 * Holds two page-aligned 16 MiB buffers: `out` (pattern, granted read) and
 * `in` (granted write). Tells the parent where they are, then serves
 * requests: type 1 = check `in` holds the pattern, type 2 = revoke `out`'s
 * grant, type 0 = end.
 */
static int child_granter(void)
{
    uint8_t *out = aligned_alloc(65536, BLOCK), *in = aligned_alloc(65536, BLOCK);
    CHECK(out != NULL && in != NULL);
    for (uint32_t i = 0; i < BLOCK; i++)
        out[i] = (uint8_t)(i * 7 + 3);
    memset(in, 0, BLOCK);
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    atoll_pid_t parent = m.m_source;
    uint32_t out_id = 0, in_id = 0;
    EXPECT(atoll_grant(parent, out, BLOCK, CPF_READ, &out_id), 0);
    EXPECT(atoll_grant(parent, in, BLOCK, CPF_WRITE, &in_id), 0);
    memset(&m, 0, sizeof m);
    m.m_u.m_m9.m9ll1 = (int64_t)(uintptr_t)out;
    m.m_u.m_m9.m9ll2 = (int64_t)(uintptr_t)in;
    m.m_u.m_m9.m9ll3 = out_id;
    m.m_u.m_m9.m9ll4 = in_id;
    EXPECT(ipc_send(parent, &m), 0);
    for (;;) {
        int status = 0;
        EXPECT(ipc_receive(parent, &m, &status), 0);
        if (m.m_type == 0)
            return 0;
        if (m.m_type == 1) {
            uint32_t len = (uint32_t)m.m1_i1;
            int ok = 1;
            for (uint32_t i = 0; i < len; i++)
                ok &= in[i] == (uint8_t)(i * 7 + 3);
            m.m1_i1 = ok;
        } else if (m.m_type == 2) {
            m.m1_i1 = atoll_revoke(out_id);
        }
        EXPECT(ipc_send(parent, &m), 0);
    }
}

#define COPIED (1u << 20)

/* Byte i of what copiers copy. */
static uint8_t pattern(uint32_t i)
{
    return (uint8_t)(i * 7 + 3);
}

/*
 * Takes the address of a block its parent granted it to write, copies the
 * pattern there once, says so, then copies it there again for ever.
 */
static int child_copier(void)
{
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    atoll_pid_t parent = m.m_source;
    uint8_t *into = (uint8_t *)(uintptr_t)m.m_u.m_m9.m9ll1;
    uint8_t *buf = aligned_alloc(65536, COPIED);
    CHECK(buf != NULL);
    for (uint32_t i = 0; i < COPIED; i++)
        buf[i] = pattern(i);
    EXPECT(atoll_vcopy(SELF, buf, parent, into, COPIED), 0);
    EXPECT(ipc_send(parent, &m), 0);
    for (;;)
        EXPECT(atoll_vcopy(SELF, buf, parent, into, COPIED), 0);
}

/* Checks that `in` holds what copiers copy. */
static void check_copied(const uint8_t *in, long round)
{
    for (uint32_t i = 0; i < COPIED; i++)
        if (in[i] != pattern(i)) {
            fprintf(stderr, "ipc: round %ld: byte %u is %u, want %u\n", round, i, in[i],
                    pattern(i));
            exit(1);
        }
}

/* A copier on the next kernel, granted `in`, copying into it. */
static atoll_pid_t start_copier(uint8_t *in, uint32_t *grant)
{
    atoll_pid_t c = spawn_peer("child-copier", NULL);
    EXPECT(atoll_grant(c, in, COPIED, CPF_WRITE, grant), 0);
    message m;
    memset(&m, 0, sizeof m);
    m.m_u.m_m9.m9ll1 = (int64_t)(uintptr_t)in;
    EXPECT(ipc_send(c, &m), 0);
    EXPECT(ipc_receive(c, &m, NULL), 0);
    return c;
}

/* Ends a copier in the middle of its copies and checks what they left. */
static void stop_copier(atoll_pid_t c, uint32_t grant, const uint8_t *in, long round)
{
    EXPECT(atoll_kill(c, ATOLL_SIGKILL), 0);
    reap(c, 128 + ATOLL_SIGKILL);
    EXPECT(atoll_revoke(grant), 0);
    check_copied(in, round);
}

/*
 * Has a copier copy into it for `ms` milliseconds, checking its block every
 * few: the node's test moves the copier between kernels meanwhile.
 */
static void moved_copier(long ms)
{
    uint8_t *in = aligned_alloc(65536, COPIED);
    CHECK(in != NULL);
    for (uint32_t i = 0; i < COPIED; i++)
        in[i] = pattern(i);
    uint32_t grant = 0;
    atoll_pid_t c = start_copier(in, &grant);
    printf("copying\n");
    fflush(stdout);
    for (long t = 0; t < ms; t += 5) {
        sleep_ms(5);
        check_copied(in, t);
    }
    stop_copier(c, grant, in, ms);
}

/*
 * Kills copiers in the middle of their copies into its memory: across
 * kernels a copier's bytes are read where they lie (lent), and must read
 * as it left them even once it is gone.
 */
static void killed_copier(long rounds)
{
    uint8_t *in = aligned_alloc(65536, COPIED);
    CHECK(in != NULL);
    for (uint32_t i = 0; i < COPIED; i++)
        in[i] = pattern(i);
    for (long r = 0; r < rounds; r++) {
        uint32_t grant = 0;
        atoll_pid_t c = start_copier(in, &grant);
        /* A little later each round, to meet its copies at other points. */
        for (volatile long spin = 0; spin < r * 500; spin++)
            ;
        stop_copier(c, grant, in, r);
    }
}

#define MOVED_LEN (64u << 10)

/* The next kernel after this one. */
static int next_kernel(void)
{
    return (atoll_kernel_index() + 1) % atoll_kernel_count();
}

/*
 * Told a grant by its parent, moves itself and sleeps while the parent
 * notifies it and moves too; then takes the (one, coalesced) notification,
 * copies through the grant, moves again and reports.
 */
static int child_moved(void)
{
    message m;
    int status = 0;
    EXPECT(ipc_receive(ANY, &m, &status), 0);
    atoll_pid_t parent = m.m_source;
    uint32_t gid = (uint32_t)m.m1_i1;
    EXPECT(kmigrate_to(next_kernel()), 0);
    sleep_ms(100);
    EXPECT(ipc_receive(ANY, &m, &status), 0);
    CHECK(IPC_STATUS_CALL(status) == NOTIFY && m.m_source == parent);
    static uint8_t copy[MOVED_LEN];
    EXPECT(atoll_safecopy_from(parent, gid, 0, copy, MOVED_LEN), 0);
    int ok = 1;
    for (uint32_t i = 0; i < MOVED_LEN; i++)
        ok &= copy[i] == (uint8_t)(i * 13 + 1);
    EXPECT(kmigrate_to(next_kernel()), 0);
    memset(&m, 0, sizeof m);
    m.m_type = 3;
    m.m1_i1 = ok;
    EXPECT(ipc_send(parent, &m), 0);
    return 0;
}

static void moved(void)
{
    static uint8_t buf[MOVED_LEN];
    for (uint32_t i = 0; i < MOVED_LEN; i++)
        buf[i] = (uint8_t)(i * 13 + 1);
    atoll_pid_t child = spawn_peer("child-moved", NULL);
    uint32_t gid = 0;
    EXPECT(atoll_grant(child, buf, MOVED_LEN, CPF_READ, &gid), 0);
    message m;
    memset(&m, 0, sizeof m);
    m.m_type = 1;
    m.m1_i1 = (int)gid;
    EXPECT(ipc_send(child, &m), 0);
    for (int i = 0; i < 3; i++)
        EXPECT(ipc_notify(child), 0);
    EXPECT(kmigrate_to(next_kernel()), 0);
    EXPECT(kmigrate_to(next_kernel()), 0);
    int status = 0;
    EXPECT(ipc_receive(child, &m, &status), 0);
    CHECK(m.m_type == 3 && m.m1_i1 == 1);
    reap(child, 0);
}

/* A stress client: N sendrecs to the server the parent names. */
static int child_client(const char *n_arg)
{
    long n = strtol(n_arg, NULL, 10);
    message m;
    EXPECT(ipc_receive(ANY, &m, NULL), 0);
    atoll_pid_t server = m.m2_ll1;
    for (long i = 0; i < n; i++) {
        memset(&m, 0, sizeof m);
        m.m_type = 1;
        m.m1_i1 = (int32_t)i;
        if (i % 2 == 0) {
            EXPECT(ipc_sendrec(server, &m), 0);
        } else {
            EXPECT(ipc_send(server, &m), 0);
            EXPECT(ipc_receive(server, &m, NULL), 0);
        }
        CHECK(m.m_source == server && m.m_type == 2 && m.m1_i1 == (int32_t)i + 1);
    }
    return 0;
}

/* A stress server: exactly N requests, from one client, in order. */
static int child_server(const char *n_arg)
{
    long n = strtol(n_arg, NULL, 10);
    atoll_pid_t client = 0;
    for (long i = 0; i < n; i++) {
        message m;
        EXPECT(ipc_receive(ANY, &m, NULL), 0);
        if (client == 0)
            client = m.m_source;
        CHECK(m.m_source == client && m.m1_i1 == (int32_t)i);
        m.m_type = 2;
        m.m1_i1 += 1;
        EXPECT(ipc_send(client, &m), 0);
    }
    return 0;
}

/* -------------------------------------------------------- scenarios */

static void pingpong(long n)
{
    atoll_pid_t echo = spawn_peer("child-echo", NULL);
    message m;
    for (long i = 0; i < n; i++) {
        memset(&m, 0, sizeof m);
        m.m_type = 1;
        m.m1_i1 = (int32_t)i;
        /* Every other call by its M3-IPC name. */
        EXPECT(i % 2 ? ipc_sendrec(echo, &m) : mnx_sendrec(echo, &m), 0);
        CHECK(m.m_source == echo && m.m_type == 2 && m.m1_i1 == (int32_t)i + 1);
    }
    for (long i = 0; i < n; i++) {
        m.m_type = 1;
        m.m1_i1 = (int32_t)i;
        EXPECT(ipc_send(echo, &m), 0);
        int status = 0;
        EXPECT(ipc_receive(echo, &m, &status), 0);
        CHECK(IPC_STATUS_CALL(status) == SEND);
        CHECK(m.m_source == echo && m.m1_i1 == (int32_t)i + 1);
    }
    m.m_type = 0;
    EXPECT(ipc_send(echo, &m), 0);
    reap(echo, 0);
}

/* Sends letter `m`, numbered m1_i1, asynchronously (with ipc_senda_more if
 * `more`, with ipc_senda_body if its number has a body), waiting for room
 * as a window that is full says: a notification from `to` once a letter
 * has been taken. Returns what the send that was not EAGAIN returned. */
static int senda_waiting(atoll_pid_t to, message *m, bool more, long *full)
{
    static uint8_t out[ATOLL_BODY_MAX];
    size_t len = body_len(m->m1_i1);
    for (size_t k = 0; k < len; k++)
        out[k] = body_byte(m->m1_i1, k);
    int err;
    while ((err = len > 0   ? ipc_senda_body(to, m, out, len)
                  : more    ? ipc_senda_more(to, m)
                            : ipc_senda(to, m)) == EAGAIN) {
        ++*full;
        message n;
        int status = 0;
        EXPECT(ipc_receive(to, &n, &status), 0);
        CHECK(IPC_STATUS_CALL(status) == NOTIFY && n.m_source == to);
    }
    return err;
}

/* Sends letters to `to` until one is refused (a refusal comes back with a
 * later senda), for at most a second; returns the error. */
static int senda_until_refused(atoll_pid_t to, message *m)
{
    int err = 0;
    for (int i = 0; i < 200 && err == 0; i++) {
        err = ipc_senda(to, m);
        if (err == 0)
            sleep_ms(5);
    }
    return err;
}

/* Letters of the restored-* scenarios, 2 ms apart: about 3 s. */
#define RESTORE_LETTERS 1500

/* Sends RESTORE_LETTERS letters to `to`, numbered in their payload; those
 * refused while `to` is not running (checkpointed, not yet restored) are
 * skipped. */
static void send_letters(atoll_pid_t to)
{
    long full = 0;
    for (int i = 0; i < RESTORE_LETTERS; i++) {
        message m;
        memset(&m, 0, sizeof m);
        m.m_type = 1;
        m.m1_i1 = i;
        int err = senda_waiting(to, &m, false, &full);
        if (err != EDEADSRCDST)
            EXPECT(err, 0);
        sleep_ms(2);
    }
}

static int child_sender(const char *parent)
{
    send_letters((atoll_pid_t)strtoll(parent, NULL, 10));
    return 0;
}

static int child_receiver(void)
{
    atoll_pid_t sender;
    int more;
    take_letters(RESTORE_LETTERS, &sender, &more);
    return 0;
}

static void restored_sender(void)
{
    char me[24];
    snprintf(me, sizeof me, "%lld", (long long)atoll_getpid());
    spawn_peer("child-sender", me);
    atoll_pid_t sender;
    int more;
    EXPECT(take_letters(RESTORE_LETTERS, &sender, &more), RESTORE_LETTERS);
}

static void restored_receiver(void)
{
    send_letters(spawn_peer("child-receiver", NULL));
}

static void senda(long n)
{
    message m;
    memset(&m, 0, sizeof m);
    EXPECT(ipc_senda(SELF, &m), EINVAL);
    EXPECT(ipc_senda(atoll_getpid(), &m), EINVAL);
    EXPECT(ipc_senda_more(atoll_getpid(), &m), EINVAL);
    EXPECT(ipc_senda_body(atoll_getpid(), &m, body, 1), EINVAL);
    EXPECT(ipc_senda_body(atoll_getpid(), &m, body, ATOLL_BODY_MAX + 1), EMSGSIZE);
    EXPECT(__atoll_ipc_senda_body(atoll_getpid(), &m, body, ATOLL_BODY_MAX + 1), EMSGSIZE);
    EXPECT(__atoll_ipc_senda_body(atoll_getpid(), &m, (void *)-16, 32), EFAULT);

    char count[24];
    snprintf(count, sizeof count, "%ld", n);
    atoll_pid_t r = spawn_peer("child-letters", count);
    long full = 0;
    for (long i = 0; i < n; i++) {
        memset(&m, 0, sizeof m);
        m.m_type = 1;
        m.m1_i1 = (int32_t)i;
        /* Runs of letters that say more follow; the last says so too,
         * and goes all the same once this process waits. */
        bool more = i % 5 != 4 || i == n - 1;
        EXPECT(senda_waiting(r, &m, more, &full), 0);
    }
    /* The receiver answers once it has them all, in order; a notification
     * of room may come first. */
    int status = 0;
    do
        EXPECT(ipc_receive(r, &m, &status), 0);
    while (IPC_STATUS_CALL(status) == NOTIFY);
    CHECK(IPC_STATUS_CALL(status) == SEND && m.m_type == 3);
    reap(r, 0);
    /* The receiver slept before taking any: the window filled. */
    CHECK(n <= ATOLL_ASYNC_WINDOW || full > 0);

    /* Letters to a process that ended are refused, and the refusal comes
     * back with a later senda. */
    EXPECT(senda_until_refused(r, &m), EDEADSRCDST);
}

static void notify(void)
{
    atoll_pid_t child = spawn_peer("child-notified", NULL);
    message m;
    memset(&m, 0, sizeof m);
    EXPECT(ipc_sendnb(child, &m), ENOTREADY);
    for (int i = 0; i < 3; i++)
        EXPECT(ipc_notify(child), 0);
    m.m_type = 7;
    EXPECT(ipc_send(child, &m), 0);
    int status = 0;
    EXPECT(ipc_receive(child, &m, &status), 0);
    CHECK(IPC_STATUS_CALL(status) == NOTIFY && m.m_type == NOTIFY_MESSAGE && m.m_source == child);
    reap(child, 0);

    /* The receive waits when the message comes, so it takes the message,
     * and the notification sent after it is for the next receive. (On one
     * kernel the child may run inside this receive, which is then served
     * when its slice ends: ipc/handoff.rs.) */
    char me[24];
    snprintf(me, sizeof me, "%lld", (long long)atoll_getpid());
    child = spawn_peer("child-sendnotify", me);
    EXPECT(ipc_receive(child, &m, &status), 0);
    CHECK(IPC_STATUS_CALL(status) == SEND && m.m_type == 8 && m.m_source == child);
    EXPECT(ipc_receive(child, &m, &status), 0);
    CHECK(IPC_STATUS_CALL(status) == NOTIFY && m.m_type == NOTIFY_MESSAGE);
    EXPECT(ipc_send(child, &m), 0);
    reap(child, 0);
}

/* Sends its parent a message, then a notification, and ends when the
 * parent says so (a receive from an ended process fails, notification or
 * not). */
static int child_sendnotify(const char *parent_pid)
{
    message m;
    memset(&m, 0, sizeof m);
    m.m_type = 8;
    atoll_pid_t parent = (atoll_pid_t)strtoll(parent_pid, NULL, 10);
    EXPECT(ipc_send(parent, &m), 0);
    EXPECT(ipc_notify(parent), 0);
    EXPECT(ipc_receive(parent, &m, NULL), 0);
    return 0;
}

static void tell_cycle(atoll_pid_t who, atoll_pid_t peer, atoll_pid_t prev, long delay, int want)
{
    message m;
    memset(&m, 0, sizeof m);
    m.m_u.m_m9.m9ll1 = peer;
    m.m_u.m_m9.m9ll2 = prev;
    m.m_u.m_m9.m9ll3 = delay;
    m.m_u.m_m9.m9ll4 = want;
    EXPECT(ipc_send(who, &m), 0);
}

static void locked(void)
{
    char me[24];
    snprintf(me, sizeof me, "%lld", (long long)atoll_getpid());
    message m;
    EXPECT(ipc_send(SELF, &m), ELOCKED);
    EXPECT(ipc_sendrec(atoll_getpid(), &m), ELOCKED);
    EXPECT(ipc_receive(SELF, &m, NULL), ELOCKED);
    EXPECT(ipc_sendnb(SELF, &m), ENOTREADY);

    /* a -> b -> a */
    atoll_pid_t a = spawn_on(atoll_kernel_index(), "child-cycle", me);
    atoll_pid_t b = spawn_peer("child-cycle", me);
    tell_cycle(a, b, 0, 0, 0);
    tell_cycle(b, a, a, 100, ELOCKED);
    reap(a, 0);
    reap(b, 0);

    /* a -> b -> c -> a, across as many kernels as WHERE allows */
    a = spawn_on(atoll_kernel_index(), "child-cycle", me);
    b = spawn_on(peer_kernel(0), "child-cycle", me);
    atoll_pid_t c = spawn_on(peer_kernel(1), "child-cycle", me);
    tell_cycle(a, b, 0, 0, 0);
    tell_cycle(b, c, a, 60, 0);
    tell_cycle(c, a, b, 150, ELOCKED);
    reap(a, 0);
    reap(b, 0);
    reap(c, 0);
}

static void dead(void)
{
    message m;
    memset(&m, 0, sizeof m);
    /* Ended before the call. */
    atoll_pid_t gone = spawn_peer("child-sleepexit", "0");
    reap(gone, 0);
    EXPECT(ipc_send(gone, &m), EDEADSRCDST);
    EXPECT(ipc_sendrec(gone, &m), EDEADSRCDST);
    EXPECT(ipc_receive(gone, &m, NULL), EDEADSRCDST);
    EXPECT(ipc_notify(gone), EDEADSRCDST);

    /* Ends while the caller is blocked sending to it. */
    atoll_pid_t p = spawn_peer("child-sleepexit", "50");
    EXPECT(ipc_send(p, &m), EDEADSRCDST);
    reap(p, 0);
    /* ... blocked receiving from it. */
    p = spawn_peer("child-sleepexit", "50");
    EXPECT(ipc_receive(p, &m, NULL), EDEADSRCDST);
    reap(p, 0);
    /* ... blocked in a receive called through a pointer: the import is in
     * the table, and the rewind ends in the thunk preparation made for it. */
    int32_t (*volatile receive)(atoll_pid_t, void *, int32_t *) = __atoll_ipc_receive;
    int32_t st = 0;
    p = spawn_peer("child-sleepexit", "50");
    EXPECT(receive(p, &m, &st), EDEADSRCDST);
    reap(p, 0);
    /* ... waiting for its reply. */
    p = spawn_peer("child-noreply", NULL);
    EXPECT(ipc_sendrec(p, &m), EDEADSRCDST);
    reap(p, 0);
    /* ... killed by another process. */
    p = spawn_peer("child-sleepexit", "100000");
    atoll_pid_t killer = spawn_on(atoll_kernel_index(), "child-killer", NULL);
    m.m2_ll1 = p;
    EXPECT(ipc_send(killer, &m), 0);
    EXPECT(ipc_sendrec(p, &m), EDEADSRCDST);
    reap(p, 128 + ATOLL_SIGKILL);
    reap(killer, 0);
}

static void errors(void)
{
    message m;
    int32_t status;
    memset(&m, 0, sizeof m);
    EXPECT(ipc_send(-5, &m), EBADSRCDST);
    EXPECT(ipc_send(ANY, &m), EBADSRCDST);
    EXPECT(ipc_notify(ANY), EBADSRCDST);
    /* Kernel 99 of this node does not exist. */
    atoll_pid_t nowhere = ((atoll_pid_t)atoll_kernel_node() << 48) | ((atoll_pid_t)99 << 32);
    EXPECT(ipc_send(nowhere, &m), EBADSRCDST);
    EXPECT(__atoll_ipc_send(SELF, (void *)(uintptr_t)0xFFFFFFF0u), EFAULT);
    EXPECT(__atoll_ipc_receive(ANY, (void *)(uintptr_t)0xFFFFFFF0u, &status), EFAULT);
    EXPECT(__atoll_ipc_receive(ANY, &m, (int32_t *)(uintptr_t)0xFFFFFFFEu), EFAULT);
    uint32_t id;
    EXPECT(atoll_grant(SELF, &m, sizeof m, 0, &id), EINVAL);
    EXPECT(atoll_grant(SELF, &m, sizeof m, 4, &id), EINVAL);
    EXPECT(__atoll_grant(SELF, (void *)(uintptr_t)0xFFFFFF00u, 4096, CPF_READ, &id), EFAULT);
    EXPECT(atoll_revoke(12345), EINVAL);
    EXPECT(atoll_vcopy(SELF, &m, SELF, (void *)(uintptr_t)0xFFFFFFF0u, 64), EFAULT);

    EXPECT(mnx_bind("default"), EBUSY);
    EXPECT(mnx_unbind(), 0);
    EXPECT(ipc_send(SELF, &m), ECALLDENIED);
    EXPECT(mnx_notify(SELF), ECALLDENIED);
    EXPECT(mnx_receive(ANY, &m), ECALLDENIED);
    EXPECT(mnx_send(SELF, &m), ECALLDENIED);
    EXPECT(mnx_vcopy(SELF, &m, SELF, &m, 8), ECALLDENIED);
    EXPECT(atoll_bind("no-such-domain"), ENOENT);
    EXPECT(atoll_bind("default"), 0);
    CHECK(atoll_domain() == 0);
    EXPECT(ipc_sendnb(SELF, &m), ENOTREADY);
}

static void domain(void)
{
    atoll_pid_t child = spawn_peer("child-rebind", NULL);
    message m;
    memset(&m, 0, sizeof m);
    EXPECT(ipc_send(child, &m), 0);
    /* Whether this send is queued before the child leaves (then refused
     * as it leaves) or arrives after it joined "other": ECALLDENIED. */
    EXPECT(ipc_send(child, &m), ECALLDENIED);
    EXPECT(ipc_notify(child), ECALLDENIED);
    EXPECT(ipc_sendrec(child, &m), ECALLDENIED);
    EXPECT(atoll_vcopy(child, (void *)4096, SELF, &m, 16), ECALLDENIED);
    /* A letter across domains is refused where it arrives: at once on
     * this kernel, or reported by a later senda. */
    EXPECT(senda_until_refused(child, &m), ECALLDENIED);
    /* Nor can a process end one of another domain; the node ends it with
     * the job. */
    EXPECT(atoll_kill(child, ATOLL_SIGKILL), EPERM);
}

static void grants(void)
{
    uint8_t *buf = aligned_alloc(65536, BLOCK);
    CHECK(buf != NULL);
    atoll_pid_t g = spawn_peer("child-granter", NULL);
    message m;
    memset(&m, 0, sizeof m);
    EXPECT(ipc_sendrec(g, &m), 0);
    uint8_t *out = (uint8_t *)(uintptr_t)m.m_u.m_m9.m9ll1, *in = (uint8_t *)(uintptr_t)m.m_u.m_m9.m9ll2;
    uint32_t out_id = (uint32_t)m.m_u.m_m9.m9ll3, in_id = (uint32_t)m.m_u.m_m9.m9ll4;

    /* safecopy: 16 MiB in one call, page-aligned. */
    memset(buf, 0, BLOCK);
    EXPECT(atoll_safecopy_from(g, out_id, 0, buf, BLOCK), 0);
    for (uint32_t i = 0; i < BLOCK; i += 4093)
        CHECK(buf[i] == (uint8_t)(i * 7 + 3));
    CHECK(buf[BLOCK - 1] == (uint8_t)((BLOCK - 1) * 7 + 3));
    /* Unaligned offset and length. */
    EXPECT(atoll_safecopy_from(g, out_id, 13, buf + 5, 1000), 0);
    CHECK(buf[5] == (uint8_t)(13 * 7 + 3));
    EXPECT(atoll_safecopy_from(g, out_id, BLOCK - 10, buf, 20), EFAULT);
    EXPECT(atoll_safecopy_to(g, out_id, 0, buf, 16), EPERM);
    EXPECT(atoll_safecopy_from(g, in_id, 0, buf, 16), EPERM);
    EXPECT(atoll_safecopy_from(g, 999, 0, buf, 16), EPERM);

    /* vcopy by address, covered by the grants (COPY1). */
    for (uint32_t i = 0; i < BLOCK; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    EXPECT(atoll_vcopy(SELF, buf, g, in, BLOCK), 0);
    EXPECT(atoll_vcopy(g, out + 4096, SELF, buf, 4096), 0);
    EXPECT(atoll_vcopy(g, out + BLOCK - 100, SELF, buf, 4096), EPERM);
    EXPECT(atoll_vcopy(SELF, buf, g, out, 64), EPERM);
    EXPECT(atoll_vcopy(g, in, SELF, buf, 64), EPERM);
    /* Bytes another process may write are carried, not lent (the node's
     * test counts one copy lent in all). */
    uint32_t mine;
    EXPECT(atoll_grant(g, buf, 64, CPF_WRITE, &mine), 0);
    EXPECT(atoll_vcopy(SELF, buf, g, in, 64), 0);
    EXPECT(atoll_revoke(mine), 0);
    m.m_type = 1;
    m.m1_i1 = BLOCK;
    EXPECT(ipc_sendrec(g, &m), 0);
    CHECK(m.m1_i1 == 1);

    /* A third process copies between two others (COPY2). */
    atoll_pid_t h = spawn_on(peer_kernel(1), "child-granter", NULL);
    memset(&m, 0, sizeof m);
    EXPECT(ipc_sendrec(h, &m), 0);
    uint8_t *h_in = (uint8_t *)(uintptr_t)m.m_u.m_m9.m9ll2;
    EXPECT(atoll_vcopy(g, out, h, h_in, BLOCK), 0);
    EXPECT(atoll_vcopy(h, h_in, g, out, 64), EPERM);
    m.m_type = 1;
    m.m1_i1 = BLOCK;
    EXPECT(ipc_sendrec(h, &m), 0);
    CHECK(m.m1_i1 == 1);

    /* Revoked: nothing more. */
    m.m_type = 2;
    EXPECT(ipc_sendrec(g, &m), 0);
    CHECK(m.m1_i1 == 0);
    EXPECT(atoll_safecopy_from(g, out_id, 0, buf, 16), EPERM);
    EXPECT(atoll_vcopy(g, out, SELF, buf, 16), EPERM);

    m.m_type = 0;
    EXPECT(ipc_send(g, &m), 0);
    EXPECT(ipc_send(h, &m), 0);
    reap(g, 0);
    reap(h, 0);
    free(buf);
}

static void stress(long pairs, const char *n)
{
    atoll_pid_t *clients = calloc((size_t)pairs, sizeof *clients);
    CHECK(clients != NULL);
    int anywhere = strncmp(where, "nodes", 5) != 0;
    for (long i = 0; i < pairs; i++) {
        int to = anywhere ? ATOLL_KERNEL_ANY : peer_kernel((int)(2 * i));
        atoll_pid_t server = spawn_on(to, "child-server", n);
        to = anywhere ? ATOLL_KERNEL_ANY : peer_kernel((int)(2 * i + 1));
        clients[i] = spawn_on(to, "child-client", n);
        message m;
        memset(&m, 0, sizeof m);
        m.m2_ll1 = server;
        EXPECT(ipc_send(clients[i], &m), 0);
    }
    for (long i = 0; i < 2 * pairs; i++) {
        int status = -1;
        EXPECT(atoll_wait(ATOLL_ANY, &status, NULL), 0);
        CHECK(status == 0);
    }
    free(clients);
}

static void hold(void)
{
    atoll_pid_t echo = spawn_peer("child-echo", NULL);
    atoll_pid_t sleeper = spawn_peer("child-sleepexit", "100000000");
    message m;
    memset(&m, 0, sizeof m);
    m.m_type = 1;
    EXPECT(ipc_sendrec(echo, &m), 0);
    printf("holding\n");
    fflush(stdout);
    EXPECT(ipc_send(sleeper, &m), 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ipc SCENARIO same|other [ARGS]\n");
        return 2;
    }
    const char *what = argv[1];
    where = argv[2];
    const char *arg = argc > 3 ? argv[3] : "0";

    if (strcmp(what, "child-echo") == 0) return child_echo();
    if (strcmp(what, "child-notified") == 0) return child_notified();
    if (strcmp(what, "child-sendnotify") == 0) return child_sendnotify(arg);
    if (strcmp(what, "child-letters") == 0) return child_letters(arg);
    if (strcmp(what, "child-sender") == 0) return child_sender(arg);
    if (strcmp(what, "child-receiver") == 0) return child_receiver();
    if (strcmp(what, "child-cycle") == 0) return child_cycle(arg);
    if (strcmp(what, "child-sleepexit") == 0) return child_sleepexit(arg);
    if (strcmp(what, "child-noreply") == 0) return child_noreply();
    if (strcmp(what, "child-killer") == 0) return child_killer();
    if (strcmp(what, "child-rebind") == 0) return child_rebind();
    if (strcmp(what, "child-granter") == 0) return child_granter();
    if (strcmp(what, "child-copier") == 0) return child_copier();
    if (strcmp(what, "child-moved") == 0) return child_moved();
    if (strcmp(what, "child-client") == 0) return child_client(arg);
    if (strcmp(what, "child-server") == 0) return child_server(arg);

    if (strcmp(what, "pingpong") == 0) pingpong(strtol(arg, NULL, 10));
    else if (strcmp(what, "senda") == 0) senda(strtol(arg, NULL, 10));
    else if (strcmp(what, "restored-sender") == 0) restored_sender();
    else if (strcmp(what, "restored-receiver") == 0) restored_receiver();
    else if (strcmp(what, "notify") == 0) notify();
    else if (strcmp(what, "locked") == 0) locked();
    else if (strcmp(what, "dead") == 0) dead();
    else if (strcmp(what, "errors") == 0) errors();
    else if (strcmp(what, "domain") == 0) domain();
    else if (strcmp(what, "grants") == 0) grants();
    else if (strcmp(what, "killed-copier") == 0) killed_copier(strtol(arg, NULL, 10));
    else if (strcmp(what, "moved-copier") == 0) moved_copier(strtol(arg, NULL, 10));
    else if (strcmp(what, "stress") == 0) stress(strtol(arg, NULL, 10), argc > 4 ? argv[4] : "100");
    else if (strcmp(what, "moved") == 0) moved();
    else if (strcmp(what, "hold") == 0) hold();
    else if (strcmp(what, "sleeper") == 0) {
        for (;;)
            sleep_ms(1000);
    } else {
        fprintf(stderr, "ipc: unknown scenario %s\n", what);
        return 2;
    }
    printf("ok %s\n", what);
    return 0;
}
