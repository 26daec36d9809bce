/* SPDX-License-Identifier: MIT */
/* libturnstile — gate: a job's FIRST turn, taken before work is picked up.
 *
 * For a worker pool that sizes itself by watching whether workers are
 * blocked: a worker takes its turn before it takes the work, so a blocked
 * worker holds no work (it reads as idle, and the work stays visible to
 * others).  The turn is the job's first: the claim stamped at pickup
 * orders every later turn of the job.
 */
#ifndef TURNSTILE_GATE_H
#define TURNSTILE_GATE_H

#include <turnstile/common.h>
#include <turnstile/job.h>
#include <turnstile/set.h>

TS_BEGIN_DECLS

/* Small, returned by value; members are private. */
typedef struct ts_gate {
	ts_set *private_set;
	int private_priority;
} ts_gate;

/* ts_set_gate - a gate over @s admitting at band @priority. */
TS_API ts_gate ts_set_gate(ts_set *s, int priority);

/* ts_gate_acquire - stamp a fresh claim into @job (the gate's band,
 * @shard, since = now, a new seq; a deadline or cancel already set on the
 * job is kept and honoured) and wait for its turn into *pass.
 * Returns false only when the set is closed — checked before waiting (a
 * closed set admits nobody) and after (a close is what released the
 * caller: stop); *pass is then unissued.  On an expired deadline, a fired
 * cancel, a negative or unsized shard it returns true with the unissued pass
 * (proceed unordered).  NULL @g, @job or @pass: false.  Thread-safe for
 * distinct jobs. */
TS_API bool ts_gate_acquire(const ts_gate *g, ts_job *job, int shard, ts_pass *pass);

/* ts_gate_acquire_strict - ts_gate_acquire for workers that shed load, as
 * ts_wait_turn_strict is for turns: the same stamp and wait, but a refusal
 * is returned instead of letting the worker through.  0: *pass is issued,
 * or unissued when nothing orders the job (a negative or unsized shard);
 * ESHUTDOWN: the set is closed (before the wait, or the close released
 * it); ETIMEDOUT: the job's deadline passed; ECANCELED: its cancel token
 * fired; EINVAL: @g, @job or @pass NULL, or a gate over a NULL set.
 * *pass is unissued whenever the result is not 0.  Thread-safe for
 * distinct jobs. */
TS_API int ts_gate_acquire_strict(const ts_gate *g, ts_job *job, int shard, ts_pass *pass);

TS_END_DECLS

#endif
