/* SPDX-License-Identifier: MIT */
/* Jobs: a claim stamped once, and ts_wait_turn's fail-open turn. */
#include <turnstile/job.h>
#include <turnstile/async.h>

#include <errno.h>
#include <stdatomic.h>

#include "async.h"

/* Process-wide and 64-bit: two jobs never share a seq, and it never wraps
 * (at one stamp per nanosecond it would take 584 years). */
static _Atomic uint64_t next_seq = 1;

TS_API void ts_claim_stamp(ts_claim *claim, int priority)
{
	if (!claim)
		return;
	claim->priority = priority;
	claim->since_ns = ts_now_ns();
	claim->seq = atomic_fetch_add_explicit(&next_seq, 1, memory_order_relaxed);
}

TS_API void ts_set_prioritize(ts_set *s, ts_job *job, int shard, int priority)
{
	if (!s || !job)
		return;
	if (!job->private_stamped) {
		ts_claim_stamp(&job->private_claim, priority);
		job->private_stamped = true;
	}
	job->private_claim.priority = priority;
	job->private_set = s;
	job->private_shard = shard < 0 ? -1 : shard;
	atomic_store_explicit(&job->private_turnstile, NULL, memory_order_relaxed);
}

TS_API void ts_job_set_deadline(ts_job *job, int64_t deadline_ns)
{
	if (job)
		job->private_deadline_ns = deadline_ns;
}

TS_API void ts_job_set_cancel(ts_job *job, ts_cancel *cancel)
{
	if (job)
		job->private_cancel = cancel;
}

TS_API ts_claim ts_job_claim(const ts_job *job)
{
	if (!job || !job->private_stamped)
		return (ts_claim){ 0, 0, 0 };
	return job->private_claim;
}

/* The turnstile found for the job's shard is cached in the job: a set never
 * removes a turnstile before ts_set_free, so the pointer cannot go stale,
 * and re-pointing the job clears it.  Several threads may fill the cache at
 * once; they store the same value, atomically.  Release/acquire: a thread
 * that finds the pointer in the cache also sees the turnstile's creation
 * (its word and lock), which the filling thread saw through the set. */
static ts_turnstile *job_turnstile(ts_job *job)
{
	if (!job->private_stamped || job->private_shard < 0)
		return NULL;
	ts_turnstile *t = atomic_load_explicit(&job->private_turnstile, memory_order_acquire);
	if (!t) {
		t = ts_set_turnstile(job->private_set, job->private_shard);
		if (t)
			atomic_store_explicit(&job->private_turnstile, t, memory_order_release);
	}
	return t; /* NULL: nothing orders this job */
}

TS_API ts_pass ts_private_wait_turn_slow(ts_job *job)
{
	ts_pass pass = TS_PASS_NONE;

	/* Any refusal (deadline, cancel, closed) leaves the pass unissued. */
	ts_wait_turn_strict(job, &pass);
	return pass;
}

TS_API int ts_wait_turn_strict(ts_job *job, ts_pass *pass)
{
	if (!pass)
		return EINVAL;
	*pass = (ts_pass)TS_PASS_NONE;
	if (!job)
		return EINVAL;
	ts_turnstile *t = job_turnstile(job);
	if (!t)
		return 0;
	return ts_turnstile_wait(t, &job->private_claim, job->private_deadline_ns,
				 job->private_cancel, pass);
}

TS_API ts_pass ts_wait_turn(ts_job *job)
{
	TS_PRIVATE_WAIT_TURN_BODY
}

/* Fails open as ts_wait_turn: a refusal at once is an unissued pass (0),
 * and the node's callback gets result 0 whatever ended the wait. */
TS_API int ts_private_wait_turn_async_slow(ts_job *job, ts_notifier *n, ts_async *node,
					   ts_async_fn fn, void *arg, ts_pass *pass)
{
	if (!pass)
		return EINVAL;
	if (!job)
		return EINVAL;
	int r = ts_lib_async_check(n, node, fn);
	if (r)
		return r;
	*pass = (ts_pass)TS_PASS_NONE;
	ts_turnstile *t = job_turnstile(job);
	if (!t)
		return 0;
	r = ts_lib_turnstile_wait_async(t, &job->private_claim, job->private_deadline_ns,
					job->private_cancel, n, node, fn, arg, pass, true);
	return r == EINPROGRESS || r == ENOMEM ? r : 0;
}

TS_API int ts_wait_turn_async(ts_job *job, ts_notifier *n, ts_async *node, ts_async_fn fn,
			      void *arg, ts_pass *pass)
{
	TS_PRIVATE_WAIT_TURN_ASYNC_BODY
}
