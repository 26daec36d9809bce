/* SPDX-License-Identifier: MIT */
/* libturnstile — job: the claim a unit of work carries across its calls.
 *
 * A job is stamped ONCE, when it first asks for a turn (ts_set_prioritize):
 * its age (since) and identity (seq) then stay fixed for every turn it
 * takes, on every shard it is re-pointed at.  That is what makes admission
 * first-in-first-out over jobs rather than calls: a job in progress keeps
 * beating work that started after it.  The claim can be set only through
 * these functions; the members are private.
 */
#ifndef TURNSTILE_JOB_H
#define TURNSTILE_JOB_H

#include <turnstile/common.h>
#include <turnstile/cancel.h>
#include <turnstile/set.h>
#include <turnstile/turnstile.h>

TS_BEGIN_DECLS

typedef struct ts_job {
	ts_set *private_set;
	TS_PRIVATE_ATOMIC(ts_turnstile *) private_turnstile; /* lookup cache, or NULL */
	int private_shard;                         /* < 0: no turnstile */
	bool private_stamped;
	ts_claim private_claim;
	int64_t private_deadline_ns;
	ts_cancel *private_cancel;
} ts_job;

/* A job never prioritized: its waits pass straight through. */
#define TS_JOB_INIT { NULL, NULL, -1, false, { 0, 0, 0 }, 0, NULL }

/* ts_set_prioritize - point @job at @shard of @s, in band @priority.  The
 * first call stamps since = ts_now_ns() and a process-wide unique 64-bit
 * seq; later calls keep both and change only set, shard and band (a
 * cross-shard job keeps its age at every hop).  A negative @shard points
 * the job at no turnstile.  Not thread-safe against other calls on the
 * same job.  NULL @s or @job: no-op. */
TS_API void ts_set_prioritize(ts_set *s, ts_job *job, int shard, int priority);

/* ts_job_set_deadline - every later wait of @job gives up at @deadline_ns
 * (CLOCK_MONOTONIC; 0: none).  NULL: no-op. */
TS_API void ts_job_set_deadline(ts_job *job, int64_t deadline_ns);

/* ts_job_set_cancel - every later wait of @job ends when @cancel fires
 * (NULL: none).  The token must outlive those waits.  NULL @job: no-op. */
TS_API void ts_job_set_cancel(ts_job *job, ts_cancel *cancel);

/* ts_job_claim - @job's claim (all zero if never prioritized or NULL). */
TS_API ts_claim ts_job_claim(const ts_job *job);

/* ts_wait_turn - take a turn for @job on its shard's turnstile, blocking
 * until it is the best claim waiting.  Never refuses: a job never
 * prioritized, a shard with no turnstile, an expired deadline, a fired
 * cancel and a closed turnstile all give the unissued pass (the caller
 * proceeds unordered), which ts_pass_return accepts as a no-op.  Callers
 * wanting to STOP on a drain ask ts_set_closed.  Thread-safe: several
 * threads may wait on one job at once.  No allocation after the first
 * turn on a shard (which caches the lookup in the job). */
TS_API ts_pass ts_wait_turn(ts_job *job);

/* ts_wait_turn_strict - ts_wait_turn for callers that shed load: the same
 * wait, but a refusal is returned instead of letting the caller through.
 * 0: *pass is issued, or unissued when nothing orders the job (never
 * prioritized, negative shard, shard without a turnstile); ETIMEDOUT: the
 * job's deadline passed; ECANCELED: its cancel token fired; ESHUTDOWN: the
 * turnstile is closed; EINVAL: @job or @pass NULL.  *pass is unissued
 * whenever the result is not 0.  Thread-safe as ts_wait_turn. */
TS_API int ts_wait_turn_strict(ts_job *job, ts_pass *pass);

/* Private: the locked and first-turn paths of ts_wait_turn, exported for
 * its inlined fast path only (see turnstile/fastpath.h). */
TS_API ts_pass ts_private_wait_turn_slow(ts_job *job);

TS_END_DECLS

#ifndef __cplusplus

/* The turnstile is cached in the job after its first turn on a shard, so
 * the common case is the turnstile's own lock-free fast path. */
#define TS_PRIVATE_WAIT_TURN_BODY                                             \
	ts_pass pass = TS_PASS_NONE;                                          \
	if (job) {                                                            \
		ts_turnstile *t = atomic_load_explicit(&job->private_turnstile, \
						       memory_order_acquire); \
		if (t && ts_private_take_fast(t, job->private_cancel, &pass)) \
			return pass;                                          \
	}                                                                     \
	return ts_private_wait_turn_slow(job);

#ifdef TS_PRIVATE_INLINE_FAST_PATHS
TS_PRIVATE_INLINE ts_pass ts_wait_turn(ts_job *job)
{
	TS_PRIVATE_WAIT_TURN_BODY
}
#endif

#endif /* !__cplusplus */

#endif
