/*
 * files - C stdio and POSIX file calls inside a preopened directory, and the
 * sandbox around it.
 *
 *   files DIR          DIR: a preopened directory as the guest sees it, e.g. /data
 *
 * Works in DIR/files-test, which must not exist yet and is removed at the end.
 * Expected output with DIR=/data:
 *
 *   files: base=/data/files-test
 *   mkdir files-test: ok
 *   create a.txt: wrote 6 bytes
 *   append a.txt: wrote 6 bytes
 *   read a.txt: "hello\nworld\n"
 *   seek a.txt: ftell=6 rest="world\n" end=12
 *   stat a.txt: size=12
 *   create b.bin: wrote 3 bytes
 *   lseek b.bin: pos=2 byte=3
 *   create b.bin again with O_EXCL: EEXIST
 *   mkdir sub: ok
 *   readdir: a.txt b.bin sub
 *   rename a.txt -> sub/moved.txt: ok
 *   stat a.txt: ENOENT
 *   stat sub/moved.txt: size=12
 *   rmdir sub while not empty: ENOTEMPTY
 *   unlink sub/moved.txt: ok
 *   unlink b.bin: ok
 *   rmdir sub: ok
 *   escape /data/../escape.txt: ENOTCAPABLE
 *   escape /etc/passwd: ENOTCAPABLE
 *   escape through symlink: ENOTCAPABLE
 *   rmdir files-test: ok
 *   files: ok
 *
 * The escape lines print whichever error was chosen; any error passes. ".."
 * is the runtime's to refuse (ENOTCAPABLE or EPERM). /etc/passwd never reaches
 * it: wasi-libc finds no preopen for it and says ENOTCAPABLE (Debian's 2022
 * wasi-libc; ENOENT from wasi-sdk 19 on). The symlink check plants
 * files-test/link -> /etc and opens link/passwd; a runtime may also refuse to
 * create the link, and then that refusal is printed. Any unexpected result
 * prints "FAIL: ..." and exits 1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case EACCES: return "EACCES";
    case EBADF: return "EBADF";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case EISDIR: return "EISDIR";
    case ELOOP: return "ELOOP";
    case ENOENT: return "ENOENT";
    case ENOSYS: return "ENOSYS";
    case ENOTCAPABLE: return "ENOTCAPABLE";
    case ENOTDIR: return "ENOTDIR";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ENOTSUP: return "ENOTSUP";
    case EPERM: return "EPERM";
    case EROFS: return "EROFS";
    default: {
        static char unknown[16];
        snprintf(unknown, sizeof unknown, "errno %d", e);
        return unknown;
    }
    }
}

static char base[1024];

/* base/name in a static buffer: one path is in use at a time. */
static const char *at(const char *name)
{
    static char path[2048];
    snprintf(path, sizeof path, "%s/%s", base, name);
    return path;
}

static void fail(const char *what)
{
    printf("FAIL: %s: %s\n", what, errno_name(errno));
    exit(1);
}

/* Prints what: ok, or fails. */
static void ok_or_fail(const char *what, int result)
{
    if (result != 0)
        fail(what);
    printf("%s: ok\n", what);
}

/* For calls that must fail with want: prints the errno name. */
static void expect_errno(const char *what, int result, int want)
{
    if (result == 0) {
        printf("FAIL: %s: succeeded\n", what);
        exit(1);
    }
    if (errno != want)
        fail(what);
    printf("%s: %s\n", what, errno_name(errno));
}

/* Prints s as a C string literal, so newlines show. */
static void print_quoted(const char *s)
{
    putchar('"');
    for (; *s != '\0'; s++) {
        if (*s == '\n')
            fputs("\\n", stdout);
        else
            putchar(*s);
    }
    putchar('"');
}

static size_t write_file(const char *name, const char *mode, const char *text)
{
    FILE *f = fopen(at(name), mode);
    if (f == NULL)
        fail(name);
    size_t n = fwrite(text, 1, strlen(text), f);
    if (fclose(f) != 0)
        fail(name);
    return n;
}

static void stdio_checks(void)
{
    printf("create a.txt: wrote %zu bytes\n", write_file("a.txt", "w", "hello\n"));
    printf("append a.txt: wrote %zu bytes\n", write_file("a.txt", "a", "world\n"));

    char buf[64];
    FILE *f = fopen(at("a.txt"), "r");
    if (f == NULL)
        fail("open a.txt");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fputs("read a.txt: ", stdout);
    print_quoted(buf);
    putchar('\n');

    if (fseek(f, 6, SEEK_SET) != 0)
        fail("fseek");
    long pos = ftell(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    if (fseek(f, 0, SEEK_END) != 0)
        fail("fseek end");
    long end = ftell(f);
    printf("seek a.txt: ftell=%ld rest=", pos);
    print_quoted(buf);
    printf(" end=%ld\n", end);
    fclose(f);

    struct stat st;
    if (stat(at("a.txt"), &st) != 0)
        fail("stat a.txt");
    printf("stat a.txt: size=%lld\n", (long long)st.st_size);
}

static void posix_checks(void)
{
    const unsigned char bytes[3] = {1, 2, 3};
    int fd = open(at("b.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        fail("open b.bin");
    ssize_t n = write(fd, bytes, sizeof bytes);
    if (n < 0 || close(fd) != 0)
        fail("write b.bin");
    printf("create b.bin: wrote %zd bytes\n", n);

    fd = open(at("b.bin"), O_RDONLY);
    if (fd < 0)
        fail("open b.bin");
    off_t pos = lseek(fd, -1, SEEK_END);
    unsigned char last = 0;
    if (pos < 0 || read(fd, &last, 1) != 1)
        fail("lseek/read b.bin");
    close(fd);
    printf("lseek b.bin: pos=%lld byte=%d\n", (long long)pos, last);

    fd = open(at("b.bin"), O_WRONLY | O_CREAT | O_EXCL, 0644);
    expect_errno("create b.bin again with O_EXCL", fd < 0 ? -1 : 0, EEXIST);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runtimes list entries in any order, and some include . and ..: sort, skip. */
static void list_base(void)
{
    char *names[32];
    int count = 0;
    DIR *dir = opendir(base);
    if (dir == NULL)
        fail("opendir");
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (count == 32)
            break;
        names[count++] = strdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)count, sizeof names[0], compare_names);

    fputs("readdir:", stdout);
    for (int i = 0; i < count; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    putchar('\n');
}

static void tree_checks(void)
{
    ok_or_fail("mkdir sub", mkdir(at("sub"), 0755));
    list_base();

    char from[2048];
    snprintf(from, sizeof from, "%s", at("a.txt"));
    ok_or_fail("rename a.txt -> sub/moved.txt", rename(from, at("sub/moved.txt")));

    struct stat st;
    expect_errno("stat a.txt", stat(at("a.txt"), &st), ENOENT);
    if (stat(at("sub/moved.txt"), &st) != 0)
        fail("stat sub/moved.txt");
    printf("stat sub/moved.txt: size=%lld\n", (long long)st.st_size);

    expect_errno("rmdir sub while not empty", rmdir(at("sub")), ENOTEMPTY);
    ok_or_fail("unlink sub/moved.txt", unlink(at("sub/moved.txt")));
    ok_or_fail("unlink b.bin", unlink(at("b.bin")));
    ok_or_fail("rmdir sub", rmdir(at("sub")));
}

/* Each attempt must fail; which error is the runtime's business. */
static void escape(const char *label, const char *path, const char *mode)
{
    errno = 0;
    FILE *f = fopen(path, mode);
    if (f != NULL) {
        fclose(f);
        printf("FAIL: escape %s: opened\n", label);
        exit(1);
    }
    printf("escape %s: %s\n", label, errno_name(errno));
}

static void sandbox_checks(const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/../escape.txt", dir);
    escape(path, path, "w");
    escape("/etc/passwd", "/etc/passwd", "r");

    /* Made inside the sandbox but pointing out of it; this must be done
     * before files-test is removed. */
    if (symlink("/etc", at("link")) != 0) {
        printf("escape through symlink: %s\n", errno_name(errno));
        return;
    }
    escape("through symlink", at("link/passwd"), "r");
    if (unlink(at("link")) != 0)
        fail("unlink link");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: files DIR   (DIR: a preopened directory)\n");
        return 2;
    }
    snprintf(base, sizeof base, "%s/files-test", argv[1]);
    printf("files: base=%s\n", base);

    ok_or_fail("mkdir files-test", mkdir(base, 0755));
    stdio_checks();
    posix_checks();
    tree_checks();
    sandbox_checks(argv[1]);
    ok_or_fail("rmdir files-test", rmdir(base));

    printf("files: ok\n");
    return 0;
}
