/* <semaphore.h> for atoll guests: unnamed semaphores between the threads of
 * a process (sdk/thread/). sem_open and the other named semaphores fail
 * with ENOSYS: atoll processes share no memory. Link with -pthread. */
#ifndef ATOLL_SEMAPHORE_H
#define ATOLL_SEMAPHORE_H

#define __NEED_time_t
#define __NEED_struct_timespec
#include <bits/alltypes.h>

#include <fcntl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SEM_FAILED ((sem_t *)0)

typedef struct {
    volatile int __val[4 * sizeof(long)];
} sem_t;

int sem_init(sem_t *, int, unsigned);
int sem_destroy(sem_t *);
int sem_wait(sem_t *);
int sem_trywait(sem_t *);
int sem_timedwait(sem_t *__restrict, const struct timespec *__restrict);
int sem_post(sem_t *);
int sem_getvalue(sem_t *__restrict, int *__restrict);
sem_t *sem_open(const char *, int, ...);
int sem_close(sem_t *);
int sem_unlink(const char *);

#ifdef __cplusplus
}
#endif

#endif
