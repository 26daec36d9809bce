// SPDX-License-Identifier: MIT
// <turnstile.hpp>: holders give back exactly once (at scope end, on
// give_back, on being assigned over, never from a moved-from holder),
// chrono deadlines convert and time out, strict turns and gates refuse, and
// an item the waitlist refuses is destroyed and its slot discarded.
// Counts are read with ts_turnstile_snapshot and ts_waitlist_stats.
#include <turnstile.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>

using namespace std::chrono_literals;
using std::chrono::steady_clock;

static int failures;
#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			std::fprintf(stderr, "cxx/hpp.cc:%d: %s\n", __LINE__, #cond); \
			failures++;                                                   \
		}                                                                     \
	} while (0)

static int64_t available(ts_turnstile *t)
{
	int64_t a = -1;
	ts_turnstile_snapshot(t, &a, nullptr);
	return a;
}

// Poll (no sleep) until @done() holds; false after 10 s.
template <class F>
static bool await(F done)
{
	for (const auto end = steady_clock::now() + 10s; !done();) {
		if (steady_clock::now() > end)
			return false;
		std::this_thread::yield();
	}
	return true;
}

static int64_t queued(ts_turnstile *t)
{
	int64_t q = -1;
	ts_turnstile_snapshot(t, nullptr, &q);
	return q;
}

static size_t created(ts_waitlist *w)
{
	size_t c = 99;
	ts_waitlist_stats(w, &c, nullptr, nullptr);
	return c;
}

static size_t ready(ts_waitlist *w)
{
	size_t r = 99;
	ts_waitlist_stats(w, nullptr, &r, nullptr);
	return r;
}

static void deadlines()
{
	CHECK(ts::deadline().ns() == 0 && ts::deadline::none().ns() == 0);
	CHECK(ts::deadline::now().ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline::from_ns(42).ns() == 42);
	// Past or empty: "do not wait", never 0 ("none").
	CHECK(ts::deadline(0s).ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline(-5ms).ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline(std::chrono::duration<double>(-1.5)).ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline(std::chrono::duration<double>(NAN)).ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline(steady_clock::now() - 1s).ns() == TS_DEADLINE_NOW);
	CHECK(ts::deadline(steady_clock::time_point::min()).ns() == TS_DEADLINE_NOW);
	// Beyond the clock: no deadline rather than an overflow.
	CHECK(ts::deadline(steady_clock::time_point::max()).ns() == 0);
	CHECK(ts::deadline(std::chrono::hours::max()).ns() == 0);
	// A duration and a point, on the ts_now_ns clock.
	int64_t before = ts_now_ns();
	int64_t d = ts::deadline(10s).ns();
	int64_t after = ts_now_ns();
	CHECK(d >= before + 10000000000 && d <= after + 10000000000);
	before = ts_now_ns();
	d = ts::deadline(steady_clock::now() + 10s).ns();
	after = ts_now_ns();
	CHECK(d >= before + 9000000000 && d <= after + 10000000000);
}

static void passes()
{
	ts_turnstile *t = ts_turnstile_new(3);
	ts_claim claim;
	ts_claim_stamp(&claim, 0);
	{
		ts::pass p;
		CHECK(!p && !p.issued());
		CHECK(ts::wait(t, claim, p) == 0 && p && p.issued());
		CHECK(available(t) == 2 && p.waited() == 0ns);
	}
	CHECK(available(t) == 3); // returned itself at scope end

	ts::pass keep; // held throughout: a double return would show
	CHECK(ts::wait(t, claim, keep) == 0 && available(t) == 2);
	{
		ts::pass a;
		CHECK(ts::wait(t, claim, a) == 0 && available(t) == 1);
		ts::pass b(std::move(a));
		CHECK(!a && b && available(t) == 1);
		b.give_back();
		CHECK(!b && available(t) == 2);
		b.give_back();
		CHECK(available(t) == 2);
	}
	CHECK(available(t) == 2); // a and b ended with nothing to give
	{
		ts::pass c, d;
		CHECK(ts::wait(t, claim, c) == 0 && ts::wait(t, claim, d) == 0 && available(t) == 0);
		c = std::move(d); // c's own pass goes back
		CHECK(c && !d && available(t) == 1);
	}
	CHECK(available(t) == 2);
	{
		ts::pass r;
		CHECK(ts::wait(t, claim, r) == 0);
		ts_pass raw = r.release();
		CHECK(!r && ts_pass_issued(&raw) && available(t) == 1);
		ts::pass own(raw); // adopted back
		CHECK(own && available(t) == 1);
	}
	CHECK(available(t) == 2);
	keep.give_back();
	CHECK(!keep && available(t) == 3);
	ts_turnstile_free(t);

	// Waiting into a holder gives its pass back first: on a turnstile of
	// one, keeping it would time out.
	ts_turnstile *one = ts_turnstile_new(1);
	ts::pass e;
	CHECK(ts::wait(one, claim, e) == 0);
	CHECK(ts::wait(one, claim, e, 2s) == 0 && e && available(one) == 0);
	e.give_back();
	CHECK(available(one) == 1);
	ts_turnstile_free(one);
}

static void timeouts()
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_claim claim;
	ts_claim_stamp(&claim, 0);
	ts::pass held, p;
	CHECK(ts::wait(t, claim, held) == 0);
	CHECK(ts::wait(t, claim, p, ts::deadline::now()) == ETIMEDOUT && !p);
	CHECK(ts::wait(t, claim, p, steady_clock::now() - 1s) == ETIMEDOUT && !p);
	CHECK(ts::wait(t, claim, p, -1ms) == ETIMEDOUT && !p);
	auto start = steady_clock::now();
	CHECK(ts::wait(t, claim, p, 50ms) == ETIMEDOUT && !p);
	auto took = steady_clock::now() - start;
	CHECK(took >= 49ms && took < 5s);
	start = steady_clock::now();
	CHECK(ts::wait(t, claim, p, start + 30ms) == ETIMEDOUT && !p);
	took = steady_clock::now() - start;
	CHECK(took >= 29ms && took < 5s);
	CHECK(available(t) == 0);

	// A future deadline does not cut a wait short: another thread owns the
	// pass (moved to it) and gives it back once this one is queued.
	std::thread holder([t, h = std::move(held)]() mutable {
		await([t] { return queued(t) == 1; });
		h.give_back();
	});
	CHECK(!held);
	CHECK(ts::wait(t, claim, p, 10s) == 0 && p && p.waited() > 0ns);
	holder.join();
	CHECK(available(t) == 0);
	p.give_back();
	CHECK(available(t) == 1);

	ts_cancel fired = TS_CANCEL_INIT;
	ts_cancel_fire(&fired);
	CHECK(ts::wait(t, claim, p, {}, &fired) == ECANCELED && !p);
	ts_cancel_destroy(&fired);
	ts_turnstile_close(t);
	CHECK(ts::wait(t, claim, p) == ESHUTDOWN && !p);
	CHECK(ts::wait(nullptr, claim, p) == EINVAL && !p);
	ts_turnstile_free(t);
}

static void jobs_and_gates()
{
	ts_set *s = ts_set_new();
	CHECK(s && ts_set_resize(s, 0, 1) == 0);
	ts_turnstile *t = ts_set_turnstile(s, 0);
	ts_cancel fired = TS_CANCEL_INIT;
	ts_cancel_fire(&fired);
	ts_job job = TS_JOB_INIT, other = TS_JOB_INIT, worker = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 0, 0);
	ts_set_prioritize(s, &other, 0, 0);
	const ts_gate g = ts_set_gate(s, 0);
	{
		ts::pass p = ts::turn(job);
		CHECK(p && available(t) == 0);
		ts::set_deadline(other, ts::deadline::now());
		ts::pass q = ts::turn(other); // fails open
		CHECK(!q);
		CHECK(ts::turn_strict(other, q) == ETIMEDOUT && !q);
		ts::set_deadline(other, 20ms);
		const auto start = steady_clock::now();
		CHECK(ts::turn_strict(other, q) == ETIMEDOUT && !q);
		CHECK(steady_clock::now() - start >= 19ms);
		ts::set_deadline(other, {});
		ts_job_set_cancel(&other, &fired);
		CHECK(ts::turn_strict(other, q) == ECANCELED && !q);

		ts::set_deadline(worker, ts::deadline::now());
		CHECK(ts::acquire_strict(g, worker, 0, q) == ETIMEDOUT && !q);
		CHECK(ts::acquire(g, worker, 0, q) && !q); // proceeds unordered
		ts::set_deadline(worker, {});
		ts_job_set_cancel(&worker, &fired);
		CHECK(ts::acquire_strict(g, worker, 0, q) == ECANCELED && !q);
		ts_job_set_cancel(&worker, nullptr);
		CHECK(ts::acquire_strict(g, worker, 5, q) == 0 && !q); // unsized shard
		CHECK(available(t) == 0);
	}
	CHECK(available(t) == 1);
	ts::pass w;
	CHECK(ts::acquire_strict(g, worker, 0, w) == 0 && w && available(t) == 0);
	// Into a holder that has the only pass: given back first, or these
	// would time out.
	ts::set_deadline(worker, 2s);
	CHECK(ts::acquire_strict(g, worker, 0, w) == 0 && w);
	CHECK(ts::turn_strict(worker, w) == 0 && w);
	CHECK(ts::acquire(g, worker, 0, w) && w && available(t) == 0);
	w.give_back();
	CHECK(available(t) == 1);
	const ts_gate nowhere = ts_set_gate(nullptr, 0);
	CHECK(ts::acquire_strict(nowhere, worker, 0, w) == EINVAL && !w);
	ts_set_close(s);
	CHECK(ts::acquire_strict(g, worker, 0, w) == ESHUTDOWN && !w);
	CHECK(!ts::acquire(g, worker, 0, w) && !w);
	CHECK(ts::turn_strict(job, w) == ESHUTDOWN && !w);
	ts::pass open = ts::turn(job);
	CHECK(!open);
	ts_cancel_destroy(&fired);
	ts_set_free(s);
}

struct conn {
	int id;
};
static int destroyed;
struct destroy_conn {
	void operator()(conn *c) const noexcept
	{
		destroyed++;
		delete c;
	}
};
using holder = ts::item<conn, destroy_conn>;

static void items()
{
	ts_waitlist *w = ts_waitlist_new(2, 0);
	int loads = 0;
	auto load = [&loads](conn *&made) {
		made = new conn{ ++loads };
		return 0;
	};
	{
		holder a;
		CHECK(!a && a.get() == nullptr);
		CHECK(ts::take(w, a, load) == 0 && a && a->id == 1 && loads == 1);
		CHECK(created(w) == 1 && ready(w) == 0);
	}
	CHECK(ready(w) == 1 && destroyed == 0); // put back at scope end
	{
		holder a;
		CHECK(ts::take(w, a, load) == 0 && a->id == 1 && loads == 1); // reused
		holder b(std::move(a));
		CHECK(!a && a.get() == nullptr && b && b->id == 1);
		holder c;
		c = std::move(b);
		CHECK(!b && c && ready(w) == 0);
	}
	CHECK(ready(w) == 1 && created(w) == 1); // put once, not per holder
	{
		holder a;
		CHECK(ts::take(w, a, load) == 0);
		CHECK(a.give_back() && !a && ready(w) == 1);
		CHECK(a.give_back() && ready(w) == 1);
	}
	{
		holder a, b;
		CHECK(ts::take(w, a, load) == 0 && ts::take(w, b, load) == 0);
		CHECK(loads == 2 && b->id == 2 && created(w) == 2 && ready(w) == 0);
		a = std::move(b); // a's own item goes back
		CHECK(a->id == 2 && !b && ready(w) == 1);
	}
	CHECK(ready(w) == 2 && destroyed == 0);
	{
		holder a;
		CHECK(ts::take(w, a, load) == 0);
		a.discard(); // broken: destroyed, slot freed
		CHECK(!a && destroyed == 1 && created(w) == 1 && ready(w) == 1);
		a.discard();
		CHECK(destroyed == 1 && created(w) == 1);
	}
	{
		holder a, b;
		CHECK(ts::take(w, a, load) == 0 && ready(w) == 0); // the last ready one
		CHECK(ts::take(w, b, [](conn *&) { return ENOENT; }) == ENOENT && !b);
		CHECK(created(w) == 1); // the failed load's slot was freed
		bool caught = false;
		try {
			(void)ts::take(w, b, [](conn *&) -> int { throw std::runtime_error("no"); });
		} catch (const std::runtime_error &) {
			caught = true;
		}
		CHECK(caught && !b && created(w) == 1);
		ts_waitlist_counters counters;
		ts_waitlist_read_counters(w, &counters);
		CHECK(counters.load_failures == 2 && counters.last_load_error == EIO);

		CHECK(ts::take(w, b, load) == 0 && b->id == 3 && created(w) == 2);
		holder c;
		CHECK(ts::take(w, c, load, ts::deadline::now()) == ETIMEDOUT && !c);
		const auto start = steady_clock::now();
		CHECK(ts::take(w, c, load, 30ms) == ETIMEDOUT && !c);
		CHECK(steady_clock::now() - start >= 29ms && loads == 3);
		// Taking into a holder gives its item back first.
		CHECK(ts::take(w, b, load, 2s) == 0 && b->id == 3 && loads == 3);

		conn *raw = b.release();
		CHECK(!b && raw->id == 3 && ready(w) == 0);
		CHECK(ts_waitlist_put(w, raw));
		void *got = nullptr;
		CHECK(ts_waitlist_try_take(w, &got));
		{
			holder adopted(w, static_cast<conn *>(got));
			CHECK(adopted && adopted->id == 3 && ready(w) == 0);
		}
		CHECK(ready(w) == 1);

		// Closed: the list refuses the item, so the holder destroys it
		// and frees its slot.
		ts_waitlist_close(w);
		CHECK(ts::take(w, c, load) == 0 && c->id == 3); // ready items still drain
		CHECK(ts::take(w, b, load) == ESHUTDOWN && !b);
		CHECK(!c.give_back() && !c && destroyed == 2 && created(w) == 1);
	} // a: destroyed too
	CHECK(destroyed == 3 && created(w) == 0 && ready(w) == 0);
	ts_waitlist_free(w);

	// An item handed straight to a taker queued on another thread.
	ts_waitlist *one = ts_waitlist_new(1, 0);
	holder mine;
	CHECK(ts::take(one, mine, load) == 0 && mine->id == 4);
	int result = -1, id = 0;
	std::thread taker([&] {
		holder theirs;
		result = ts::take(one, theirs, load, 10s);
		id = theirs ? theirs->id : 0;
	});
	CHECK(await([one] {
		size_t q = 0;
		ts_waitlist_stats(one, nullptr, nullptr, &q);
		return q == 1;
	}));
	mine.give_back();
	taker.join();
	CHECK(result == 0 && id == 4 && loads == 4 && ready(one) == 1);
	void *got = nullptr;
	CHECK(ts_waitlist_try_take(one, &got));
	destroy_conn()(static_cast<conn *>(got));
	ts_waitlist_discard(one);
	ts_waitlist_free(one);

	// NULL tokens are held too; a refused one only frees its slot.
	static int never;
	ts::item<void, void (*)(void *)> tok([](void *) { never++; });
	ts_waitlist *tokens = ts_waitlist_new(1, 0);
	CHECK(ts::take(tokens, tok, [](void *&made) {
		      made = nullptr;
		      return 0;
	      }) == 0);
	CHECK(tok && tok.get() == nullptr && created(tokens) == 1);
	ts_waitlist_close(tokens);
	CHECK(!tok.give_back() && !tok && never == 0 && created(tokens) == 0);
	ts_waitlist_free(tokens);
}

int main()
{
	alarm(60); // a holder that failed to give back would block a wait forever
	deadlines();
	passes();
	timeouts();
	jobs_and_gates();
	items();
	if (failures)
		return 1;
	std::puts("cxx hpp: passes and items give back once, chrono deadlines, strict waits");
	return 0;
}
