/* Unnamed semaphores: a count, and a futex on it for those that wait. */
#include <semaphore.h>
#include <stdarg.h>

#include "impl.h"

static volatile int *count(sem_t *s) {
    return &s->__val[0];
}

int sem_init(sem_t *s, int pshared, unsigned value) {
    if (value > INT32_MAX) {
        errno = EINVAL;
        return -1;
    }
    if (pshared) {
        errno = ENOSYS;
        return -1;
    }
    *count(s) = (int)value;
    return 0;
}

int sem_destroy(sem_t *s) {
    (void)s;
    return 0;
}

int sem_trywait(sem_t *s) {
    int v = *count(s);
    while (v > 0) {
        if (__atomic_compare_exchange_n(count(s), &v, v - 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return 0;
    }
    errno = EAGAIN;
    return -1;
}

int sem_timedwait(sem_t *restrict s, const struct timespec *restrict abstime) {
    while (sem_trywait(s) != 0) {
        int rc = __atoll_futex_until(count(s), 0, CLOCK_REALTIME, abstime);
        if (rc == ETIMEDOUT || rc == EINVAL) {
            errno = rc;
            return -1;
        }
    }
    return 0;
}

int sem_wait(sem_t *s) {
    return sem_timedwait(s, 0);
}

int sem_post(sem_t *s) {
    if (*count(s) == INT32_MAX) {
        errno = EOVERFLOW;
        return -1;
    }
    __atomic_fetch_add(count(s), 1, __ATOMIC_RELEASE);
    __atoll_futex_wake(count(s), 1);
    return 0;
}

int sem_getvalue(sem_t *restrict s, int *restrict value) {
    *value = *count(s);
    return 0;
}

/* Named semaphores would be shared between processes, which share no
 * memory on atoll. */
sem_t *sem_open(const char *name, int flags, ...) {
    (void)name;
    (void)flags;
    errno = ENOSYS;
    return SEM_FAILED;
}

int sem_close(sem_t *s) {
    (void)s;
    errno = ENOSYS;
    return -1;
}

int sem_unlink(const char *name) {
    (void)name;
    errno = ENOSYS;
    return -1;
}
