/* SPDX-License-Identifier: MIT */
/* Process-shared turnstiles: one ceiling and one queue in a file that many
 * processes map, exact when any of them dies at any instruction.
 *
 * TRUTH AND CACHES.  Every pass not free is recorded in exactly one place
 * in the segment, by ONE word:
 *   - a process slot's word: `held` (passes its threads hold) and `cache`
 *     (free passes parked with this process for its lock-free fast path);
 *   - a waiter slot in state GRANTED (a pass handed to a queued waiter that
 *     has not yet moved it into its process's `held`).
 * Everything else is derived and may be rebuilt at any time under the lock
 * (rebuild()): the free count `avail` = ceiling - every held, cached and
 * granted pass; the queue order (a binary heap of waiter slots); the queue
 * length.  So every step of every path writes at most one truth word, and
 * each such write moves passes between one record and the free count:
 * whatever instruction a process dies at, recomputing `avail` from the
 * records gives the exact count — nothing lost, nothing doubled.  Passes a
 * dead process held or cached become free; its waiter slots are freed.
 *
 * THE LOCK.  `lock` holds the owner's process slot + 1, CONTENDED and a
 * generation that every unlock and takeover moves on.  Everything but the
 * fast paths runs under it.  A locker that has waited a whole slice on an
 * unchanged word asks the kernel whether the owner still lives (its
 * byte's open-file-description lock); if not it takes the lock over with a
 * CAS of the whole word, generation included (so never from a live
 * process that got the lock, or even the dead one's slot, since), and
 * rebuilds.  A lock word of our own, not a robust pthread mutex: a
 * scribbled segment must never make glibc abort us.
 *
 * FAST PATHS (no lock, no system call).  A process takes a pass from its
 * own cache and gives one back to it with one CAS on its slot's word:
 * cache-1,held+1 and back, which moves nothing between records.  No
 * barging: before the queue becomes non-empty (and on close and shrink)
 * the lock holder collects every cache into `avail` and sets DRAINED on
 * every slot, one CAS each, so nqueued > 0 implies every live slot is
 * drained; a drained slot's fast paths fail, so from then on
 * every return goes through the lock and is handed to the head waiter.  A
 * process clears its own DRAINED under the lock once the queue is empty,
 * the turnstile open and `avail` not negative.
 *
 * WAITERS.  A queued caller owns a waiter slot (state QUEUED/SLEEPING, the
 * futex word it parks on with shared futex operations).  A granter pops
 * the head under the lock and publishes GRANTED or CLOSED with one
 * exchange; the waker is issued after unlocking.  The waiter then takes
 * the lock once more to move its pass into `held` (two truth words: done
 * under the lock, and only ever on its own process's records, so a death
 * in between is a death of the owner of both, which frees both) and to
 * free its slot.  A waiter that gave up (deadline, token) unlinks itself
 * under the lock unless a grant got there first; a granter that finds a
 * head whose deadline has passed gives it EXPIRED instead of a pass (a
 * deadline means never after it), which holds no pass.  Waiters park in slices
 * of recover_ns / 2; at a slice's end, at every slow wait and in an event
 * loop's timer, one of them per half recover_ns sweeps for dead processes,
 * so a dead holder's passes and a granter that died before its wake are
 * noticed in time.  How a granted slot is told (a shared futex wake, or an
 * event loop's doorbell) is tell_slot(), the one seam.
 *
 * Model: tests/model/shared.pml (a process that may die between any two
 * steps, a recoverer); fault injection: every STEP(n) below may _exit the
 * process in the fault-injection build (tests/shared_death_steps.c). */
#include <turnstile/shared.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "busy.h"
#include "doorbell.h"
#include "futex.h"
#include "hook.h"
#include "probe.h"
#include "spinlock.h"
#include "turnstile_impl.h"
#include "waiter.h"

#define SHARED_MAGIC 0x31444552414853ddull
#define SHARED_VERSION 2u /* 2: a waiter slot holds its deadline */

/* process slot word: held | cache << 32 | DRAINED */
#define PW_HELD ((uint64_t)1)
#define PW_CACHE ((uint64_t)1 << 32)
#define PW_DRAINED ((uint64_t)1 << 63)
#define PW_MASK ((uint64_t)0x7fffffff)
#define pw_held(w) ((int64_t)((w) & PW_MASK))
#define pw_cache(w) ((int64_t)(((w) >> 32) & PW_MASK))

enum { PROC_FREE = 0, PROC_LIVE = 1 };
/* A waiter slot's state: the WAITER_* values of waiter.h, or FREE. */
#define SLOT_FREE 255u
#define NO_SLOT UINT32_MAX

struct seg_header {
	uint64_t magic; /* written last by format */
	uint32_t version;
	uint32_t max_waiters;   /* queued at once */
	uint32_t nslots;        /* waiter slots: 2 * max_waiters */
	uint32_t max_processes;
	int64_t recover_ns;
	uint64_t size, procs_off, slots_off, heap_off;
	_Alignas(64) _Atomic uint64_t lock; /* the lock's word (seg_lock) */
	_Atomic uint32_t closed;     /* truth */
	_Atomic int64_t ceiling;     /* truth */
	_Atomic int64_t avail;       /* derived: free passes not cached */
	_Atomic uint32_t nqueued;    /* derived: heap size */
	uint32_t slot_hint;          /* under lock: where to look for a free slot */
	uint64_t arrivals;           /* under lock */
	_Atomic int64_t next_sweep_ns;
};

struct seg_proc {
	_Alignas(64) _Atomic uint64_t word; /* truth: held, cache; DRAINED */
	_Atomic uint32_t state;
};

struct seg_slot {
	_Alignas(64) _Atomic uint32_t state; /* truth; the owner's futex word */
	_Atomic uint32_t proc;               /* owner's process slot */
	uint32_t heap_pos;                   /* derived, under lock */
	int32_t band;                        /* the claim, under lock */
	int64_t since;
	uint64_t seq, arrival;
	int64_t deadline;                    /* under lock: 0, or never granted
						once passed (CLOCK_MONOTONIC,
						one clock for every process) */
	_Atomic uint64_t doorbell;           /* 0: a parked thread; else the
						event-loop notifier to ring */
};

/* This process's view: layout copied at attach and never re-read from the
 * segment, so a scribbled header cannot move our bounds. */
struct shared_handle {
	struct seg_header *seg;
	struct seg_proc *procs;
	struct seg_slot *slots;
	_Atomic uint32_t *heap;
	size_t size;
	uint32_t max_waiters, nslots, max_processes;
	int64_t recover_ns;
	int lock_fd;                     /* our own open file description */
	int reopen_err;                  /* why a child of fork has none */
	uint32_t id;                     /* lock identity: our slot + 1 */
	uint32_t slot;                   /* NO_SLOT until registered */
	struct seg_proc *_Atomic me;     /* NULL until registered (again after fork) */
	pthread_mutex_t registering;
	struct spin_policy spin;
	struct shared_handle *next;      /* every handle of this process (fork) */
	ts_turnstile *t;
	/* What passes name as their turnstile: one per registration, so a
	 * copy of the parent's pass returned in a child of fork is told
	 * from the child's own (and ignored).  Older ones stay allocated
	 * (passes may still point at them) until the handle is freed. */
	ts_turnstile *_Atomic alias;
	struct alias *aliases;
	_Atomic uint32_t busy;           /* calls between a grant's batches (busy.h) */
};

struct alias {
	ts_turnstile t; /* first: a pass's private_turnstile points here */
	struct alias *older;
};

/* --- fault injection: die at a numbered step --------------------------- */

#ifdef TS_FAULT_INJECTION
/* TS_SHARED_DIE_AT=n[:k]: _exit(86) at the k-th (default 1st) time this
 * process reaches step n.  Read at the first step and again in every child
 * of fork. */
static _Atomic int die_parsed, die_at = -1;
static _Atomic long die_count, die_nth = 1;

static void shared_step(int n)
{
	if (!atomic_load_explicit(&die_parsed, memory_order_acquire)) {
		const char *e = getenv("TS_SHARED_DIE_AT"), *k = e ? strchr(e, ':') : NULL;
		atomic_store(&die_at, e ? atoi(e) : -1);
		atomic_store(&die_nth, k ? atol(k + 1) : 1);
		atomic_store(&die_count, 0);
		atomic_store_explicit(&die_parsed, 1, memory_order_release);
	}
	if (n == atomic_load(&die_at) && atomic_fetch_add(&die_count, 1) + 1 == atomic_load(&die_nth))
		_exit(86);
	ts_fault_point();
}
#define STEP(n) shared_step(n)
#define STEP_FORKED() atomic_store(&die_parsed, 0)
#else
#define STEP(n) ((void)0)
#define STEP_FORKED() ((void)0)
#endif

/* --- liveness ------------------------------------------------------------ */

static int ofd_lock(int fd, uint32_t byte, int cmd, struct flock *fl)
{
	*fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = byte,
			      .l_len = 1 };
	return fcntl(fd, cmd, fl);
}

/* Whether the process in slot @p lives: a thread of ours, or someone holds
 * its byte.  An index out of range (a scribbled word) is nobody: dead. */
static bool proc_alive(struct shared_handle *h, uint32_t p)
{
	struct flock fl;
	if (p >= h->max_processes)
		return false;
	if (atomic_load_explicit(&h->me, memory_order_relaxed) && p == h->slot)
		return true;
	if (ofd_lock(h->lock_fd, p, F_OFD_GETLK, &fl) < 0)
		return true; /* cannot tell: never take over a maybe-live owner */
	return fl.l_type != F_UNLCK;
}

/* --- the lock ------------------------------------------------------------ */

/* lock = generation << 32 | CONTENDED | owner's slot + 1 (0: free).  Every
 * unlock and every takeover moves the generation on, so a locker that saw
 * a dead owner and was delayed cannot take over from a live process that
 * got the lock since — even one that got the dead process's slot, and so
 * its id (the CAS compares the generation too).  Sleepers park on the
 * generation's half of the word (a futex word of its own): the unlock
 * that finds CONTENDED moves it on and wakes one, and touches nothing of
 * the segment after its exchange but that system call (an unmapped
 * address is harmless to it: free after the last return). */
#define LOCK_CONTENDED ((uint64_t)1 << 31)
#define LOCK_OWNER(v) ((uint32_t)((v) & 0x7fffffff))
#define LOCK_NEXT(v) ((((v) >> 32) + 1) << 32)

static _Atomic uint32_t *lock_gen_word(struct seg_header *sg)
{
	return (_Atomic uint32_t *)(void *)((char *)&sg->lock +
					   (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 4 : 0));
}

static int64_t lock_slice(const struct shared_handle *h)
{
	int64_t s = h->recover_ns / 4;
	return s < 1000000 ? 1000000 : s;
}

static void rebuild(struct shared_handle *h, int64_t *passes_back, struct wakeups *wk);

/* Take the lock; if its owner died, take it over and rebuild (the dead
 * owner may have stopped between any two of its writes, each of which left
 * the records exact: only derived state needs redoing; *@passes_back, if
 * given, counts what the rebuild gives back).  An owner is declared dead
 * only after one whole slice in which the lock word did not change at all
 * (a signal's EINTR does not restart the slice) and the kernel says its
 * process is gone. */
static void seg_lock_counting(struct shared_handle *h, struct wakeups *wk, int64_t *passes_back)
{
	_Atomic uint64_t *lock = &h->seg->lock;

	TS_CHECK_INVARIANT(h->id != 0, "a shared lock taken without a process slot");
	uint64_t v = atomic_load_explicit(lock, memory_order_relaxed), seen = 0;
	int64_t slice_end = 0;

	for (int spins = 0;; spins++) {
		if (!LOCK_OWNER(v)) {
			uint64_t mine = (v & ~(uint64_t)0xffffffff) | h->id |
					(spins > 128 ? LOCK_CONTENDED : 0);
			if (atomic_compare_exchange_weak_explicit(lock, &v, mine, memory_order_acquire,
								  memory_order_relaxed))
				break;
			continue;
		}
		if (spins < 128) {
			cpu_relax();
			v = atomic_load_explicit(lock, memory_order_relaxed);
			continue;
		}
		if (!(v & LOCK_CONTENDED) &&
		    !atomic_compare_exchange_weak_explicit(lock, &v, v | LOCK_CONTENDED,
							   memory_order_relaxed,
							   memory_order_relaxed))
			continue;
		v |= LOCK_CONTENDED;
		int64_t now = ts_now_ns();
		if (v != seen) {
			seen = v;
			slice_end = now + lock_slice(h);
		}
		if (now < slice_end) {
			futex_wait_on(lock_gen_word(h->seg), (uint32_t)(v >> 32), slice_end, true);
			v = atomic_load_explicit(lock, memory_order_relaxed);
			continue;
		}
		if (proc_alive(h, LOCK_OWNER(v) - 1)) {
			slice_end = now + lock_slice(h);
			continue;
		}
		/* The owner is dead: the word changes now only by a rival
		 * taking over too; the CAS (generation included) picks one. */
		if (atomic_compare_exchange_strong_explicit(lock, &v, LOCK_NEXT(v) | LOCK_CONTENDED | h->id,
							    memory_order_acquire,
							    memory_order_relaxed)) {
			TS_LOCKS_HELD_ADD(1);
			TS_PROBE2(shared__takeover, h->t, LOCK_OWNER(seen) - 1);
			rebuild(h, passes_back, wk);
			return;
		}
	}
	TS_LOCKS_HELD_ADD(1);
}

static void seg_lock(struct shared_handle *h, struct wakeups *wk)
{
	seg_lock_counting(h, wk, NULL);
}

/* The last touch of the handle is reading the segment's address: after the
 * exchange the handle may be freed (free after the last return). */
static void seg_unlock(struct shared_handle *h)
{
	struct seg_header *sg = h->seg;
	TS_LOCKS_HELD_ADD(-1);
	STEP(1); /* about to unlock */
	uint64_t v = atomic_load_explicit(&sg->lock, memory_order_relaxed);
	if (atomic_exchange_explicit(&sg->lock, LOCK_NEXT(v), memory_order_release) &
	    LOCK_CONTENDED)
		futex_wake_on(lock_gen_word(sg), 1, true); /* a syscall: safe once unmapped */
}

/* --- the queue: a heap of waiter slots, derived, under the lock --------- */

static bool slot_before(const struct seg_slot *a, const struct seg_slot *b)
{
	if (a->band != b->band)
		return a->band < b->band;
	if (a->since != b->since)
		return a->since < b->since;
	if (a->seq != b->seq)
		return a->seq < b->seq;
	return a->arrival < b->arrival;
}

/* Heap entries are read back from shared memory: each is checked before it
 * is used as an index (a scribbled one reads as slot 0, never outside). */
static uint32_t heap_at(struct shared_handle *h, uint32_t i)
{
	uint32_t s = atomic_load_explicit(&h->heap[i], memory_order_relaxed);
	return s < h->nslots ? s : 0;
}

static void heap_put(struct shared_handle *h, uint32_t i, uint32_t s)
{
	atomic_store_explicit(&h->heap[i], s, memory_order_relaxed);
	h->slots[s].heap_pos = i;
}

static void heap_up(struct shared_handle *h, uint32_t i)
{
	uint32_t s = heap_at(h, i);
	while (i > 0) {
		uint32_t parent = (i - 1) / 2, ps = heap_at(h, parent);
		if (!slot_before(&h->slots[s], &h->slots[ps]))
			break;
		heap_put(h, i, ps);
		i = parent;
	}
	heap_put(h, i, s);
}

static void heap_down(struct shared_handle *h, uint32_t i, uint32_t n)
{
	uint32_t s = heap_at(h, i);
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && slot_before(&h->slots[heap_at(h, c + 1)], &h->slots[heap_at(h, c)]))
			c++;
		uint32_t cs = heap_at(h, c);
		if (!slot_before(&h->slots[cs], &h->slots[s]))
			break;
		heap_put(h, i, cs);
		i = c;
	}
	heap_put(h, i, s);
}

static uint32_t queued(struct shared_handle *h)
{
	uint32_t n = atomic_load_explicit(&h->seg->nqueued, memory_order_relaxed);
	return n <= h->nslots ? n : h->nslots;
}

/* Remove heap entry @i (the head when 0); returns its slot. */
static uint32_t heap_remove(struct shared_handle *h, uint32_t i)
{
	uint32_t n = queued(h) - 1, s = heap_at(h, i);
	atomic_store_explicit(&h->seg->nqueued, n, memory_order_relaxed);
	if (i != n) {
		heap_put(h, i, heap_at(h, n));
		heap_down(h, i, n);
		heap_up(h, i);
	}
	return s;
}

/* Remove slot @s from the heap, wherever it is (its heap_pos, checked). */
static void heap_remove_slot(struct shared_handle *h, uint32_t s)
{
	uint32_t n = queued(h), i = h->slots[s].heap_pos;
	if (i >= n || heap_at(h, i) != s)
		for (i = 0; i < n && heap_at(h, i) != s; i++)
			;
	if (i < n)
		heap_remove(h, i);
}

/* --- records: moving passes between them and `avail` -------------------- */

static int64_t avail(struct shared_handle *h)
{
	return atomic_load_explicit(&h->seg->avail, memory_order_relaxed);
}

static void avail_add(struct shared_handle *h, int64_t d)
{
	atomic_store_explicit(&h->seg->avail, avail(h) + d, memory_order_relaxed);
}

/* Collect process @p's cache into `avail` (one CAS: the pass moves from a
 * record to the free count), optionally draining the slot. */
static void collect_cache(struct shared_handle *h, uint32_t p, bool drain)
{
	struct seg_proc *pr = &h->procs[p];
	uint64_t w = atomic_load_explicit(&pr->word, memory_order_relaxed);
	uint64_t nw;
	do
		nw = (w & (PW_MASK | PW_DRAINED)) | (drain ? PW_DRAINED : 0);
	while (!atomic_compare_exchange_weak_explicit(&pr->word, &w, nw, memory_order_acq_rel,
						      memory_order_relaxed));
	avail_add(h, pw_cache(w));
}

static void collect_all(struct shared_handle *h, bool drain)
{
	for (uint32_t p = 0; p < h->max_processes; p++)
		if (atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) == PROC_LIVE) {
			collect_cache(h, p, drain);
			STEP(2); /* between two processes' caches */
			if (drain)
				ts_hook_at(TS_HOOK_DRAINING, h->t);
		}
}

/* Our DRAINED goes once fast paths may run again. */
static void maybe_undrain(struct shared_handle *h, struct seg_proc *me)
{
	if (!queued(h) && avail(h) >= 0 && !atomic_load_explicit(&h->seg->closed, memory_order_relaxed))
		atomic_fetch_and_explicit(&me->word, ~PW_DRAINED, memory_order_relaxed);
}

/* --- how a slot is told: THE SEAM of the shared turnstile ---------------- */

/* Every process rings doorbells from one unbound datagram socket. */
static _Atomic int ring_fd = -1;

static void ring_doorbell(void *ctx, bool unused)
{
	(void)unused;
	int fd = atomic_load_explicit(&ring_fd, memory_order_acquire);
	if (fd < 0) {
		int mine = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (mine < 0)
			return; /* the loop's sweep finds the grant within recover_ns */
		if (atomic_compare_exchange_strong(&ring_fd, &fd, mine))
			fd = mine;
		else
			close(mine);
	}
	struct sockaddr_un a;
	socklen_t len = ts_lib_doorbell_address((uint64_t)(uintptr_t)ctx, &a);
	char one = 1;
	/* EAGAIN (a full queue is readable already), ECONNREFUSED (the loop
	 * is gone): nothing more to do either way. */
	(void)sendto(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len);
}

/* Tell slot @s, just given a final state (the old one @was): a parked
 * thread by a shared futex wake if it sleeps, an event-loop wait by its
 * notifier's doorbell.  Issued after unlocking (wakeups). */
static void tell_slot(struct shared_handle *h, uint32_t s, uint32_t was, struct wakeups *wk)
{
	uint64_t bell = atomic_load_explicit(&h->slots[s].doorbell, memory_order_relaxed);
	if (bell)
		wakeups_add_call(wk, ring_doorbell, (void *)(uintptr_t)bell, false);
	else if (was == WAITER_SLEEPING)
		wakeups_add_shared(wk, &h->slots[s].state);
}

/* Hand free passes to the head waiters, in order.  Each grant is ONE
 * exchange on the slot: the pass moves from `avail` into the GRANTED
 * record.  A head past its deadline is ended with EXPIRED (one exchange,
 * no pass moved) and the pass goes on to the next.  A wake is owed only to a sleeper; a full batch stops early (the
 * caller unlocks, wakes and comes back: more_owed()). */
static void grant_heads(struct shared_handle *h, struct wakeups *wk)
{
	if (atomic_load_explicit(&h->seg->closed, memory_order_relaxed))
		return;
	while (avail(h) > 0 && queued(h) && !wakeups_full(wk)) {
		uint32_t s = heap_remove(h, 0);
		STEP(3); /* head unlinked, not yet granted */
		if (waiter_expired(h->slots[s].deadline)) {
			tell_slot(h, s,
				  atomic_exchange_explicit(&h->slots[s].state, WAITER_EXPIRED,
							   memory_order_acq_rel),
				  wk);
			continue;
		}
		avail_add(h, -1);
		tell_slot(h, s,
			  atomic_exchange_explicit(&h->slots[s].state, WAITER_GRANTED,
						   memory_order_acq_rel),
			  wk);
		STEP(4); /* granted, not yet woken */
	}
}

static bool more_owed(struct shared_handle *h)
{
	return avail(h) > 0 && queued(h) &&
	       !atomic_load_explicit(&h->seg->closed, memory_order_relaxed);
}

/* Unlock, wake, and go on granting batch by batch while more are owed,
 * with the handle marked busy across the gaps: a waiter granted in an
 * early batch may return and free the handle meanwhile (free after the
 * last return), and the free waits for busy. */
static void unlock_and_wake(struct shared_handle *h, struct wakeups *wk)
{
	bool gaps = false;
	for (;;) {
		bool more = more_owed(h) || wakeups_full(wk);
		if (more && !gaps) {
			busy_enter(&h->busy);
			gaps = true;
		}
		seg_unlock(h); /* without gaps, the last touch of h */
		wakeups_flush(wk);
		if (!more)
			break;
		seg_lock(h, wk);
		grant_heads(h, wk);
	}
	if (gaps)
		busy_leave(&h->busy);
}

/* --- rebuild: recompute everything derived from the records ------------ */

static bool slot_queued(uint32_t st)
{
	return st == WAITER_QUEUED || st == WAITER_SLEEPING;
}

/* Lock held.  Frees the records of dead processes (their passes become
 * free), then recomputes `avail`, the heap and the drained flags, and
 * grants what is owed.  Every granted or closed slot gets a wake: the
 * granter that owed it may have died before waking it. */
static void rebuild(struct shared_handle *h, int64_t *passes_back, struct wakeups *wk)
{
	struct seg_header *sg = h->seg;
	int64_t back = 0, recorded = 0;
	bool closed = atomic_load_explicit(&sg->closed, memory_order_relaxed);

	for (uint32_t p = 0; p < h->max_processes; p++) {
		struct seg_proc *pr = &h->procs[p];
		if (atomic_load_explicit(&pr->state, memory_order_relaxed) != PROC_LIVE ||
		    proc_alive(h, p))
			continue;
		uint64_t w = atomic_load_explicit(&pr->word, memory_order_relaxed);
		back += pw_held(w);
		atomic_store_explicit(&pr->word, 0, memory_order_relaxed);
		STEP(5); /* a dead process's records dropped, slot not yet free */
		atomic_store_explicit(&pr->state, PROC_FREE, memory_order_release);
		TS_PROBE3(shared__dead, h->t, p, pw_held(w));
	}
	uint32_t n = 0;
	for (uint32_t s = 0; s < h->nslots; s++) {
		struct seg_slot *sl = &h->slots[s];
		uint32_t st = atomic_load_explicit(&sl->state, memory_order_relaxed);
		if (st == SLOT_FREE)
			continue;
		uint32_t p = atomic_load_explicit(&sl->proc, memory_order_relaxed);
		if (p >= h->max_processes ||
		    atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) != PROC_LIVE ||
		    st > WAITER_EXPIRED) {
			back += st == WAITER_GRANTED;
			atomic_store_explicit(&sl->state, SLOT_FREE, memory_order_release);
			continue;
		}
		if (st == WAITER_GRANTED)
			recorded++;
		else if (slot_queued(st))
			heap_put(h, n++, s);
	}
	for (uint32_t p = 0; p < h->max_processes; p++)
		if (atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) == PROC_LIVE) {
			uint64_t w = atomic_load_explicit(&h->procs[p].word, memory_order_relaxed);
			recorded += pw_held(w) + pw_cache(w);
		}
	for (uint32_t i = n / 2; i-- > 0;)
		heap_down(h, i, n);
	atomic_store_explicit(&sg->avail,
			      atomic_load_explicit(&sg->ceiling, memory_order_relaxed) - recorded,
			      memory_order_relaxed);
	if (n || closed || avail(h) < 0)
		collect_all(h, true); /* before nqueued, as enqueue drains */
	atomic_store_explicit(&sg->nqueued, n, memory_order_relaxed);
	if (closed)
		while (queued(h))
			atomic_exchange_explicit(&h->slots[heap_remove(h, 0)].state, WAITER_CLOSED,
						 memory_order_acq_rel);
	grant_heads(h, wk);
	/* Wakes a dead granter may have owed, as many as the batch holds (the
	 * rest notice at their slice's end); spurious ones are harmless. */
	for (uint32_t s = 0; s < h->nslots; s++) {
		uint32_t st = atomic_load_explicit(&h->slots[s].state, memory_order_relaxed);
		if ((st == WAITER_GRANTED || st == WAITER_CLOSED || st == WAITER_EXPIRED) &&
		    !wakeups_full(wk))
			tell_slot(h, s, WAITER_SLEEPING, wk);
	}
	if (passes_back)
		*passes_back += back;
	if (back)
		TS_PROBE2(shared__recovered, h->t, back);
}

/* Whether any attached process other than ours has died.  No lock. */
static bool anyone_dead(struct shared_handle *h)
{
	for (uint32_t p = 0; p < h->max_processes; p++)
		if (atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) == PROC_LIVE &&
		    !proc_alive(h, p))
			return true;
	return false;
}

static void recover_now(struct shared_handle *h, int64_t *passes_back)
{
	struct wakeups wk;
	wakeups_init(&wk);
	seg_lock_counting(h, &wk, passes_back); /* a takeover's rebuild counts too */
	rebuild(h, passes_back, &wk);
	unlock_and_wake(h, &wk);
}

/* Once per half recover_ns, one of the processes that wait looks for the
 * dead: at a parked waiter's slice end, at every slow wait (a wait that is
 * too short or too quick to end a slice), and in an event loop's look. */
static void sweep(struct shared_handle *h)
{
	_Atomic int64_t *next = &h->seg->next_sweep_ns;
	int64_t now = ts_now_ns(), due = atomic_load_explicit(next, memory_order_relaxed);
	if (now < due && due - now <= h->recover_ns)
		return;
	if (!atomic_compare_exchange_strong_explicit(next, &due, now + h->recover_ns / 2,
						     memory_order_relaxed, memory_order_relaxed))
		return;
	if (anyone_dead(h))
		recover_now(h, NULL);
}

/* --- registration (attach, and a child's first call after fork) -------- */

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_handle *handles;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int reopen(int fd)
{
	char path[40];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDWR | O_CLOEXEC);
}

/* The child's handles stop being the parent's: a description of its own
 * (the inherited one would keep the parent's lock alive), registered at
 * its first call.  One thread runs here; open and close are
 * async-signal-safe. */
static void atfork_child(void)
{
	STEP_FORKED();
	for (struct shared_handle *h = handles; h; h = h->next) {
		int fd = reopen(h->lock_fd);
		h->reopen_err = fd < 0 ? errno : 0;
		close(h->lock_fd);
		h->lock_fd = fd;
		atomic_store_explicit(&h->alias, NULL, memory_order_relaxed);
		atomic_store_explicit(&h->busy, 0, memory_order_relaxed); /* the parent's granters */
		h->slot = NO_SLOT;
		h->id = 0;
		atomic_store_explicit(&h->me, NULL, memory_order_relaxed);
		pthread_mutex_init(&h->registering, NULL);
	}
	pthread_mutex_unlock(&handles_lock);
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&handles_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&handles_lock);
}

static void atfork_install(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* A turnstile-shaped name for this registration's passes: its word reads
 * WAITERS|CLOSED, so inlined fast paths send its passes to the library. */
static struct alias *alias_new(struct shared_handle *h)
{
	struct alias *a = aligned_alloc(64, sizeof(*a));
	if (!a)
		return NULL;
	memset(&a->t, 0, sizeof(a->t));
	atomic_init(&a->t.word, WORD_WAITERS | WORD_CLOSED);
	a->t.shared = h;
	a->older = h->aliases;
	h->aliases = a;
	return a;
}

/* Claim a process slot: its byte first (the kernel arbitrates between
 * rivals), then, under the lock and after a rebuild that frees whatever
 * a dead previous owner of the slot left, its records.  The lock
 * identity is the slot, so a takeover from a dead owner of the same slot
 * is just a rebuild: nobody waits for himself. */
static int register_proc(struct shared_handle *h)
{
	struct flock fl;
	uint32_t p = NO_SLOT;

	if (h->lock_fd < 0)
		return h->reopen_err;
	struct alias *a = alias_new(h);
	if (!a)
		return ENOMEM;
	for (int round = 0; round < 2 && p == NO_SLOT; round++)
		for (uint32_t i = 0; i < h->max_processes; i++) {
			bool free_slot = atomic_load_explicit(&h->procs[i].state,
							      memory_order_relaxed) == PROC_FREE;
			if (free_slot != (round == 0))
				continue;
			if (ofd_lock(h->lock_fd, i, F_OFD_SETLK, &fl) == 0) {
				p = i;
				break;
			}
		}
	if (p == NO_SLOT)
		return EUSERS;
	STEP(6); /* byte locked, slot not yet claimed */
	h->id = p + 1;
	struct wakeups wk;
	wakeups_init(&wk);
	seg_lock(h, &wk);
	/* We hold its byte: a previous owner is dead, even if rebuild cannot
	 * tell (its records go first, then rebuild frees its waits). */
	if (atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) == PROC_LIVE) {
		atomic_store_explicit(&h->procs[p].word, 0, memory_order_relaxed);
		atomic_store_explicit(&h->procs[p].state, PROC_FREE, memory_order_release);
	}
	rebuild(h, NULL, &wk);
	bool drained = queued(h) || avail(h) < 0 ||
		       atomic_load_explicit(&h->seg->closed, memory_order_relaxed);
	atomic_store_explicit(&h->procs[p].word, drained ? PW_DRAINED : 0, memory_order_relaxed);
	atomic_store_explicit(&h->procs[p].state, PROC_LIVE, memory_order_release);
	STEP(7); /* registered, lock still held */
	h->slot = p;
	atomic_store_explicit(&h->alias, &a->t, memory_order_relaxed);
	atomic_store_explicit(&h->me, &h->procs[p], memory_order_release);
	unlock_and_wake(h, &wk);
	return 0;
}


/* Our process slot, registering first if this process has none yet. */
static struct seg_proc *me_of(struct shared_handle *h, int *err)
{
	struct seg_proc *me = atomic_load_explicit(&h->me, memory_order_acquire);
	if (me)
		return me;
	pthread_mutex_lock(&h->registering);
	if (!(me = atomic_load_explicit(&h->me, memory_order_acquire)) &&
	    !(*err = register_proc(h)))
		me = atomic_load_explicit(&h->me, memory_order_acquire);
	pthread_mutex_unlock(&h->registering);
	return me;
}

/* --- wait and return ------------------------------------------------------ */

/* Under the lock with nobody queued: a free pass, or one parked in some
 * process's cache, moves into our `held`. */
static bool take_locked(struct shared_handle *h, struct seg_proc *me)
{
	if (queued(h))
		return false;
	if (avail(h) <= 0)
		collect_all(h, false);
	if (avail(h) <= 0)
		return false;
	avail_add(h, -1);
	atomic_fetch_add_explicit(&me->word, PW_HELD, memory_order_relaxed);
	STEP(8); /* took a free pass under the lock */
	maybe_undrain(h, me);
	return true;
}

/* Claim a free waiter slot for a queued wait.  Lock held. */
static uint32_t slot_alloc(struct shared_handle *h)
{
	uint32_t start = h->seg->slot_hint % h->nslots;
	for (uint32_t k = 0; k < h->nslots; k++) {
		uint32_t s = (start + k) % h->nslots;
		if (atomic_load_explicit(&h->slots[s].state, memory_order_acquire) == SLOT_FREE) {
			h->seg->slot_hint = s + 1;
			return s;
		}
	}
	return NO_SLOT;
}

/* Under the lock: take a free pass, refuse, or queue a waiter slot told by
 * @doorbell (0: a parked thread).  Returns 0 (the pass is in our `held`),
 * ESHUTDOWN, ETIMEDOUT, EAGAIN, or EINPROGRESS with *@slot queued (and
 * *@first when it queued first, the head: it may spin). */
static int enqueue(struct shared_handle *h, struct seg_proc *me, const ts_claim *claim,
		   int64_t deadline_ns, int64_t start, uint64_t doorbell, uint32_t *slot,
		   bool *first)
{
	struct seg_header *sg = h->seg;
	struct wakeups wk;
	int r = EINPROGRESS;

	wakeups_init(&wk);
	seg_lock(h, &wk);
	uint32_t s = NO_SLOT;
	if (atomic_load_explicit(&sg->closed, memory_order_relaxed))
		r = ESHUTDOWN;
	else if (take_locked(h, me))
		r = 0;
	else if (deadline_ns && start >= deadline_ns)
		r = ETIMEDOUT;
	else if ((s = queued(h) < h->max_waiters ? slot_alloc(h) : NO_SLOT) == NO_SLOT)
		r = EAGAIN;
	if (r != EINPROGRESS) {
		unlock_and_wake(h, &wk);
		return r;
	}
	struct seg_slot *sl = &h->slots[s];
	atomic_store_explicit(&sl->proc, h->slot, memory_order_relaxed);
	atomic_store_explicit(&sl->doorbell, doorbell, memory_order_relaxed);
	sl->band = claim->priority;
	sl->since = claim->since_ns;
	sl->seq = claim->seq;
	sl->arrival = sg->arrivals++;
	sl->deadline = deadline_ns;
	/* No barging: the first waiter drains every process before it is
	 * published (its QUEUED record, nqueued), so whoever sees a waiter
	 * queued sees every fast path closed.  Published first, a process
	 * not yet drained could return a pass to its own cache and take it
	 * back while the waiter counted as queued (the order audit found
	 * it). */
	*first = queued(h) == 0;
	if (*first)
		collect_all(h, true);
	atomic_store_explicit(&sl->state, WAITER_QUEUED, memory_order_release);
	STEP(9); /* queued record written, heap not yet */
	uint32_t n = queued(h);
	heap_put(h, n, s);
	atomic_store_explicit(&sg->nqueued, n + 1, memory_order_relaxed);
	heap_up(h, n);
	grant_heads(h, &wk);
	unlock_and_wake(h, &wk);
	*slot = s;
	return EINPROGRESS;
}

/* Under the lock, end slot @s's wait: a grant moves into our `held`, a
 * close or a withdrawal (@withdraw: a deadline, a token, a cancel; else a
 * still-queued slot stays queued) frees the slot.  Returns the state
 * found: GRANTED, CLOSED, EXPIRED (a granter found its deadline passed),
 * or QUEUED. */
static uint32_t settle(struct shared_handle *h, struct seg_proc *me, uint32_t s, bool withdraw)
{
	struct seg_slot *sl = &h->slots[s];
	struct wakeups wk;

	wakeups_init(&wk);
	seg_lock(h, &wk);
	uint32_t st = atomic_load_explicit(&sl->state, memory_order_acquire);
	/* Not ours (a child of fork settling its copy of the parent's node,
	 * or a scribble): untouched. */
	if (atomic_load_explicit(&sl->proc, memory_order_relaxed) != h->slot) {
		st = WAITER_CLOSED;
		goto out;
	}
	if (slot_queued(st)) {
		st = WAITER_QUEUED;
		if (!withdraw)
			goto out;
		heap_remove_slot(h, s);
	} else if (st == WAITER_GRANTED) {
		atomic_fetch_add_explicit(&me->word, PW_HELD, memory_order_relaxed);
		STEP(11); /* pass in `held` and still in the GRANTED slot: ours both */
		maybe_undrain(h, me);
	} else if (st != WAITER_EXPIRED) {
		st = WAITER_CLOSED;
	}
	atomic_store_explicit(&sl->state, SLOT_FREE, memory_order_release);
out:
	unlock_and_wake(h, &wk);
	return st;
}

/* The queued part of a blocking wait: enqueue, park in slices, settle. */
static int wait_queued(struct shared_handle *h, struct seg_proc *me, const ts_claim *claim,
		       int64_t deadline_ns, ts_cancel *cancel, int64_t start)
{
	uint32_t s;
	bool first;
	int r = enqueue(h, me, claim, deadline_ns, start, 0, &s, &first);
	if (r != EINPROGRESS)
		return r;

	waiter w;
	waiter_init(&w, NULL);
	w.word = &h->slots[s].state;
	w.shared = true;
	w.spin = first && spin_policy_allows(&h->spin);
	if (cancel)
		ts_lib_cancel_watch(cancel, &w);
	int outcome;
	for (;;) {
		int64_t slice = ts_now_ns() + h->recover_ns / 2;
		bool sliced = !deadline_ns || slice < deadline_ns;
		outcome = ts_lib_waiter_park(&w, WAITER_FINAL, sliced ? slice : deadline_ns, cancel);
		w.spin = false;
		if (outcome != WAITER_TIMEDOUT || !sliced)
			break;
		sweep(h);
	}
	spin_policy_record(&h->spin, &w);
	if (cancel)
		ts_lib_cancel_unwatch(cancel, &w);
	STEP(10); /* woken or gave up, not yet settled */
	switch (settle(h, me, s, true)) {
	case WAITER_GRANTED:
		return 0;
	case WAITER_CLOSED:
		return ESHUTDOWN;
	case WAITER_EXPIRED: /* a granter found the deadline passed first */
		return ETIMEDOUT;
	default:
		return outcome == WAITER_CANCELED ? ECANCELED : ETIMEDOUT;
	}
}

/* Take a pass from our cache: one CAS, no lock. */
static bool take_fast(struct seg_proc *me)
{
	uint64_t w = atomic_load_explicit(&me->word, memory_order_relaxed);
	while (!(w & PW_DRAINED) && pw_cache(w) > 0)
		if (atomic_compare_exchange_weak_explicit(&me->word, &w, w - PW_CACHE + PW_HELD,
							  memory_order_acquire, memory_order_relaxed))
			return true;
	return false;
}

static ts_turnstile *pass_name(struct shared_handle *h)
{
	return atomic_load_explicit(&h->alias, memory_order_relaxed);
}

ts_turnstile *ts_lib_shared_pass_name(ts_turnstile *t)
{
	return pass_name(t->shared);
}

/* What every wait does before it may queue: register (a child of fork's
 * first call), take from our cache, then the precedence of a closed
 * turnstile and a fired token.  0 (*@pass issued), an error, or
 * EINPROGRESS: go on and queue, as *@mep. */
static int wait_prelude(struct shared_handle *h, ts_cancel *cancel, ts_pass *pass,
			struct seg_proc **mep)
{
	int err = 0;
	struct seg_proc *me = *mep = me_of(h, &err);

	if (!me)
		return err;
	if (!cancel_fired_now(cancel) && take_fast(me)) {
		pass->private_turnstile = pass_name(h);
		return 0;
	}
	if (atomic_load_explicit(&h->seg->closed, memory_order_relaxed))
		return ESHUTDOWN;
	if (cancel_fired_now(cancel))
		return ECANCELED;
	return EINPROGRESS;
}

/* The slow part of a wait: registration, precedence, the queue. */
__attribute__((noinline, cold)) static int wait_slow(ts_turnstile *t, const ts_claim *claim,
						     int64_t deadline_ns, ts_cancel *cancel,
						     ts_pass *pass)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me;
	int r = wait_prelude(h, cancel, pass, &me);

	if (r != EINPROGRESS)
		return r;
	int64_t start = ts_now_ns();
	sweep(h); /* when due: waits too short or too quick to end a slice */
	r = wait_queued(h, me, claim, deadline_ns, cancel, start);
	if (r == 0) {
		pass->private_turnstile = pass_name(h);
		pass->private_waited_ns = ts_now_ns() - start;
	}
	return r;
}

/* The fast path: a pass from our cache, one CAS, no lock, no call. */
int ts_lib_shared_wait(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
		       ts_cancel *cancel, ts_pass *pass)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me = atomic_load_explicit(&h->me, memory_order_acquire);

	if (me && !cancel_fired_now(cancel) && take_fast(me)) {
		pass->private_turnstile = pass_name(h);
		return 0;
	}
	return wait_slow(t, claim, deadline_ns, cancel, pass);
}

/* --- event-loop waits (async.c): the same queue, told by a doorbell --- */

int ts_lib_shared_enqueue_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				ts_cancel *cancel, uint64_t doorbell, uint32_t *slot,
				ts_pass *pass)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me;
	bool first;
	int r = wait_prelude(h, cancel, pass, &me);

	if (r != EINPROGRESS)
		return r;
	r = enqueue(h, me, claim, deadline_ns, ts_now_ns(), doorbell, slot, &first);
	if (r == 0)
		pass->private_turnstile = pass_name(h);
	return r;
}

bool ts_lib_shared_slot_final(const ts_turnstile *t, uint32_t slot)
{
	struct shared_handle *h = t->shared;
	return slot < h->nslots &&
	       !slot_queued(atomic_load_explicit(&h->slots[slot].state, memory_order_acquire));
}

uint32_t ts_lib_shared_settle(ts_turnstile *t, uint32_t slot, bool withdraw)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me = atomic_load_explicit(&h->me, memory_order_acquire);
	if (!me || slot >= h->nslots)
		return WAITER_CLOSED; /* not ours: a fork's child, or a bad slot */
	return settle(h, me, slot, withdraw);
}

void ts_lib_shared_poll(ts_turnstile *t)
{
	if (atomic_load_explicit(&t->shared->me, memory_order_acquire))
		sweep(t->shared);
}

int64_t ts_lib_shared_recover_ns(const ts_turnstile *t)
{
	return t->shared->recover_ns;
}

/* The slow part of a return: under the lock, handed to the head waiter. */
__attribute__((noinline, cold)) static void return_slow(struct shared_handle *h,
							struct seg_proc *me)
{
	struct wakeups wk;

	wakeups_init(&wk);
	seg_lock(h, &wk);
	uint64_t w = atomic_load_explicit(&me->word, memory_order_relaxed);
	do
		if (pw_held(w) == 0)
			goto out; /* not ours: a copy */
	while (!atomic_compare_exchange_weak_explicit(&me->word, &w, w - PW_HELD,
						      memory_order_acq_rel, memory_order_relaxed));
	STEP(12); /* pass out of `held`, not yet counted free */
	avail_add(h, 1);
	grant_heads(h, &wk);
	maybe_undrain(h, me);
out:
	unlock_and_wake(h, &wk);
}

/* The fast path: into our cache, one CAS, no lock, while nobody queues. */
void ts_lib_shared_return(ts_turnstile *t)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me = atomic_load_explicit(&h->me, memory_order_acquire);

	if (!me || t != pass_name(h))
		return; /* not this registration's pass: the parent's, in a child */
	uint64_t w = atomic_load_explicit(&me->word, memory_order_relaxed);
	while (!(w & PW_DRAINED) && pw_held(w) > 0)
		if (atomic_compare_exchange_weak_explicit(&me->word, &w, w + PW_CACHE - PW_HELD,
							  memory_order_release,
							  memory_order_relaxed))
			return;
	return_slow(h, me);
}

/* --- the rest of the turnstile API ---------------------------------------- */

int ts_lib_shared_resize(ts_turnstile *t, int64_t concurrency)
{
	struct shared_handle *h = t->shared;
	struct wakeups wk;
	int err = 0;

	if (concurrency > TS_SHARED_CONCURRENCY_MAX)
		return EINVAL;
	if (!me_of(h, &err))
		return err;
	wakeups_init(&wk);
	seg_lock(h, &wk);
	int64_t delta = concurrency - atomic_load_explicit(&h->seg->ceiling, memory_order_relaxed);
	TS_PROBE3(resize, t, concurrency - delta, concurrency);
	atomic_store_explicit(&h->seg->ceiling, concurrency, memory_order_relaxed);
	STEP(13); /* ceiling written, free count not yet */
	avail_add(h, delta);
	if (delta < 0)
		collect_all(h, true); /* caches must not admit over the new ceiling */
	grant_heads(h, &wk);
	unlock_and_wake(h, &wk);
	return 0;
}

void ts_lib_shared_close(ts_turnstile *t)
{
	struct shared_handle *h = t->shared;
	struct wakeups wk;
	int err = 0, gaps = 0;

	if (!me_of(h, &err))
		return;
	TS_PROBE1(close, t);
	wakeups_init(&wk);
	seg_lock(h, &wk);
	atomic_store_explicit(&h->seg->closed, 1, memory_order_relaxed);
	STEP(14); /* closed, caches not yet collected */
	collect_all(h, true);
	for (;;) {
		while (queued(h) && !wakeups_full(&wk)) {
			uint32_t s = heap_remove(h, 0);
			tell_slot(h, s,
				  atomic_exchange_explicit(&h->slots[s].state, WAITER_CLOSED,
							   memory_order_acq_rel),
				  &wk);
			STEP(15); /* one waiter closed */
		}
		if (!queued(h))
			break;
		if (!gaps++)
			busy_enter(&h->busy);
		seg_unlock(h);
		wakeups_flush(&wk);
		wakeups_init(&wk);
		seg_lock(h, &wk);
	}
	unlock_and_wake(h, &wk);
	if (gaps)
		busy_leave(&h->busy);
}

bool ts_lib_shared_closed(const ts_turnstile *t)
{
	return atomic_load_explicit(&t->shared->seg->closed, memory_order_acquire);
}

/* Free passes: the free count plus every cache.  Racy by nature (metrics). */
int64_t ts_lib_shared_ceiling(const ts_turnstile *t)
{
	return atomic_load_explicit(&t->shared->seg->ceiling, memory_order_relaxed);
}

void ts_lib_shared_snapshot(const ts_turnstile *t, int64_t *available, int64_t *waiting)
{
	struct shared_handle *h = t->shared;
	if (available) {
		int64_t a = avail(h);
		for (uint32_t p = 0; p < h->max_processes; p++)
			if (atomic_load_explicit(&h->procs[p].state, memory_order_relaxed) == PROC_LIVE)
				a += pw_cache(atomic_load_explicit(&h->procs[p].word,
								   memory_order_relaxed));
		*available = a;
	}
	if (waiting)
		*waiting = queued(h);
}

static int int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* The queue's bands copied under the lock, sorted and counted outside it:
 * the heap is not in band order, and nothing slow runs under the lock. */
int ts_lib_shared_waiting_by_band(const ts_turnstile *t, int *bands, int64_t *waiting, int max)
{
	struct shared_handle *h = t->shared;
	struct wakeups wk;
	int err = 0;

	if (!me_of(h, &err))
		return -err;
	int *copy = malloc(sizeof(int) * (h->nslots ? h->nslots : 1));
	if (!copy)
		return -ENOMEM;
	wakeups_init(&wk);
	seg_lock(h, &wk);
	uint32_t n = queued(h);
	for (uint32_t i = 0; i < n; i++)
		copy[i] = h->slots[heap_at(h, i)].band;
	unlock_and_wake(h, &wk);
	qsort(copy, n, sizeof(int), int_cmp);
	struct band_tally bt = { bands, waiting, max, 0, 0 };
	for (uint32_t i = 0; i < n; i++)
		band_tally_add(&bt, copy[i]);
	free(copy);
	return bt.seen;
}

/* Detach: our passes, held and cached, become free (and go to waiters),
 * our slot is freed, then our byte's lock goes with our description. */
void ts_lib_shared_free(ts_turnstile *t)
{
	struct shared_handle *h = t->shared;
	struct seg_proc *me = atomic_load_explicit(&h->me, memory_order_acquire);

	if (me) {
		struct wakeups wk;
		wakeups_init(&wk);
		seg_lock(h, &wk);
		uint64_t w = atomic_exchange_explicit(&me->word, 0, memory_order_acq_rel);
		STEP(16); /* records dropped, slot not yet free */
		avail_add(h, pw_held(w) + pw_cache(w));
		atomic_store_explicit(&me->state, PROC_FREE, memory_order_release);
		grant_heads(h, &wk);
		unlock_and_wake(h, &wk);
	}
	busy_wait_idle(&h->busy); /* a granter between batches */
	pthread_mutex_lock(&handles_lock);
	for (struct shared_handle **pp = &handles; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	pthread_mutex_unlock(&handles_lock);
	if (h->lock_fd >= 0)
		close(h->lock_fd);
	munmap(h->seg, h->size);
	pthread_mutex_destroy(&h->registering);
	for (struct alias *a = h->aliases, *older; a; a = older) {
		older = a->older;
		free(a);
	}
	free(h);
	free(t);
}

/* --- format, attach, recover ---------------------------------------------- */

struct layout {
	uint64_t procs_off, slots_off, heap_off, size;
};

static struct layout layout_of(uint32_t max_waiters, uint32_t max_processes)
{
	struct layout l;
	uint64_t nslots = 2 * (uint64_t)max_waiters;
	l.procs_off = (sizeof(struct seg_header) + 63) & ~(uint64_t)63;
	l.slots_off = l.procs_off + (uint64_t)max_processes * sizeof(struct seg_proc);
	l.heap_off = l.slots_off + nslots * sizeof(struct seg_slot);
	l.size = (l.heap_off + nslots * sizeof(uint32_t) + 4095) & ~(uint64_t)4095;
	return l;
}

static bool regular_file(int fd, struct stat *st)
{
	return fd >= 0 && fstat(fd, st) == 0 && S_ISREG(st->st_mode);
}

/* Whether a live process holds a byte of the file (is attached), asked
 * through the caller's description, which never holds one of our locks
 * (attach opens a description of its own).  Cannot tell: busy. */
static bool attached_by_anyone(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0,
			    .l_len = TS_SHARED_MAX_PROCESSES };
	return fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
}

TS_API int ts_shared_format(int fd, int64_t concurrency, const ts_shared_limits *limits)
{
	ts_shared_limits lim = limits ? *limits : (ts_shared_limits){ 0, 0, 0 };
	struct stat st;

	if (!regular_file(fd, &st) || concurrency < 0 || concurrency > TS_SHARED_CONCURRENCY_MAX)
		return EINVAL;
	if (!lim.max_waiters)
		lim.max_waiters = 4096;
	if (!lim.max_processes)
		lim.max_processes = 1024;
	if (!lim.recover_ns)
		lim.recover_ns = 100000000;
	if (lim.max_waiters > TS_SHARED_MAX_WAITERS || lim.max_processes > TS_SHARED_MAX_PROCESSES ||
	    lim.recover_ns < TS_SHARED_RECOVER_MIN_NS || lim.recover_ns > TS_SHARED_RECOVER_MAX_NS)
		return EINVAL;
	if (attached_by_anyone(fd))
		return EBUSY;
	struct layout l = layout_of(lim.max_waiters, lim.max_processes);
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)l.size) < 0)
		return errno;
	void *m = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return errno;
	struct seg_header *sg = m;
	sg->version = SHARED_VERSION;
	sg->max_waiters = lim.max_waiters;
	sg->nslots = 2 * lim.max_waiters;
	sg->max_processes = lim.max_processes;
	sg->recover_ns = lim.recover_ns;
	sg->size = l.size;
	sg->procs_off = l.procs_off;
	sg->slots_off = l.slots_off;
	sg->heap_off = l.heap_off;
	atomic_store_explicit(&sg->ceiling, concurrency, memory_order_relaxed);
	atomic_store_explicit(&sg->avail, concurrency, memory_order_relaxed);
	struct seg_slot *slots = (struct seg_slot *)((char *)m + l.slots_off);
	for (uint32_t s = 0; s < sg->nslots; s++)
		atomic_store_explicit(&slots[s].state, SLOT_FREE, memory_order_relaxed);
	atomic_store_explicit((_Atomic uint64_t *)&sg->magic, SHARED_MAGIC, memory_order_release);
	munmap(m, l.size);
	return 0;
}

/* The header's layout checked against what its limits imply and the file's
 * size: a damaged header is EINVAL, never a mapping we then overrun. */
static int check_header(const struct seg_header *sg, off_t file_size)
{
	if (sg->magic != SHARED_MAGIC)
		return EINVAL;
	if (sg->version != SHARED_VERSION)
		return EPROTO;
	if (!sg->max_waiters || sg->max_waiters > TS_SHARED_MAX_WAITERS || !sg->max_processes ||
	    sg->max_processes > TS_SHARED_MAX_PROCESSES || sg->nslots != 2 * sg->max_waiters ||
	    sg->recover_ns < TS_SHARED_RECOVER_MIN_NS || sg->recover_ns > TS_SHARED_RECOVER_MAX_NS)
		return EINVAL;
	struct layout l = layout_of(sg->max_waiters, sg->max_processes);
	if (sg->size != l.size || sg->procs_off != l.procs_off || sg->slots_off != l.slots_off ||
	    sg->heap_off != l.heap_off || (uint64_t)file_size < l.size)
		return EINVAL;
	return 0;
}

static ts_turnstile *attach_fail(int err, struct shared_handle *h, void *m, size_t len)
{
	if (h) {
		if (h->lock_fd >= 0)
			close(h->lock_fd);
		pthread_mutex_destroy(&h->registering);
		for (struct alias *a = h->aliases, *older; a; a = older) {
			older = a->older;
			free(a);
		}
		free(h->t);
		free(h);
	}
	if (m)
		munmap(m, len);
	errno = err;
	return NULL;
}

TS_API ts_turnstile *ts_shared_attach(int fd)
{
	struct stat st;
	struct seg_header probe;

	pthread_once(&atfork_once, atfork_install);
	if (!regular_file(fd, &st) || st.st_size < (off_t)sizeof(probe))
		return attach_fail(EINVAL, NULL, NULL, 0);
	if (pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe))
		return attach_fail(errno ? errno : EINVAL, NULL, NULL, 0);
	int err = check_header(&probe, st.st_size);
	if (err)
		return attach_fail(err, NULL, NULL, 0);
	void *m = mmap(NULL, probe.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return attach_fail(errno, NULL, NULL, 0);
	/* Checked again in the mapping: the file may have changed since. */
	if ((err = check_header(m, st.st_size)) || ((struct seg_header *)m)->size != probe.size)
		return attach_fail(err ? err : EINVAL, NULL, m, probe.size);

	struct shared_handle *h = calloc(1, sizeof(*h));
	ts_turnstile *t = h ? aligned_alloc(64, sizeof(*t)) : NULL;
	if (!t) {
		free(h);
		return attach_fail(ENOMEM, NULL, m, probe.size);
	}
	pthread_mutex_init(&h->registering, NULL);
	h->t = t;
	h->seg = m;
	h->size = probe.size;
	h->max_waiters = probe.max_waiters;
	h->nslots = probe.nslots;
	h->max_processes = probe.max_processes;
	h->recover_ns = probe.recover_ns;
	h->procs = (struct seg_proc *)((char *)m + probe.procs_off);
	h->slots = (struct seg_slot *)((char *)m + probe.slots_off);
	h->heap = (_Atomic uint32_t *)((char *)m + probe.heap_off);
	h->slot = NO_SLOT;
	if ((h->lock_fd = reopen(fd)) < 0)
		return attach_fail(errno, h, m, probe.size);
	/* The handle a caller sees: fast paths that are inlined into callers
	 * find WAITERS|CLOSED in its word and call the library, which sends
	 * every call on a shared handle here. */
	memset(t, 0, sizeof(*t));
	atomic_init(&t->word, WORD_WAITERS | WORD_CLOSED);
	ts_lib_skip_init(&t->queue); /* never used, but a valid empty list */
	t->shared = h;
	if ((err = register_proc(h)))
		return attach_fail(err, h, m, probe.size);
	pthread_mutex_lock(&handles_lock);
	h->next = handles;
	handles = h;
	pthread_mutex_unlock(&handles_lock);
	return t;
}

TS_API int ts_shared_recover(ts_turnstile *t, int64_t *passes_back)
{
	int err = 0;
	if (passes_back)
		*passes_back = 0;
	if (!t || !t->shared)
		return EINVAL;
	if (!me_of(t->shared, &err))
		return err;
	recover_now(t->shared, passes_back);
	return 0;
}

TS_API bool ts_shared_is(const ts_turnstile *t)
{
	return t && t->shared;
}
