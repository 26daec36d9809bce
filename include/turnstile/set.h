/* SPDX-License-Identifier: MIT */
/* libturnstile — set: one turnstile per shard.
 *
 * A set is a lookup table and nothing more: its turnstiles are independent,
 * each with its own lock and queue, so a release on one shard never wakes a
 * waiter on another.  Shard ids are any int >= 0 and may be sparse; memory
 * grows with the number of shards in use, not with the largest id.  Lookups
 * (ts_set_turnstile, and ts_wait_turn's) take no lock: the table is an RCU
 * hash table, and callers never have to register threads with RCU.
 */
#ifndef TURNSTILE_SET_H
#define TURNSTILE_SET_H

#include <turnstile/common.h>
#include <turnstile/turnstile.h>

TS_BEGIN_DECLS

typedef struct ts_set ts_set;

/* ts_set_new - an empty set: no shard admits anything through it until
 * ts_set_resize gives that shard a turnstile.  NULL with errno ENOMEM. */
TS_API ts_set *ts_set_new(void);

/* ts_set_free - destroy @s and its turnstiles.  Nobody may be waiting on
 * it, hold one of its passes, or use a job pointed at it; as for a
 * turnstile, free after the last return is safe even while a releasing
 * thread is still inside its call.  A child of fork() may free a set it
 * inherited that no thread was using at the fork (the library installs
 * liburcu's fork hooks itself).  NULL: no-op. */
TS_API void ts_set_free(ts_set *s);

/* ts_set_resize - set @shard's ceiling, creating its turnstile on first
 * use.  Resizing a sized shard keeps its turnstile (the same pointer) and
 * moves its free count by the delta (see ts_turnstile_resize).
 * EINVAL: @s NULL, @shard < 0, @concurrency out of [0, TS_CONCURRENCY_MAX];
 * ESHUTDOWN: the set is closed (nothing is created or changed); ENOMEM.
 * Thread-safe, concurrently with every lookup and wait. */
TS_API int ts_set_resize(ts_set *s, int shard, int64_t concurrency);

/* ts_set_turnstile - @shard's turnstile, or NULL if it has none (or @s is
 * NULL, or @shard < 0).  Lock-free; the pointer stays valid until
 * ts_set_free.  Thread-safe. */
TS_API ts_turnstile *ts_set_turnstile(ts_set *s, int shard);

/* ts_set_close - close every turnstile of @s (their waiters get
 * ESHUTDOWN; ts_wait_turn then lets callers through unordered and
 * ts_wait_turn_strict returns ESHUTDOWN) and refuse later resizes.
 * Idempotent, thread-safe.  NULL: no-op. */
TS_API void ts_set_close(ts_set *s);

/* ts_set_closed - whether @s is closed: the question a caller whose job is
 * to stop on a drain asks, since ts_wait_turn lets everyone through.
 * NULL: false. */
TS_API bool ts_set_closed(const ts_set *s);

/* ts_set_snapshot - call @each once per sized shard, in no particular
 * order, with its free passes and queued callers (see
 * ts_turnstile_snapshot).  @each must not call ts_set_free.  Thread-safe.
 * NULL @s or @each: no-op. */
TS_API void ts_set_snapshot(ts_set *s,
			    void (*each)(int shard, int64_t available,
					 int64_t waiting, void *arg),
			    void *arg);

TS_END_DECLS

#endif
