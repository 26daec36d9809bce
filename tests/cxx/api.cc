// SPDX-License-Identifier: MIT
// A C++17 program that calls every public function of libturnstile through
// the umbrella header (tests/headers.sh checks that none is missing here).
// It pins down that the headers compile as C++ and that the C linkage of
// every function is right; the behaviour itself is tested in C.
#include <turnstile.h>

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

static int failures;
#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			std::fprintf(stderr, "cxx/api.cc:%d: %s\n", __LINE__, #cond); \
			failures++;                                        \
		}                                                          \
	} while (0)

static int load_one(void *arg, void **item)
{
	*item = arg;
	return 0;
}

// The outcome of an event-loop wait, as its callback saw it.
struct outcome {
	int result = -99;
	ts_pass pass = TS_PASS_NONE;
	void *item = nullptr;
};

static void record(ts_async *node, int result, void *arg)
{
	outcome *o = static_cast<outcome *>(arg);
	o->result = result;
	o->pass = ts_async_pass(node);
	o->item = ts_async_item(node);
}

// Wait for the notifier's fd, as a loop would, then dispatch.
static int dispatch_when_readable(ts_notifier *n)
{
	pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	if (poll(&pfd, 1, 5000) != 1)
		return -1;
	return ts_notifier_dispatch(n);
}

static void each_shard(int shard, int64_t available, int64_t waiting, void *arg)
{
	*static_cast<int *>(arg) += shard == 7 && available == 2 && waiting == 0;
}

int main()
{
	CHECK(ts_now_ns() > 0);
	CHECK(ts_version() == TS_VERSION_NUMBER);
	CHECK(std::strstr(ts_strerror(ESHUTDOWN), "closed") != nullptr);

	ts_cancel cancel = TS_CANCEL_INIT;
	ts_cancel_init(&cancel);
	CHECK(!ts_cancel_fired(&cancel));

	// A turnstile used as a mutex between two C++ threads.
	ts_turnstile *t = ts_turnstile_new(1);
	CHECK(t != nullptr);
	ts_claim claim = { 0, ts_now_ns(), 1 };
	ts_pass pass = TS_PASS_NONE;
	CHECK(ts_turnstile_wait(t, &claim, 0, &cancel, &pass) == 0);
	CHECK(ts_pass_issued(&pass));
	int shared = 0;
	std::thread other([&] {
		ts_pass p = TS_PASS_NONE;
		ts_claim c = { 0, ts_now_ns(), 2 };
		if (ts_turnstile_wait(t, &c, 0, nullptr, &p) == 0) {
			shared++;
			ts_pass_return(&p);
		}
	});
	shared++;
	ts_pass_return(&pass);
	other.join();
	CHECK(shared == 2);
	CHECK(ts_pass_waited_ns(&pass) == 0);
	CHECK(ts_turnstile_resize(t, 3) == 0);
	int64_t available = -1, waiting = -1;
	ts_turnstile_snapshot(t, &available, &waiting);
	int bands[2];
	int64_t per_band[2];
	CHECK(ts_turnstile_waiting_by_band(t, bands, per_band, 2) == 0);
	CHECK(available == 3 && waiting == 0);
	CHECK(ts_turnstile_ceiling(t) == 3);
	ts_cancel_fire(&cancel);
	CHECK(ts_cancel_fired(&cancel));
	CHECK(ts_turnstile_wait(t, &claim, 0, &cancel, &pass) == ECANCELED);
	ts_turnstile_close(t);
	CHECK(ts_turnstile_closed(t));
	CHECK(ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, nullptr, &pass) == ESHUTDOWN);
	ts_turnstile_free(t);
	ts_cancel_destroy(&cancel);

	// Set, job, gate.
	ts_set *s = ts_set_new();
	CHECK(s != nullptr);
	CHECK(ts_set_resize(s, 7, 2) == 0);
	CHECK(ts_set_turnstile(s, 7) != nullptr);
	int seen = 0;
	ts_set_snapshot(s, each_shard, &seen);
	CHECK(seen == 1);
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 7, 1);
	ts_job_set_deadline(&job, 0);
	ts_job_set_cancel(&job, nullptr);
	CHECK(ts_job_claim(&job).priority == 1);
	ts_pass turn = ts_wait_turn(&job);
	CHECK(ts_pass_issued(&turn));
	ts_pass_return(&turn);
	CHECK(ts_wait_turn_strict(&job, &turn) == 0 && ts_pass_issued(&turn));
	ts_pass_return(&turn);
	ts_gate gate = ts_set_gate(s, 0);
	CHECK(ts_gate_acquire(&gate, &job, 7, &turn));
	ts_pass_return(&turn);
	CHECK(ts_gate_acquire_strict(&gate, &job, 7, &turn) == 0 && ts_pass_issued(&turn));
	ts_pass_return(&turn);
	ts_claim stamped;
	ts_claim_stamp(&stamped, 3);
	CHECK(stamped.priority == 3 && stamped.seq > ts_job_claim(&job).seq);
	ts_set_close(s);
	CHECK(ts_set_closed(s));
	CHECK(ts_wait_turn_strict(&job, &turn) == ESHUTDOWN);
	ts_set_free(s);

	// Waitlist.
	ts_waitlist *w = ts_waitlist_new(2, 0);
	CHECK(w != nullptr);
	int token = 0;
	void *item = nullptr;
	CHECK(ts_waitlist_take(w, &item, load_one, &token, 0, nullptr) == 0 && item == &token);
	CHECK(ts_waitlist_put(w, item));
	CHECK(ts_waitlist_try_take(w, &item) && item == &token);
	CHECK(ts_waitlist_put(w, item));
	// A reaper's pick: a captureless lambda is a ts_pick_fn.
	ts_pick_fn is_arg = [](void *it, void *arg) { return it == arg; };
	CHECK(!ts_waitlist_try_take_oldest(w, &item, is_arg, nullptr));
	CHECK(ts_waitlist_try_take_oldest(w, &item, is_arg, &token) && item == &token);
	ts_waitlist_discard(w);
	size_t created = 9, ready = 9, queued = 9;
	ts_waitlist_stats(w, &created, &ready, &queued);
	CHECK(created == 0 && ready == 0 && queued == 0);
	ts_waitlist_counters counters;
	ts_waitlist_read_counters(w, &counters);
	CHECK(counters.loads == 1 && counters.discards == 1);
	ts_waitlist_close(w);
	CHECK(!ts_waitlist_put(w, &token));
	ts_waitlist_free(w);

	// Event-loop waiters: a turn queued behind a pass another thread holds,
	// withdrawn once and then granted; a job's turn; takes that create, get
	// an item later through the callback, and get one at once.
	ts_notifier *n = ts_notifier_new();
	CHECK(n != nullptr);
	CHECK(ts_notifier_fd(n) >= 0);
	ts_turnstile *lt = ts_turnstile_new(1);
	ts_pass held = TS_PASS_NONE;
	CHECK(ts_turnstile_wait(lt, &claim, 0, nullptr, &held) == 0);
	ts_async node = TS_ASYNC_INIT;
	outcome got_turn;
	ts_pass now = TS_PASS_NONE;
	CHECK(ts_turnstile_wait_async(lt, &claim, 0, nullptr, n, &node, record, &got_turn, &now) ==
	      EINPROGRESS);
	CHECK(ts_turnstile_wait_async(lt, &claim, 0, nullptr, n, &node, record, &got_turn, &now) ==
	      EBUSY);
	CHECK(ts_async_cancel(&node) == 0);
	CHECK(ts_async_cancel(&node) == ENOENT);
	CHECK(ts_async_result(&node) == ENOENT);
	CHECK(ts_notifier_before_poll(n) == 0);
	CHECK(ts_notifier_dispatch(n) == 0 && got_turn.result == -99);
	CHECK(ts_turnstile_wait_async(lt, &claim, ts_now_ns() + 5000000000LL, nullptr, n, &node,
				      record, &got_turn, &now) == EINPROGRESS);
	CHECK(ts_notifier_free(n) == EBUSY);
	std::thread holder([&] { ts_pass_return(&held); });
	holder.join();
	CHECK(dispatch_when_readable(n) == 1);
	CHECK(got_turn.result == 0 && ts_pass_issued(&got_turn.pass));
	CHECK(ts_async_result(&node) == 0);
	ts_pass_return(&got_turn.pass);
	ts_job loose = TS_JOB_INIT; // nothing orders it: 0 at once, unissued
	CHECK(ts_wait_turn_async(&loose, n, &node, record, &got_turn, &now) == 0);
	CHECK(!ts_pass_issued(&now));
	ts_turnstile_free(lt);

	ts_waitlist *lw = ts_waitlist_new(1, 0);
	outcome take;
	void *got = &token;
	CHECK(ts_waitlist_take_async(lw, 0, nullptr, n, &node, record, &take, &got) == TS_CREATE);
	CHECK(got == nullptr);
	CHECK(ts_waitlist_take_async(lw, 0, nullptr, n, &node, record, &take, &got) ==
	      EINPROGRESS);
	CHECK(ts_waitlist_put(lw, &token)); // made on the loop, handed to the queued take
	CHECK(dispatch_when_readable(n) == 1);
	CHECK(take.result == 0 && take.item == &token);
	CHECK(ts_waitlist_put(lw, take.item));
	CHECK(ts_waitlist_take_async(lw, 0, nullptr, n, &node, record, &take, &got) == 0);
	CHECK(got == &token);
	CHECK(ts_waitlist_put(lw, got)); // every item back before the free
	ts_notifier_counters nc;
	ts_notifier_read_counters(n, &nc);
	CHECK(nc.callbacks == 2 && nc.completions == 2);
	CHECK(ts_notifier_free(n) == 0);
	ts_waitlist_close(lw);
	ts_waitlist_free(lw);

	// a process-shared turnstile, in a memfd
	int fd = memfd_create("cxx", MFD_CLOEXEC);
	ts_shared_limits lim = { 8, 4, 0 };
	CHECK(fd >= 0 && ts_shared_format(fd, 1, &lim) == 0);
	ts_turnstile *st = ts_shared_attach(fd);
	CHECK(st && ts_shared_is(st) && !ts_shared_is(nullptr));
	ts_pass sp = TS_PASS_NONE;
	ts_claim sc = { 0, ts_now_ns(), 1 };
	CHECK(ts_turnstile_wait(st, &sc, 0, nullptr, &sp) == 0);
	ts_pass_return(&sp);
	int64_t back = -1;
	CHECK(ts_shared_recover(st, &back) == 0 && back == 0);
	ts_turnstile_free(st);
	close(fd);

	if (failures)
		return 1;
	std::puts("cxx api: every public function called from C++");
	return 0;
}
