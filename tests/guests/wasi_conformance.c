/*
 * wasi_conformance - atoll's regressions for every class of difference the
 * official WASI test suite (WebAssembly/wasi-testsuite) found, with the
 * errno values wasmtime gives. Calls WASI directly (<wasi/api.h>) where
 * wasi-libc would hide what is checked.
 *
 *   wasi_conformance DIR     DIR: the guest path of a preopened directory
 *                            (empty, writable)
 *
 * Sections, each printing "NAME: ok":
 *   rights     a preopen reports the rights userlands expect and can be
 *              reopened with them; a directory never has FD_WRITE; narrowing
 *              with fd_fdstat_set_rights sticks, takes read/write away, and
 *              widening is ENOTCAPABLE
 *   sandbox    a directory opened beneath the preopen is a sandbox of its
 *              own: ".." out of it is ENOTCAPABLE even inside the preopen
 *   slashes    trailing slashes: unlink "file/" ENOTDIR, "dir/" EISDIR;
 *              symlink and link to "name/" ENOENT, EEXIST, ENOTDIR; rmdir
 *              and rename of "dir/" work
 *   fdflags    APPEND, SYNC, DSYNC and NONBLOCK given to path_open are kept
 *              and reported; fd_fdstat_set_flags changes them
 *   times      the times of a symbolic link itself can be set, and its
 *              target's stay; invalid fstflags are EINVAL
 *   sockets    sock_* on a missing descriptor EBADF, on a file ENOTSOCK
 *
 * Exit status 0 when every check passed; otherwise "FAIL ..." on stdout and
 * status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wasi/api.h>

static const char *section = "";

static void fail(const char *what, long got, long want)
{
    printf("FAIL %s: %s: got %ld, want %ld\n", section, what, got, want);
    exit(1);
}

/* Checks that a WASI call returned `want` (0 or an errno). */
static void expect(const char *what, __wasi_errno_t got, __wasi_errno_t want)
{
    if (got != want)
        fail(what, got, want);
}

static void expect_true(const char *what, int ok)
{
    if (!ok)
        fail(what, 0, 1);
}

static void done(void)
{
    printf("%s: ok\n", section);
}

/* The descriptor of the preopen named `name`. */
static __wasi_fd_t find_preopen(const char *name)
{
    for (__wasi_fd_t fd = 3; fd < 64; fd++) {
        __wasi_prestat_t st;
        if (__wasi_fd_prestat_get(fd, &st) != 0)
            continue;
        char buf[256];
        size_t len = st.u.dir.pr_name_len;
        if (len >= sizeof buf || __wasi_fd_prestat_dir_name(fd, (uint8_t *)buf, len) != 0)
            continue;
        buf[len] = 0;
        if (strcmp(buf, name) == 0)
            return fd;
    }
    printf("FAIL no preopen named %s\n", name);
    exit(1);
}

static __wasi_fd_t open_at(__wasi_fd_t dir, const char *path, __wasi_oflags_t oflags,
                           __wasi_rights_t base, __wasi_fdflags_t fdflags, __wasi_errno_t want)
{
    __wasi_fd_t fd = (__wasi_fd_t)-1;
    expect(path, __wasi_path_open(dir, 0, path, oflags, base, 0, fdflags, &fd), want);
    return fd;
}

static __wasi_fdstat_t fdstat(__wasi_fd_t fd)
{
    __wasi_fdstat_t st;
    expect("fd_fdstat_get", __wasi_fd_fdstat_get(fd, &st), 0);
    return st;
}

static void make_file(__wasi_fd_t dir, const char *name)
{
    __wasi_fd_t fd = open_at(dir, name, __WASI_OFLAGS_CREAT, __WASI_RIGHTS_FD_WRITE, 0, 0);
    expect("close new file", __wasi_fd_close(fd), 0);
}

static void rights(__wasi_fd_t pre)
{
    section = "rights";
    const __wasi_rights_t expected = __WASI_RIGHTS_PATH_CREATE_DIRECTORY |
        __WASI_RIGHTS_PATH_CREATE_FILE | __WASI_RIGHTS_PATH_LINK_SOURCE |
        __WASI_RIGHTS_PATH_LINK_TARGET | __WASI_RIGHTS_PATH_OPEN | __WASI_RIGHTS_FD_READDIR |
        __WASI_RIGHTS_PATH_READLINK | __WASI_RIGHTS_PATH_RENAME_SOURCE |
        __WASI_RIGHTS_PATH_RENAME_TARGET | __WASI_RIGHTS_PATH_SYMLINK |
        __WASI_RIGHTS_PATH_REMOVE_DIRECTORY | __WASI_RIGHTS_PATH_UNLINK_FILE |
        __WASI_RIGHTS_PATH_FILESTAT_GET | __WASI_RIGHTS_PATH_FILESTAT_SET_TIMES |
        __WASI_RIGHTS_FD_FILESTAT_GET | __WASI_RIGHTS_FD_FILESTAT_SET_TIMES;
    __wasi_fdstat_t st = fdstat(pre);
    expect_true("preopen base rights", (st.fs_rights_base & expected) == expected);
    expect_true("preopen base has no FD_WRITE", !(st.fs_rights_base & __WASI_RIGHTS_FD_WRITE));
    expect_true("preopen inherits read and write",
                (st.fs_rights_inheriting & (__WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE)) ==
                    (__WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE));

    /* Reopening "." with the rights it reports, with none, with read. */
    __wasi_fd_t again;
    expect("reopen with its rights",
           __wasi_path_open(pre, 0, ".", __WASI_OFLAGS_DIRECTORY, st.fs_rights_base,
                            st.fs_rights_inheriting, 0, &again),
           0);
    expect_true("reopened is a directory", fdstat(again).fs_filetype == __WASI_FILETYPE_DIRECTORY);
    expect_true("a directory has no FD_WRITE", !(fdstat(again).fs_rights_base & __WASI_RIGHTS_FD_WRITE));
    expect("close", __wasi_fd_close(again), 0);
    expect("close", __wasi_fd_close(open_at(pre, ".", 0, 0, 0, 0)), 0);
    expect("close", __wasi_fd_close(open_at(pre, ".", __WASI_OFLAGS_DIRECTORY,
                                            __WASI_RIGHTS_FD_READ, 0, 0)), 0);
    open_at(pre, ".", __WASI_OFLAGS_DIRECTORY, __WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE,
            0, __WASI_ERRNO_ISDIR);

    /* Narrowing a file's rights sticks and takes read and write away. */
    __wasi_fd_t f = open_at(pre, "rights.txt", __WASI_OFLAGS_CREAT,
                            __WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE, 0, 0);
    __wasi_fdstat_t fs = fdstat(f);
    expect_true("file has read, write, seek",
                (fs.fs_rights_base & (__WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE |
                                      __WASI_RIGHTS_FD_SEEK)) ==
                    (__WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE | __WASI_RIGHTS_FD_SEEK));
    __wasi_rights_t narrowed = fs.fs_rights_base & ~(__WASI_RIGHTS_FD_WRITE | __WASI_RIGHTS_FD_TELL);
    expect("narrow", __wasi_fd_fdstat_set_rights(f, narrowed, fs.fs_rights_inheriting), 0);
    expect_true("narrowed rights reported", fdstat(f).fs_rights_base == narrowed);
    __wasi_ciovec_t iov = {(const uint8_t *)"x", 1};
    __wasi_size_t n;
    expect("write after FD_WRITE dropped", __wasi_fd_write(f, &iov, 1, &n), __WASI_ERRNO_BADF);
    expect("widen", __wasi_fd_fdstat_set_rights(f, fs.fs_rights_base, fs.fs_rights_inheriting),
           __WASI_ERRNO_NOTCAPABLE);
    expect("set rights of a missing fd", __wasi_fd_fdstat_set_rights(999, 0, 0), __WASI_ERRNO_BADF);
    expect("close", __wasi_fd_close(f), 0);
    expect("unlink", __wasi_path_unlink_file(pre, "rights.txt"), 0);
    done();
}

static void sandbox(__wasi_fd_t pre)
{
    section = "sandbox";
    expect("mkdir", __wasi_path_create_directory(pre, "box"), 0);
    expect("mkdir", __wasi_path_create_directory(pre, "box/in"), 0);
    make_file(pre, "sibling");
    __wasi_fd_t box = open_at(pre, "box", __WASI_OFLAGS_DIRECTORY, 0, 0, 0);
    open_at(box, "../sibling", 0, __WASI_RIGHTS_FD_READ, 0, __WASI_ERRNO_NOTCAPABLE);
    open_at(box, "in/../../box/in", __WASI_OFLAGS_DIRECTORY, 0, 0, __WASI_ERRNO_NOTCAPABLE);
    expect("close", __wasi_fd_close(open_at(box, "in/..", __WASI_OFLAGS_DIRECTORY, 0, 0, 0)), 0);
    /* A link inside the box that leads to the preopen is as far as "..". */
    expect("symlink", __wasi_path_symlink("../sibling", box, "up"), 0);
    const __wasi_lookupflags_t follow = __WASI_LOOKUPFLAGS_SYMLINK_FOLLOW;
    __wasi_fd_t f;
    expect("follow up from the box",
           __wasi_path_open(box, follow, "up", 0, __WASI_RIGHTS_FD_READ, 0, 0, &f),
           __WASI_ERRNO_NOTCAPABLE);
    expect("not following it", __wasi_path_open(box, 0, "up", 0, __WASI_RIGHTS_FD_READ, 0, 0, &f),
           __WASI_ERRNO_LOOP);
    expect("follow from the preopen",
           __wasi_path_open(pre, follow, "box/up", 0, __WASI_RIGHTS_FD_READ, 0, 0, &f), 0);
    expect("close", __wasi_fd_close(f), 0);
    expect("unlink", __wasi_path_unlink_file(box, "up"), 0);
    expect("close", __wasi_fd_close(box), 0);
    expect("rmdir", __wasi_path_remove_directory(pre, "box/in"), 0);
    expect("rmdir", __wasi_path_remove_directory(pre, "box"), 0);
    expect("unlink", __wasi_path_unlink_file(pre, "sibling"), 0);
    done();
}

static void slashes(__wasi_fd_t pre)
{
    section = "slashes";
    make_file(pre, "file");
    expect("mkdir", __wasi_path_create_directory(pre, "dir"), 0);
    expect("unlink file/", __wasi_path_unlink_file(pre, "file/"), __WASI_ERRNO_NOTDIR);
    expect("unlink dir/", __wasi_path_unlink_file(pre, "dir/"), __WASI_ERRNO_ISDIR);
    expect("symlink to missing/", __wasi_path_symlink("source", pre, "missing/"), __WASI_ERRNO_NOENT);
    expect("symlink to dir/", __wasi_path_symlink("source", pre, "dir/"), __WASI_ERRNO_EXIST);
    expect("symlink to file/", __wasi_path_symlink("source", pre, "file/"), __WASI_ERRNO_NOTDIR);
    expect("link to new/", __wasi_path_link(pre, 0, "file", pre, "new/"), __WASI_ERRNO_NOENT);
    expect("rename dir/ dir2/", __wasi_path_rename(pre, "dir/", pre, "dir2/"), 0);
    expect("rename file/", __wasi_path_rename(pre, "file/", pre, "file2"), __WASI_ERRNO_NOTDIR);
    expect("open file/", __wasi_path_open(pre, 0, "file/", 0, 0, 0, 0, &(__wasi_fd_t){0}),
           __WASI_ERRNO_NOTDIR);
    expect("rmdir dir2/", __wasi_path_remove_directory(pre, "dir2/"), 0);
    expect("unlink file", __wasi_path_unlink_file(pre, "file"), 0);
    done();
}

static void fdflags(__wasi_fd_t pre)
{
    section = "fdflags";
    const __wasi_fdflags_t kept = __WASI_FDFLAGS_APPEND | __WASI_FDFLAGS_SYNC |
                                  __WASI_FDFLAGS_DSYNC | __WASI_FDFLAGS_NONBLOCK;
    __wasi_fd_t f = open_at(pre, "flags.txt", __WASI_OFLAGS_CREAT,
                            __WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_WRITE, kept, 0);
    expect_true("flags given to path_open are reported", fdstat(f).fs_flags == kept);
    int host = fcntl((int)f, F_GETFL);
    expect_true("wasi-libc sees O_SYNC and O_APPEND",
                (host & O_SYNC) == O_SYNC && (host & O_APPEND) == O_APPEND);
    /* New sync flags apply to the same open file, even one without a name. */
    expect("unlink", __wasi_path_unlink_file(pre, "flags.txt"), 0);
    expect("set flags", __wasi_fd_fdstat_set_flags(f, __WASI_FDFLAGS_DSYNC), 0);
    expect_true("new flags reported", fdstat(f).fs_flags == __WASI_FDFLAGS_DSYNC);
    __wasi_ciovec_t iov = {(const uint8_t *)"synced\n", 7};
    __wasi_size_t n;
    expect("write with DSYNC", __wasi_fd_write(f, &iov, 1, &n), 0);
    expect_true("wrote all", n == 7);
    char back[8] = {0};
    __wasi_iovec_t in = {(uint8_t *)back, 7};
    expect("read it back", __wasi_fd_pread(f, &in, 1, 0, &n), 0);
    expect_true("the unlinked file kept its bytes", n == 7 && strcmp(back, "synced\n") == 0);
    expect("unknown flag", __wasi_fd_fdstat_set_flags(f, 1 << 5), __WASI_ERRNO_INVAL);
    expect("close", __wasi_fd_close(f), 0);
    done();
}

static void times(__wasi_fd_t pre)
{
    section = "times";
    make_file(pre, "target");
    expect("symlink", __wasi_path_symlink("target", pre, "link"), 0);
    __wasi_filestat_t target, link;
    expect("stat target", __wasi_path_filestat_get(pre, 0, "target", &target), 0);
    const __wasi_timestamp_t then = 1000000000ull * 1000000 + 123; /* 2001, with nanoseconds */
    expect("set the link's own times",
           __wasi_path_filestat_set_times(pre, 0, "link", then, then,
                                          __WASI_FSTFLAGS_ATIM | __WASI_FSTFLAGS_MTIM),
           0);
    expect("stat link", __wasi_path_filestat_get(pre, 0, "link", &link), 0);
    expect_true("link is a symlink", link.filetype == __WASI_FILETYPE_SYMBOLIC_LINK);
    expect_true("link mtim set", link.mtim == then);
    __wasi_filestat_t after;
    expect("stat target", __wasi_path_filestat_get(pre, 0, "target", &after), 0);
    expect_true("target mtim kept", after.mtim == target.mtim);
    expect("through the link",
           __wasi_path_filestat_set_times(pre, __WASI_LOOKUPFLAGS_SYMLINK_FOLLOW, "link", 0,
                                          then, __WASI_FSTFLAGS_MTIM),
           0);
    expect("stat target", __wasi_path_filestat_get(pre, 0, "target", &after), 0);
    expect_true("target mtim set through the link", after.mtim == then);
    expect("MTIM and MTIM_NOW",
           __wasi_path_filestat_set_times(pre, 0, "target", 0, 0,
                                          __WASI_FSTFLAGS_MTIM | __WASI_FSTFLAGS_MTIM_NOW),
           __WASI_ERRNO_INVAL);
    expect("unknown fstflag", __wasi_path_filestat_set_times(pre, 0, "target", 0, 0, 1 << 4),
           __WASI_ERRNO_INVAL);
    expect("unlink", __wasi_path_unlink_file(pre, "link"), 0);
    expect("unlink", __wasi_path_unlink_file(pre, "target"), 0);
    done();
}

static void sockets(__wasi_fd_t pre)
{
    section = "sockets";
    expect("shutdown of a missing fd", __wasi_sock_shutdown(999, __WASI_SDFLAGS_RD),
           __WASI_ERRNO_BADF);
    expect("shutdown of stdout", __wasi_sock_shutdown(1, __WASI_SDFLAGS_RD), __WASI_ERRNO_NOTSOCK);
    expect("shutdown of a directory", __wasi_sock_shutdown(pre, __WASI_SDFLAGS_WR),
           __WASI_ERRNO_NOTSOCK);
    __wasi_fd_t accepted;
    expect("accept on stdin", __wasi_sock_accept(0, 0, &accepted), __WASI_ERRNO_NOTSOCK);
    __wasi_ciovec_t iov = {(const uint8_t *)"x", 1};
    __wasi_size_t n;
    expect("send on a missing fd", __wasi_sock_send(999, &iov, 1, 0, &n), __WASI_ERRNO_BADF);
    /* And through wasi-libc, as C programs see it. */
    errno = 0;
    expect_true("shutdown(2) sets ENOTSOCK",
                shutdown(STDOUT_FILENO, SHUT_RD) == -1 && errno == ENOTSOCK);
    done();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: wasi_conformance DIR   (DIR: a preopened, empty directory)\n");
        return 2;
    }
    __wasi_fd_t pre = find_preopen(argv[1]);
    rights(pre);
    sandbox(pre);
    slashes(pre);
    fdflags(pre);
    times(pre);
    sockets(pre);
    return 0;
}
