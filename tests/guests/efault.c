/*
 * efault - hands the runtime pointers outside linear memory in every system
 * call that takes one, and checks that each call fails with EFAULT (WASI errno
 * 21) instead of crashing anything, and has no effect.
 *
 *   efault             (needs one preopened directory and a non-empty argv)
 *
 * The calls go straight to the imports, bypassing wasi-libc, which would
 * otherwise look at some pointers (e.g. strlen a path) and trap in the guest
 * before the runtime is ever asked. Expected output, one line per check:
 *
 *   fd_write_iovs: errno=21 ok           iovs array out of bounds
 *   fd_write_buf: errno=21 ok            an iov's buffer out of bounds
 *   fd_write_wrap: errno=21 ok           buffer whose end wraps past 2^32
 *   fd_read_buf: errno=21 ok             read from stdin into a bad buffer
 *   args_get: errno=21 ok
 *   args_sizes_get: errno=21 ok
 *   environ_sizes_get: errno=21 ok
 *   environ_get: errno=21 ok             (errno=0 also ok if environ is empty:
 *                                         then there is nothing to write)
 *   clock_time_get: errno=21 ok
 *   random_get: errno=21 ok
 *   path_open: errno=21 ok               bad path pointer
 *   fd_prestat_dir_name: errno=21 ok
 *   poll_oneoff: errno=21 ok             bad subscriptions
 *   spawn_module: errno=21 ok            atoll.spawn, bad module pointer
 *   spawn_argv: errno=21 ok              atoll.spawn, bad argv buffer
 *   spawn_pid_out: errno=21 ok           atoll.spawn, bad pid_out
 *   no_stray_child: errno=12 ok          the failed spawns started nothing:
 *                                        atoll.wait(ANY) gives ECHILD
 *   wait_status_out: errno=21 ok         atoll.wait on a real child, bad status
 *   wait_pid_out: errno=21 ok            atoll.wait on a real child, bad pid_out
 *   wait_after_efault: errno=0 ok        the child was not reaped by the
 *                                        failed waits: it is still there
 *   efault: 0 failures
 *
 * A check that gets anything else says FAIL. Exit status: the number of
 * failures. Run as "efault child" it is the child of the wait checks and
 * exits 0 at once.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <atoll.h>
#include <wasi/api.h> /* struct layouts only; the calls are declared below */

/* Far past the end of any linear memory a test can have, and 4-aligned so
 * that no runtime can blame alignment instead. */
#define BAD ((int32_t)0xFFFFFFF0u)

#define WASI_IMPORT(name) \
    __attribute__((import_module("wasi_snapshot_preview1"), import_name(name)))

/* Raw preview1 signatures: every pointer is an i32 address. */
int32_t raw_fd_write(int32_t fd, int32_t iovs, int32_t iovs_len,
                     int32_t nwritten) WASI_IMPORT("fd_write");
int32_t raw_fd_read(int32_t fd, int32_t iovs, int32_t iovs_len, int32_t nread)
    WASI_IMPORT("fd_read");
int32_t raw_args_get(int32_t argv, int32_t argv_buf) WASI_IMPORT("args_get");
int32_t raw_args_sizes_get(int32_t argc, int32_t argv_buf_size)
    WASI_IMPORT("args_sizes_get");
int32_t raw_environ_get(int32_t environ, int32_t environ_buf)
    WASI_IMPORT("environ_get");
int32_t raw_environ_sizes_get(int32_t count, int32_t buf_size)
    WASI_IMPORT("environ_sizes_get");
int32_t raw_clock_time_get(int32_t clock_id, int64_t precision, int32_t time)
    WASI_IMPORT("clock_time_get");
int32_t raw_random_get(int32_t buf, int32_t buf_len) WASI_IMPORT("random_get");
int32_t raw_path_open(int32_t dirfd, int32_t dirflags, int32_t path,
                      int32_t path_len, int32_t oflags, int64_t rights_base,
                      int64_t rights_inheriting, int32_t fdflags, int32_t fd)
    WASI_IMPORT("path_open");
int32_t raw_fd_prestat_get(int32_t fd, int32_t prestat)
    WASI_IMPORT("fd_prestat_get");
int32_t raw_fd_prestat_dir_name(int32_t fd, int32_t path, int32_t path_len)
    WASI_IMPORT("fd_prestat_dir_name");
int32_t raw_poll_oneoff(int32_t in, int32_t out, int32_t nsubscriptions,
                        int32_t nevents) WASI_IMPORT("poll_oneoff");

/* The address of a real object, as the runtime sees it. */
#define ADDR(p) ((int32_t)(uintptr_t)(p))

static int failures;

static void expect(const char *name, int32_t err, int32_t want, int also_ok_zero)
{
    int ok = err == want || (also_ok_zero && err == 0);
    printf("%s: errno=%d %s\n", name, (int)err, ok ? "ok" : "FAIL");
    fflush(stdout); /* if the next call takes the runtime down, this is shown */
    if (!ok)
        failures++;
}

/* The first preopened directory: path_open and fd_prestat_dir_name need a
 * real one, or the runtime could rightly answer EBADF before looking at the
 * pointer. */
static int32_t find_preopen(uint32_t *name_len)
{
    for (int32_t fd = 3; fd < 64; fd++) {
        __wasi_prestat_t prestat;
        if (raw_fd_prestat_get(fd, ADDR(&prestat)) == 0 &&
            prestat.tag == __WASI_PREOPENTYPE_DIR) {
            *name_len = prestat.u.dir.pr_name_len;
            return fd;
        }
    }
    *name_len = 1;
    return 3;
}

static void check_wasi(void)
{
    __wasi_size_t n = 0;
    __wasi_ciovec_t ciov;
    __wasi_iovec_t iov;

    expect("fd_write_iovs", raw_fd_write(1, BAD, 1, ADDR(&n)), EFAULT, 0);

    ciov.buf = (const uint8_t *)(uintptr_t)BAD;
    ciov.buf_len = 16;
    expect("fd_write_buf", raw_fd_write(1, ADDR(&ciov), 1, ADDR(&n)), EFAULT, 0);

    /* Catches a bounds check done in 32 bits: 0xFFFFFFF0 + 0x20 wraps to 0x10. */
    ciov.buf_len = 0x20;
    expect("fd_write_wrap", raw_fd_write(1, ADDR(&ciov), 1, ADDR(&n)), EFAULT, 0);

    iov.buf = (uint8_t *)(uintptr_t)BAD;
    iov.buf_len = 16;
    expect("fd_read_buf", raw_fd_read(0, ADDR(&iov), 1, ADDR(&n)), EFAULT, 0);

    __wasi_size_t argc = 0, argv_size = 0;
    raw_args_sizes_get(ADDR(&argc), ADDR(&argv_size));
    expect("args_get", raw_args_get(BAD, BAD), EFAULT, argc == 0);
    expect("args_sizes_get", raw_args_sizes_get(BAD, BAD), EFAULT, 0);

    __wasi_size_t envc = 0, env_size = 0;
    raw_environ_sizes_get(ADDR(&envc), ADDR(&env_size));
    expect("environ_sizes_get", raw_environ_sizes_get(BAD, BAD), EFAULT, 0);
    expect("environ_get", raw_environ_get(BAD, BAD), EFAULT, envc == 0);

    expect("clock_time_get",
           raw_clock_time_get(__WASI_CLOCKID_MONOTONIC, 1, BAD), EFAULT, 0);
    expect("random_get", raw_random_get(BAD, 16), EFAULT, 0);

    uint32_t name_len;
    int32_t dirfd = find_preopen(&name_len);
    __wasi_fd_t opened;
    expect("path_open",
           raw_path_open(dirfd, 0, BAD, 8, 0, __WASI_RIGHTS_FD_READ, 0, 0,
                         ADDR(&opened)),
           EFAULT, 0);
    expect("fd_prestat_dir_name",
           raw_fd_prestat_dir_name(dirfd, BAD, (int32_t)name_len), EFAULT, 0);

    __wasi_event_t events[1];
    expect("poll_oneoff", raw_poll_oneoff(BAD, ADDR(events), 1, ADDR(&n)),
           EFAULT, 0);
}

static void check_atoll(void)
{
    /* "efault\0child\0": the child exits at once. */
    static const char argv_buf[] = "efault\0child";
    const int32_t argv_len = sizeof argv_buf;
    const char *bad = (const char *)(uintptr_t)BAD;
    atoll_pid_t pid = 0;
    int32_t status = 0;

    expect("spawn_module",
           __atoll_spawn(bad, 8, argv_buf, argv_len, ATOLL_KERNEL_ANY, &pid),
           EFAULT, 0);
    expect("spawn_argv",
           __atoll_spawn(NULL, 0, bad, 16, ATOLL_KERNEL_ANY, &pid), EFAULT, 0);
    expect("spawn_pid_out",
           __atoll_spawn(NULL, 0, argv_buf, argv_len, ATOLL_KERNEL_ANY,
                         (atoll_pid_t *)(uintptr_t)BAD),
           EFAULT, 0);
    expect("no_stray_child", __atoll_wait(ATOLL_ANY, &status, &pid), ECHILD, 0);

    /* A real child, so that wait has something to wait for and can only
     * fail because of the pointer. */
    atoll_pid_t child = 0;
    int32_t err = __atoll_spawn(NULL, 0, argv_buf, argv_len, ATOLL_KERNEL_ANY,
                                &child);
    if (err != 0) {
        printf("spawn for the wait checks failed: errno=%d\n", (int)err);
        failures++;
    }
    expect("wait_status_out",
           __atoll_wait(child, (int32_t *)(uintptr_t)BAD, &pid), EFAULT, 0);
    expect("wait_pid_out",
           __atoll_wait(child, &status, (atoll_pid_t *)(uintptr_t)BAD), EFAULT, 0);

    err = __atoll_wait(child, &status, &pid);
    if (err == 0 && (pid != child || status != 0)) {
        printf("wait_after_efault: errno=0 FAIL (wrong pid or status %d)\n",
               (int)status);
        failures++;
    } else {
        expect("wait_after_efault", err, 0, 0);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return 0;

    check_wasi();
    check_atoll();

    printf("efault: %d failures\n", failures);
    return failures;
}
