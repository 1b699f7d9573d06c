/* Mutexes, condition variables, read-write locks and barriers, on futexes. */
#include <string.h>

#include "impl.h"

LAYOUT(pthread_mutex_t, struct mutex);
LAYOUT(pthread_cond_t, struct cond);
LAYOUT(pthread_rwlock_t, struct rwlock);
LAYOUT(pthread_barrier_t, struct barrier);

int __atoll_futex_until(volatile int *addr, int expected, clockid_t clock,
                 const struct timespec *abstime) {
    int64_t timeout = -1;
    if (abstime) {
        if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L)
            return EINVAL;
        struct timespec now;
        clock_gettime(clock, &now);
        timeout = (int64_t)(abstime->tv_sec - now.tv_sec) * 1000000000LL +
                  (abstime->tv_nsec - now.tv_nsec);
        if (timeout <= 0)
            return ETIMEDOUT;
    }
    int rc = __atoll_futex_wait(addr, expected, timeout);
    return rc == EAGAIN ? EAGAIN : rc;
}

int __atoll_word_lock_until(volatile int *l, clockid_t clock, const struct timespec *abstime) {
    int c = 0;
    if (__atomic_compare_exchange_n(l, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return 0;
    if (c != 2)
        c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
    while (c != 0) {
        if (__atoll_futex_until(l, 2, clock, abstime) == ETIMEDOUT)
            return ETIMEDOUT;
        c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
    }
    return 0;
}

void __atoll_word_lock(volatile int *l) {
    __atoll_word_lock_until(l, CLOCK_REALTIME, 0);
}

void __atoll_word_unlock(volatile int *l) {
    if (__atomic_exchange_n(l, 0, __ATOMIC_RELEASE) == 2)
        __atoll_futex_wake(l, 1);
}

/* Mutexes. */

int pthread_mutexattr_init(pthread_mutexattr_t *a) {
    a->__attr = PTHREAD_MUTEX_DEFAULT;
    return 0;
}

int pthread_mutexattr_destroy(pthread_mutexattr_t *a) {
    (void)a;
    return 0;
}

int pthread_mutexattr_gettype(const pthread_mutexattr_t *restrict a, int *restrict type) {
    *type = (int)(a->__attr & 3);
    return 0;
}

int pthread_mutexattr_settype(pthread_mutexattr_t *a, int type) {
    if (type < PTHREAD_MUTEX_NORMAL || type > PTHREAD_MUTEX_ERRORCHECK)
        return EINVAL;
    a->__attr = (unsigned)type;
    return 0;
}

int pthread_mutexattr_getpshared(const pthread_mutexattr_t *restrict a, int *restrict pshared) {
    (void)a;
    *pshared = PTHREAD_PROCESS_PRIVATE;
    return 0;
}

int pthread_mutexattr_setpshared(pthread_mutexattr_t *a, int pshared) {
    (void)a;
    /* Processes share no memory on atoll. */
    return pshared == PTHREAD_PROCESS_PRIVATE ? 0 : ENOTSUP;
}

int pthread_mutex_init(pthread_mutex_t *restrict m, const pthread_mutexattr_t *restrict a) {
    memset(m, 0, sizeof *m);
    ((struct mutex *)m)->type = a ? (int)(a->__attr & 3) : PTHREAD_MUTEX_DEFAULT;
    return 0;
}

int pthread_mutex_destroy(pthread_mutex_t *m) {
    return ((struct mutex *)m)->lock ? EBUSY : 0;
}

/* What a lock by the owner itself does, for the types that notice:
 * -1 if it is not the owner's. */
static int relock(struct mutex *m, int me) {
    if (m->type == PTHREAD_MUTEX_NORMAL || m->owner != me || m->lock == 0)
        return -1;
    if (m->type == PTHREAD_MUTEX_ERRORCHECK)
        return EDEADLK;
    m->count++;
    return 0;
}

static int mutex_lock(pthread_mutex_t *mp, int try, const struct timespec *abstime) {
    struct mutex *m = (struct mutex *)mp;
    int me = m->type == PTHREAD_MUTEX_NORMAL ? 0 : pthread_self()->tid;
    int rc = relock(m, me);
    if (rc >= 0)
        return rc;
    if (try) {
        int c = 0;
        if (!__atomic_compare_exchange_n(&m->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return EBUSY;
    } else if ((rc = __atoll_word_lock_until(&m->lock, CLOCK_REALTIME, abstime)) != 0) {
        return rc;
    }
    m->owner = me;
    m->count = 0;
    return 0;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    return mutex_lock(m, 0, 0);
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
    return mutex_lock(m, 1, 0);
}

int pthread_mutex_timedlock(pthread_mutex_t *restrict m, const struct timespec *restrict at) {
    return mutex_lock(m, 0, at);
}

int pthread_mutex_unlock(pthread_mutex_t *mp) {
    struct mutex *m = (struct mutex *)mp;
    if (m->type != PTHREAD_MUTEX_NORMAL) {
        if (m->lock == 0 || m->owner != pthread_self()->tid)
            return EPERM;
        if (m->count > 0) {
            m->count--;
            return 0;
        }
    }
    m->owner = 0;
    __atoll_word_unlock(&m->lock);
    return 0;
}

/* Condition variables: a sequence number that every signal bumps; a
 * waiter sleeps while it has not changed. */

/* pthread_condattr_t: __attr 1 for CLOCK_MONOTONIC, 0 for CLOCK_REALTIME
 * (WASI's clockid_t is a pointer). */
int pthread_condattr_init(pthread_condattr_t *a) {
    a->__attr = 0;
    return 0;
}

int pthread_condattr_destroy(pthread_condattr_t *a) {
    (void)a;
    return 0;
}

int pthread_condattr_getclock(const pthread_condattr_t *restrict a, clockid_t *restrict clock) {
    *clock = a->__attr ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    return 0;
}

int pthread_condattr_setclock(pthread_condattr_t *a, clockid_t clock) {
    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return EINVAL;
    a->__attr = clock == CLOCK_MONOTONIC;
    return 0;
}

int pthread_cond_init(pthread_cond_t *restrict c, const pthread_condattr_t *restrict a) {
    memset(c, 0, sizeof *c);
    ((struct cond *)c)->clock = a && a->__attr ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    return 0;
}

int pthread_cond_destroy(pthread_cond_t *c) {
    (void)c;
    return 0;
}

int pthread_cond_timedwait(pthread_cond_t *restrict cp, pthread_mutex_t *restrict mp,
                           const struct timespec *restrict abstime) {
    struct cond *c = (struct cond *)cp;
    struct mutex *m = (struct mutex *)mp;
    int seq = c->seq;
    /* A recursive mutex is released whole and taken back as deep. */
    int count = m->count;
    m->count = 0;
    int rc = pthread_mutex_unlock(mp);
    if (rc)
        return rc;
    rc = __atoll_futex_until(&c->seq, seq, c->clock, abstime);
    /* Taken back as contended: other waiters may have been woken too. */
    int me = m->type == PTHREAD_MUTEX_NORMAL ? 0 : pthread_self()->tid;
    while (__atomic_exchange_n(&m->lock, 2, __ATOMIC_ACQUIRE) != 0)
        __atoll_futex_wait(&m->lock, 2, -1);
    m->owner = me;
    m->count = count;
    return rc == ETIMEDOUT || rc == EINVAL ? rc : 0;
}

int pthread_cond_wait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m) {
    return pthread_cond_timedwait(c, m, 0);
}

int pthread_cond_signal(pthread_cond_t *cp) {
    struct cond *c = (struct cond *)cp;
    __atomic_fetch_add(&c->seq, 1, __ATOMIC_SEQ_CST);
    __atoll_futex_wake(&c->seq, 1);
    return 0;
}

int pthread_cond_broadcast(pthread_cond_t *cp) {
    struct cond *c = (struct cond *)cp;
    __atomic_fetch_add(&c->seq, 1, __ATOMIC_SEQ_CST);
    __atoll_futex_wake(&c->seq, INT32_MAX);
    return 0;
}

/* Read-write locks: writers first (a waiting writer holds off new
 * readers), so that a stream of readers cannot starve one. */

int pthread_rwlockattr_init(pthread_rwlockattr_t *a) {
    memset(a, 0, sizeof *a);
    return 0;
}

int pthread_rwlockattr_destroy(pthread_rwlockattr_t *a) {
    (void)a;
    return 0;
}

int pthread_rwlock_init(pthread_rwlock_t *restrict l, const pthread_rwlockattr_t *restrict a) {
    (void)a;
    memset(l, 0, sizeof *l);
    return 0;
}

int pthread_rwlock_destroy(pthread_rwlock_t *lp) {
    struct rwlock *l = (struct rwlock *)lp;
    return l->readers || l->writer ? EBUSY : 0;
}

static int rwlock_take(pthread_rwlock_t *lp, int write, int try) {
    struct rwlock *l = (struct rwlock *)lp;
    int me = pthread_self()->tid;
    __atoll_word_lock(&l->lock);
    if (l->writer == me) {
        __atoll_word_unlock(&l->lock);
        return EDEADLK;
    }
    if (write)
        l->writers_waiting++;
    for (;;) {
        int free = write ? !l->writer && !l->readers : !l->writer && !l->writers_waiting;
        if (free)
            break;
        if (try) {
            if (write)
                l->writers_waiting--;
            __atoll_word_unlock(&l->lock);
            return EBUSY;
        }
        int seq = l->seq;
        __atoll_word_unlock(&l->lock);
        __atoll_futex_wait(&l->seq, seq, -1);
        __atoll_word_lock(&l->lock);
    }
    if (write) {
        l->writers_waiting--;
        l->writer = me;
    } else {
        l->readers++;
    }
    __atoll_word_unlock(&l->lock);
    return 0;
}

int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    return rwlock_take(l, 0, 0);
}

int pthread_rwlock_tryrdlock(pthread_rwlock_t *l) {
    return rwlock_take(l, 0, 1);
}

int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    return rwlock_take(l, 1, 0);
}

int pthread_rwlock_trywrlock(pthread_rwlock_t *l) {
    return rwlock_take(l, 1, 1);
}

int pthread_rwlock_unlock(pthread_rwlock_t *lp) {
    struct rwlock *l = (struct rwlock *)lp;
    __atoll_word_lock(&l->lock);
    int rc = 0;
    if (l->writer == pthread_self()->tid)
        l->writer = 0;
    else if (l->readers > 0)
        l->readers--;
    else
        rc = EPERM;
    if (!rc) {
        l->seq++;
        __atoll_futex_wake(&l->seq, INT32_MAX);
    }
    __atoll_word_unlock(&l->lock);
    return rc;
}

/* Barriers. */

int pthread_barrierattr_init(pthread_barrierattr_t *a) {
    a->__attr = 0;
    return 0;
}

int pthread_barrierattr_destroy(pthread_barrierattr_t *a) {
    (void)a;
    return 0;
}

int pthread_barrier_init(pthread_barrier_t *restrict bp, const pthread_barrierattr_t *restrict a,
                         unsigned count) {
    (void)a;
    if (count == 0)
        return EINVAL;
    memset(bp, 0, sizeof *bp);
    ((struct barrier *)bp)->total = count;
    return 0;
}

int pthread_barrier_destroy(pthread_barrier_t *bp) {
    return ((struct barrier *)bp)->count ? EBUSY : 0;
}

int pthread_barrier_wait(pthread_barrier_t *bp) {
    struct barrier *b = (struct barrier *)bp;
    __atoll_word_lock(&b->lock);
    int generation = b->generation;
    if (++b->count == b->total) {
        b->count = 0;
        b->generation++;
        __atoll_futex_wake(&b->generation, INT32_MAX);
        __atoll_word_unlock(&b->lock);
        return PTHREAD_BARRIER_SERIAL_THREAD;
    }
    __atoll_word_unlock(&b->lock);
    while (b->generation == generation)
        __atoll_futex_wait(&b->generation, generation, -1);
    return 0;
}
