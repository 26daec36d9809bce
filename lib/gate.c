/* SPDX-License-Identifier: MIT */
/* Gates: a job's first turn, stamped at pickup. */
#include <turnstile/gate.h>

#include <errno.h>

TS_API ts_gate ts_set_gate(ts_set *s, int priority)
{
	return (ts_gate){ s, priority };
}

TS_API bool ts_gate_acquire(const ts_gate *g, ts_job *job, int shard, ts_pass *pass)
{
	if (pass)
		*pass = (ts_pass)TS_PASS_NONE;
	if (!g || !g->private_set || !job || !pass)
		return false;
	if (ts_set_closed(g->private_set))
		return false; /* a drained set admits nobody */
	job->private_stamped = false; /* a fresh claim: this is the job's first turn */
	ts_set_prioritize(g->private_set, job, shard, g->private_priority);
	*pass = ts_wait_turn(job);
	if (ts_set_closed(g->private_set)) {
		ts_pass_return(pass); /* the close released us: stop, holding nothing */
		return false;
	}
	return true;
}

/* As ts_gate_acquire, with ts_wait_turn_strict's refusals.  A close that
 * lands after the grant still ends in ESHUTDOWN: the worker stops, and
 * the pass it got goes back here. */
TS_API int ts_gate_acquire_strict(const ts_gate *g, ts_job *job, int shard, ts_pass *pass)
{
	if (!pass)
		return EINVAL;
	*pass = (ts_pass)TS_PASS_NONE;
	if (!g || !g->private_set || !job)
		return EINVAL;
	if (ts_set_closed(g->private_set))
		return ESHUTDOWN;
	job->private_stamped = false;
	ts_set_prioritize(g->private_set, job, shard, g->private_priority);
	int err = ts_wait_turn_strict(job, pass);
	if (!err && ts_set_closed(g->private_set)) {
		ts_pass_return(pass);
		return ESHUTDOWN;
	}
	return err;
}
