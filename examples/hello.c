/*
 * hello - the smallest atoll program: who am I, where do I run, what was I
 * given?
 *
 *   atoll-cc examples/hello.c -o hello.wasm
 *   atoll run hello.wasm one two
 *
 * prints, for example:
 *   hello from pid 0.1:5:0 on kernel 1 of 4 (node 0)
 *   argv[0] = hello.wasm
 *   argv[1] = one
 *   argv[2] = two
 */
#include <stdio.h>

#include <atoll.h>

int main(int argc, char **argv)
{
    char pid[ATOLL_PID_STRLEN];

    printf("hello from pid %s on kernel %d of %d (node %d)\n",
           atoll_pid_format(pid, atoll_getpid()), atoll_kernel_index(),
           atoll_kernel_count(), atoll_kernel_node());
    for (int i = 0; i < argc; i++)
        printf("argv[%d] = %s\n", i, argv[i]);
    return 0;
}
