/* SPDX-License-Identifier: MIT */
/* libturnstile — process-shared turnstiles: one ceiling and one queue for
 * many processes (a master and its pre-forked workers, several proxies on
 * one host), that survive any of them being killed at any instruction.
 *
 * The turnstile lives in a file (memfd_create, shm_open, a tmpfs file) that
 * every process maps.  ts_shared_attach returns an ordinary ts_turnstile *:
 * ts_turnstile_wait (deadline, cancel token, TS_DEADLINE_NOW),
 * ts_pass_return, resize, close, closed, snapshot, jobs' ts_wait_turn and
 * the event-loop waits ts_turnstile_wait_async / ts_wait_turn_async work
 * on it with the same order (band, since, seq, arrival — since_ns is
 * CLOCK_MONOTONIC, one clock per host), the same no-barging rule and the
 * same errors as on a private one, plus:
 *   - the waits: EAGAIN at once when max_waiters waits are queued;
 *   - every call in a child of fork, whose first call registers it as a
 *     process of its own: EUSERS when no process slot is free, ENOMEM, or
 *     the errno of open(2) (the void calls then do nothing);
 *   - ts_turnstile_resize: EINVAL above TS_SHARED_CONCURRENCY_MAX;
 *   - ts_turnstile_wait_async: the errno of socket(2) or bind(2) for the
 *     notifier's doorbell (below), bound at its first wait on a shared
 *     turnstile;
 *   - ts_turnstile_free detaches this process: its waits must have
 *     returned; passes it still holds go back to the others.
 * It cannot be a set's shard.
 *
 * EVENT LOOPS: a grant made in another process makes the notifier's fd
 * readable through its doorbell, an abstract-namespace Unix datagram
 * socket in the notifier's epoll set (so the processes must share a
 * network namespace, as processes on one host normally do); nothing else
 * of the notifier changes, but one thing: a cancel token fired for such
 * a wait ends it at the notifier's next dispatch (the fd turns readable at
 * once), so a grant that lands before that dispatch wins, as a grant that
 * lands before a deadline does.  A loop whose waits are all event-loop
 * waits still recovers the dead within recover_ns: its notifier's timer
 * looks for them.
 *
 * DEATH: a process that dies (SIGKILL, a crash; a zombie counts as dead)
 * while it holds passes, is queued, was granted but not yet woken, or is
 * inside the turnstile's lock loses nothing and doubles nothing: its
 * passes go to the waiters in order, its waits leave the queue, the lock
 * is recovered.  That happens at once through ts_shared_recover (a master
 * calls it on SIGCHLD), by itself within recover_ns while anyone waits,
 * and on every attach.  Liveness is the kernel's word: each attached
 * process holds an open-file-description lock on one byte of the file,
 * which the kernel drops when the process dies.  Never a pid.
 *
 * FORK: a child may use a handle its parent attached.  From its first call
 * it is a process of its own: its passes are its own, the parent's stay
 * the parent's (returning a copy of one of them is ignored).  A child
 * made by raw clone(2) without fork's handlers is not supported, and a
 * child must not close the descriptor fork's handler opened for it (a
 * daemon that closes every descriptor after fork must attach afresh
 * instead): its process would look dead to the others.
 *
 * STOPPED PROCESSES: a process stopped (SIGSTOP, a debugger) while it is
 * inside the turnstile's lock — a few hundred nanoseconds of every slow
 * path — stalls the slow paths of the others until it runs again or dies;
 * fast paths go on.
 *
 * TRUST: whoever can open the file can join; its mode is the access
 * control.  A segment scribbled on by a buggy process may misorder or lose
 * passes but never makes another process read or write outside the
 * mapping, crash or abort: every index read from it is checked.
 *
 * COST: an uncontended wait+return makes no system call and takes no lock
 * (one compare-and-swap each, on this process's own line of the segment).
 * Every waiter parks on its own futex word inside the segment.
 */
#ifndef TURNSTILE_SHARED_H
#define TURNSTILE_SHARED_H

#include <turnstile/common.h>
#include <turnstile/turnstile.h>

TS_BEGIN_DECLS

typedef struct ts_shared_limits {
	uint32_t max_waiters;   /* waits queued at once, all processes together (0: 4096) */
	uint32_t max_processes; /* processes attached at once (0: 1024) */
	int64_t recover_ns;     /* a dead process's passes are back within this while
				   anyone waits (0: 100 ms) */
} ts_shared_limits;

/* Largest ceiling of a shared turnstile (format and resize: EINVAL above). */
#define TS_SHARED_CONCURRENCY_MAX ((int64_t)0x7fffffff)
/* Largest limits ts_shared_format accepts. */
#define TS_SHARED_MAX_WAITERS (1u << 20)
#define TS_SHARED_MAX_PROCESSES 32767u
#define TS_SHARED_RECOVER_MIN_NS ((int64_t)1000000)     /* 1 ms */
#define TS_SHARED_RECOVER_MAX_NS ((int64_t)3600000000000) /* 1 hour */

/* ts_shared_format - lay a new turnstile issuing at most @concurrency passes
 * out in the file behind @fd, sized to fit @limits (NULL: the defaults).
 * @fd must be a regular file open for reading and writing.  Returns 0, or:
 * EINVAL (@fd -1, closed, a pipe or a directory; @concurrency outside
 * [0, TS_SHARED_CONCURRENCY_MAX]; a limit above its maximum, or recover_ns
 * outside [TS_SHARED_RECOVER_MIN_NS, TS_SHARED_RECOVER_MAX_NS]); EBUSY (the
 * file holds a turnstile a live process is attached to); the errno of
 * ftruncate(2) or mmap(2).  A refused format lays nothing out. */
TS_API int ts_shared_format(int fd, int64_t concurrency, const ts_shared_limits *limits);

/* ts_shared_attach - map the turnstile in @fd's file and register this
 * process.  Returns a handle for every ts_turnstile_* and ts_pass_* call,
 * freed (detached) by ts_turnstile_free; NULL with errno EINVAL (not a
 * turnstile, or a damaged one), EPROTO (another layout version), EUSERS
 * (max_processes attached), ENOMEM, or the errno of mmap(2)/open(2)
 * (EACCES: @fd not open for writing).  Recovers dead processes first.
 * @fd may be closed afterwards.  Needs /proc (it opens
 * /proc/self/fd/@fd for an open file description of its own). */
TS_API ts_turnstile *ts_shared_attach(int fd);

/* ts_shared_recover - recover now: passes of dead processes back to the
 * waiters (or free), their waits gone, a lock one died holding recovered.
 * Returns 0, EINVAL (@t NULL or not shared), or a child of fork's
 * registration error (see above).  *@passes_back (may be
 * NULL) is how many passes dead processes held (granted ones included).
 * Thread-safe; a master may call it from its loop on SIGCHLD (not from
 * the signal handler itself). */
TS_API int ts_shared_recover(ts_turnstile *t, int64_t *passes_back);

/* ts_shared_is - whether @t is a process-shared turnstile.  NULL: false. */
TS_API bool ts_shared_is(const ts_turnstile *t);

TS_END_DECLS

#endif
