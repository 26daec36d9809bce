/* SPDX-License-Identifier: MIT */
/* The loop-local hand-off: on a notifier whose loop calls
 * ts_notifier_before_poll before it blocks, a pass returned on the loop's
 * own thread, outside dispatch, to another node of that notifier writes no
 * fd; the callback runs in before_poll, never inside the return.  Without
 * before_poll, the same return writes the fd as it always did; a grant from
 * another thread writes it in either mode. */
#include <errno.h>
#include <poll.h>

#include "loops.h"

static const ts_claim band0 = { 0, 0, 0 }, band1 = { 1, 0, 0 };

struct scene {
	ts_turnstile *t;
	bool local;
	ts_async a, b;
	ts_pass pa;
	_Atomic int b_ran;
	ts_pass pb;
	int r[8];
	uint64_t writes[3], completions[2];
};

static void keep_pass(ts_async *node, int result, void *arg)
{
	struct scene *s = arg;
	THREAD_CHECK(result == 0);
	s->pb = ts_async_pass(node);
	s->r[7] = ts_notifier_before_poll(NULL) + 100; /* NULL: 0 */
	atomic_store(&s->b_ran, 1);
}

static ts_notifier_counters counters(ts_notifier *n)
{
	ts_notifier_counters c;
	ts_notifier_read_counters(n, &c);
	return c;
}

/* All on the loop thread, outside dispatch: A takes the free pass, B
 * queues behind it, A's pass comes back (granting B), then before_poll. */
static void hand_off_on_the_loop(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	if (s->local)
		s->r[0] = ts_notifier_before_poll(l->n); /* nothing yet: 0 */
	s->r[1] = ts_turnstile_wait_async(s->t, &band0, 0, NULL, l->n, &s->a, keep_pass, s, &s->pa);
	s->r[2] = ts_turnstile_wait_async(s->t, &band1, 0, NULL, l->n, &s->b, keep_pass, s, &p);
	s->writes[0] = counters(l->n).fd_writes;
	s->completions[0] = counters(l->n).completions;
	ts_pass_return(&s->pa);
	s->r[3] = atomic_load(&s->b_ran); /* never inside the return */
	s->writes[1] = counters(l->n).fd_writes;
	s->completions[1] = counters(l->n).completions;
	if (s->local) {
		s->r[4] = ts_notifier_before_poll(l->n);
		s->writes[2] = counters(l->n).fd_writes;
	}
}

static void return_b(struct loop *l, void *arg)
{
	(void)l;
	ts_pass_return(&((struct scene *)arg)->pb);
}

Test(async_loop_local, a_pass_returned_on_the_loop_to_its_own_waiter_writes_no_fd)
{
	struct scene s = { .local = true, .a = TS_ASYNC_INIT, .b = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	loop_start(&l);
	loop_run(&l, hand_off_on_the_loop, &s);
	cr_assert_eq(s.r[0], 0);
	cr_assert_eq(s.r[1], 0, "the pass was free");
	cr_assert_eq(s.r[2], EINPROGRESS);
	cr_assert_eq(s.r[3], 0, "a callback ran inside the returning call");
	cr_assert_eq(s.completions[1], s.completions[0] + 1, "the return did not complete B");
	cr_assert_eq(s.writes[1], s.writes[0], "the loop-local hand-off wrote the fd");
	cr_assert_eq(s.r[4], 1, "before_poll did not run B's callback");
	cr_assert_eq(atomic_load(&s.b_ran), 1);
	cr_assert_eq(s.r[7], 100, "before_poll(NULL) ran something");
	cr_assert_eq(s.writes[2], s.writes[0], "before_poll wrote the fd");
	cr_assert(ts_pass_issued(&s.pb));
	loop_run(&l, return_b, &s);
	cr_assert_eq(available(s.t), 1);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

Test(async_loop_local, without_before_poll_the_same_return_writes_the_fd)
{
	struct scene s = { .local = false, .a = TS_ASYNC_INIT, .b = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	loop_start(&l);
	loop_run(&l, hand_off_on_the_loop, &s);
	cr_assert_eq(s.r[2], EINPROGRESS);
	cr_assert_eq(s.r[3], 0, "a callback ran inside the returning call");
	cr_assert_eq(s.writes[1], s.writes[0] + 1, "a loop that does not call before_poll was not told");
	WAIT_FOR(atomic_load(&s.b_ran)); /* through the fd and dispatch */
	loop_run(&l, return_b, &s);
	cr_assert_eq(available(s.t), 1);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

static void queue_b_locally(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	s->r[0] = ts_notifier_before_poll(l->n);
	s->r[2] = ts_turnstile_wait_async(s->t, &band1, 0, NULL, l->n, &s->b, keep_pass, s, &p);
	s->writes[0] = counters(l->n).fd_writes;
}

static void read_writes(struct loop *l, void *arg)
{
	((struct scene *)arg)->writes[1] = counters(l->n).fd_writes;
}

Test(async_loop_local, a_grant_from_another_thread_still_writes_the_fd)
{
	struct scene s = { .local = true, .a = TS_ASYNC_INIT, .b = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.pa), 0);
	loop_start(&l);
	loop_run(&l, queue_b_locally, &s);
	cr_assert_eq(s.r[2], EINPROGRESS);
	ts_pass_return(&s.pa); /* this thread is not the loop */
	WAIT_FOR(atomic_load(&s.b_ran)); /* the loop only dispatches on the fd */
	loop_run(&l, read_writes, &s);
	cr_assert_eq(s.writes[1], s.writes[0] + 1);
	loop_run(&l, return_b, &s);
	cr_assert_eq(available(s.t), 1);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

/* An item put on the loop to its own taker: the same, for waitlists. */
struct take_scene {
	ts_waitlist *w;
	ts_async node;
	void *item;
	_Atomic int ran;
	int r[3];
	uint64_t writes[2];
};

static void got_item(ts_async *node, int result, void *arg)
{
	struct take_scene *s = arg;
	THREAD_CHECK(result == 0);
	s->item = ts_async_item(node);
	atomic_store(&s->ran, 1);
}

static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

static void put_on_the_loop(struct loop *l, void *arg)
{
	struct take_scene *s = arg;
	static int thing;
	void *held, *got;
	ts_notifier_before_poll(l->n);
	THREAD_CHECK(ts_waitlist_take(s->w, &held, make, &thing, 0, NULL) == 0);
	s->r[0] = ts_waitlist_take_async(s->w, 0, NULL, l->n, &s->node, got_item, s, &got);
	s->writes[0] = counters(l->n).fd_writes;
	THREAD_CHECK(ts_waitlist_put(s->w, held));
	s->writes[1] = counters(l->n).fd_writes;
	s->r[1] = atomic_load(&s->ran);
	s->r[2] = ts_notifier_before_poll(l->n);
}

Test(async_loop_local, an_item_put_on_the_loop_to_its_own_taker_writes_no_fd)
{
	struct take_scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	s.w = ts_waitlist_new(1, 0);
	loop_start(&l);
	loop_run(&l, put_on_the_loop, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.writes[1], s.writes[0], "the loop-local put wrote the fd");
	cr_assert_eq(s.r[1], 0, "a callback ran inside the put");
	cr_assert_eq(s.r[2], 1);
	cr_assert_not_null(s.item);
	cr_assert(ts_waitlist_put(s.w, s.item));
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(s.w);
}

/* The thread that called before_poll is gone and the notifier's new loop
 * only dispatches on the fd: a pass returned by any other thread (even one
 * that got the old thread's stack, and so its thread-local addresses)
 * still makes the fd readable. */
static void *call_before_poll(void *arg)
{
	ts_notifier_before_poll(arg);
	return NULL;
}

static void *return_pass(void *arg)
{
	ts_pass_return(arg);
	return NULL;
}

static void count_call(ts_async *node, int result, void *arg)
{
	ts_pass p = ts_async_pass(node);
	THREAD_CHECK(result == 0 && ts_pass_issued(&p));
	ts_pass_return(&p);
	atomic_fetch_add((_Atomic int *)arg, 1);
}

Test(async_loop_local, a_notifier_whose_before_poll_thread_left_is_still_told)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(1);
	ts_async node = TS_ASYNC_INIT;
	ts_pass held, p;
	_Atomic int calls = 0;
	pthread_t th;
	cr_assert_not_null(n);
	start_thread(&th, call_before_poll, n); /* a loop that used before_poll, then left */
	join_bounded(th);
	cr_assert_eq(ts_turnstile_wait(t, &band0, 0, NULL, &held), 0);
	cr_assert_eq(ts_turnstile_wait_async(t, &band1, 0, NULL, n, &node, count_call, &calls, &p),
		     EINPROGRESS);
	start_thread(&th, return_pass, &held);
	join_bounded(th);
	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	cr_assert_eq(poll(&pfd, 1, 5000), 1, "the new loop was never told");
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_eq(atomic_load(&calls), 1);
	cr_assert_eq(available(t), 1);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}
