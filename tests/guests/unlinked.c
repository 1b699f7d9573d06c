/*
 * unlinked - open files whose names are gone: the temporary-file idiom
 * (open, unlink, go on using it) and a file renamed over while open.
 *
 *   unlinked DIR               DIR: a preopened directory, e.g. /data
 *   unlinked DIR fork KERNEL   also forks a child on KERNEL (an index of
 *                              this node, or NODE.INDEX), which uses the
 *                              unlinked file too
 *   unlinked DIR forkclose KERNEL
 *                              likewise, but the parent closes the file
 *                              before the child uses it (and tells it so
 *                              with ipc_notify)
 *   unlinked DIR move KERNEL [BACK]
 *                              moves itself to KERNEL (likewise) once the
 *                              file is unlinked, and goes on there (and
 *                              then moves to BACK, and goes on there)
 *   unlinked DIR exec          execs itself as `unlinked DIR after FD`
 *                              once the file is unlinked, which reads it
 *                              through descriptor FD and ends
 *   unlinked DIR wait          once the file is unlinked, waits until
 *                              DIR/go exists (a checkpoint and a restore
 *                              may come meanwhile), then goes on
 *
 * Prints, with DIR=/data:
 *
 *   unlinked: tmp is gone, wrote 5 bytes
 *   unlinked: tmp reads "hello"
 *   child: tmp reads "hello", wrote 6 bytes        (with fork)
 *   unlinked: moved, wrote 6 bytes                 (with move)
 *   after exec: tmp reads "hello"                  (with exec, and ends)
 *   unlinked: closed tmp before the child used it  (with forkclose)
 *   unlinked: tmp reads "hello world"              (with fork or move)
 *   unlinked: waiting for DIR/go                   (with wait)
 *   unlinked: went on, tmp reads "hello world"     (with wait)
 *   unlinked: back, tmp reads "hello world"        (with move ... BACK)
 *   unlinked: old reads "old" after new took its name
 *   unlinked: ok
 *
 * Exit status: 0, 1 on the first failure (printed: what, and errno).
 */
#include <atoll.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char path_buf[3][512];

static const char *at(int i, const char *dir, const char *name)
{
    snprintf(path_buf[i], sizeof path_buf[i], "%s/%s", dir, name);
    return path_buf[i];
}

static int parse_kernel(const char *arg)
{
    const char *dot = strchr(arg, '.');
    return dot != NULL ? ATOLL_KERNEL(atoi(arg), atoi(dot + 1)) : atoi(arg);
}

static void fail(const char *what)
{
    printf("unlinked: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The first `len` bytes of `fd`, as a string. */
static const char *contents(int fd, size_t len)
{
    static char buf[64];
    if (len >= sizeof buf)
        len = sizeof buf - 1;
    ssize_t n = pread(fd, buf, len, 0);
    if (n < 0)
        fail("pread");
    buf[n] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    int closing = argc == 4 && strcmp(argv[2], "forkclose") == 0;
    int forking = closing || (argc == 4 && strcmp(argv[2], "fork") == 0);
    int moving = (argc == 4 || argc == 5) && strcmp(argv[2], "move") == 0;
    int execing = argc == 3 && strcmp(argv[2], "exec") == 0;
    int waiting = argc == 3 && strcmp(argv[2], "wait") == 0;
    if (argc == 4 && strcmp(argv[2], "after") == 0) {
        printf("after exec: tmp reads \"%s\"\n", contents(atoi(argv[3]), 5));
        return 0;
    }
    if (argc != 2 && !forking && !moving && !execing && !waiting) {
        fprintf(stderr, "usage: unlinked DIR [fork|forkclose|move KERNEL | exec | wait]\n");
        return 2;
    }
    const char *dir = argv[1];

    const char *tmp = at(0, dir, "unlinked.tmp");
    int fd = open(tmp, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0)
        fail("open tmp");
    if (unlink(tmp) != 0)
        fail("unlink tmp");
    struct stat st;
    if (stat(tmp, &st) == 0 || errno != ENOENT)
        fail("tmp still has a name");
    ssize_t n = write(fd, "hello", 5);
    if (n != 5)
        fail("write tmp");
    printf("unlinked: tmp is gone, wrote %zd bytes\n", n);
    printf("unlinked: tmp reads \"%s\"\n", contents(fd, 5));

    if (forking) {
        atoll_pid_t child = atoll_fork(parse_kernel(argv[3]));
        if (child < 0) {
            errno = (int)-child;
            fail("fork");
        }
        if (child == 0) {
            message m;
            if (closing && ipc_receive(ATOLL_ANY, &m, NULL) != 0)
                fail("receive");
            printf("child: tmp reads \"%s\", ", contents(fd, 5));
            n = pwrite(fd, " world", 6, 5);
            printf("wrote %zd bytes\n", n);
            fflush(stdout);
            _exit(n == 6 ? 0 : 1);
        }
        if (closing) {
            if (close(fd) != 0)
                fail("close tmp");
            fd = -1;
            if (ipc_notify(child) != 0)
                fail("notify");
        }
        int status;
        if (atoll_wait(child, &status, NULL) != 0)
            fail("wait");
        if (status != 0) {
            printf("unlinked: the child ended with %d\n", status);
            return 1;
        }
        if (closing)
            printf("unlinked: closed tmp before the child used it\n");
        else
            printf("unlinked: tmp reads \"%s\"\n", contents(fd, 11));
    }
    if (execing) {
        char fd_text[16];
        snprintf(fd_text, sizeof fd_text, "%d", fd);
        char *args[] = {"unlinked", argv[1], "after", fd_text, NULL};
        fflush(stdout);
        errno = atoll_exec(NULL, args, atoll_kernel_index());
        fail("exec");
    }
    if (moving) {
        int err = atoll_migrate_to(parse_kernel(argv[3]));
        if (err != 0) {
            errno = err;
            fail("move");
        }
        n = pwrite(fd, " world", 6, 5);
        printf("unlinked: moved, wrote %zd bytes\n", n);
        printf("unlinked: tmp reads \"%s\"\n", contents(fd, 11));
        if (argc == 5) {
            err = atoll_migrate_to(parse_kernel(argv[4]));
            if (err != 0) {
                errno = err;
                fail("move back");
            }
            printf("unlinked: back, tmp reads \"%s\"\n", contents(fd, 11));
        }
    }

    if (waiting) {
        const char *go = at(1, dir, "go");
        printf("unlinked: waiting for %s\n", go);
        fflush(stdout);
        struct stat there;
        while (stat(go, &there) != 0)
            usleep(5000);
        if (pwrite(fd, " world", 6, 5) != 6)
            fail("pwrite after waiting");
        printf("unlinked: went on, tmp reads \"%s\"\n", contents(fd, 11));
    }

    /* `old` stays open while `new` is renamed over its name. */
    const char *old = at(1, dir, "unlinked.old"), *new = at(2, dir, "unlinked.new");
    int ofd = open(old, O_CREAT | O_RDWR | O_TRUNC, 0600);
    int nfd = open(new, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (ofd < 0 || nfd < 0)
        fail("open old and new");
    if (write(ofd, "old", 3) != 3 || write(nfd, "new!", 4) != 4)
        fail("write old and new");
    close(nfd);
    if (rename(new, old) != 0)
        fail("rename new over old");
    printf("unlinked: old reads \"%s\" after new took its name\n", contents(ofd, 4));
    close(ofd);
    if (fd >= 0)
        close(fd);
    if (unlink(old) != 0)
        fail("unlink old");
    printf("unlinked: ok\n");
    return 0;
}
