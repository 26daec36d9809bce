// SPDX-License-Identifier: MIT
// libturnstile — header-only C++17 over the C API (<turnstile.h>, which this
// includes: every C name stays available).
//
//   ts::deadline   a std::chrono point or duration as the library's deadline
//   ts::pass       a move-only pass that returns itself when it goes
//   ts::item<T,D>  a move-only waitlist item that goes back when it goes, or
//                  is destroyed with D and discarded when the list refuses it
//   ts::wait, ts::turn, ts::turn_strict, ts::acquire, ts::acquire_strict,
//   ts::take       the blocking waits, filling those holders
//
// Results are the library's: 0 or a positive errno value, never an
// exception (the one exception that can pass through is one thrown by the
// caller's own loader, see ts::take).  Holders are not thread-safe objects
// (as std::unique_ptr is not): one thread uses a holder at a time, and a
// holder may be moved to another thread.
//
//	ts::pass p;
//	if (ts::wait(t, claim, p, std::chrono::milliseconds(50)) == 0)
//		query(); // p returns itself at the end of the scope
#ifndef TURNSTILE_HPP
#define TURNSTILE_HPP

#include <turnstile.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

namespace ts {

// A deadline as the C API takes it: CLOCK_MONOTONIC nanoseconds of
// ts_now_ns, 0 for none, TS_DEADLINE_NOW for "do not wait".  A point or
// duration is converted when the deadline is made, and any point not after
// that instant is TS_DEADLINE_NOW (0, "none", is never produced by a past
// point).  A deadline over a century away is no deadline.
class deadline {
public:
	// No deadline: wait as long as it takes.
	constexpr deadline() noexcept = default;

	// At @tp, as ts_now_ns() + (tp - steady_clock::now()): no assumption
	// that steady_clock and CLOCK_MONOTONIC share an epoch.
	deadline(std::chrono::steady_clock::time_point tp) noexcept
	{
		const auto now = std::chrono::steady_clock::now();
		ns_ = tp <= now ? TS_DEADLINE_NOW : after(tp - now);
	}

	// @d from now; zero or negative is TS_DEADLINE_NOW.
	template <class Rep, class Period>
	deadline(std::chrono::duration<Rep, Period> d) noexcept : ns_(after(d))
	{
	}

	// No deadline (0).
	static constexpr deadline none() noexcept { return deadline(); }

	// Do not wait: a free pass or ready item, or ETIMEDOUT (TS_DEADLINE_NOW).
	static constexpr deadline now() noexcept { return from_ns(TS_DEADLINE_NOW); }

	// A C deadline value as it is (ts_now_ns clock, 0: none).
	static constexpr deadline from_ns(int64_t ns) noexcept
	{
		deadline d;
		d.ns_ = ns;
		return d;
	}

	// The value to give the C API.
	constexpr int64_t ns() const noexcept { return ns_; }

private:
	template <class Rep, class Period>
	static int64_t after(std::chrono::duration<Rep, Period> d) noexcept
	{
		if (!(d > d.zero())) // NaN too
			return TS_DEADLINE_NOW;
		if (std::chrono::duration<double, std::nano>(d).count() >= 4e18)
			return 0; // ~127 years: no overflow, and no deadline in practice
		return ts_now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
	}

	int64_t ns_ = 0;
};

// One turn, owned: move-only, returned with ts_pass_return when the holder
// is destroyed, assigned over, or give_back() is called — exactly once.  A
// moved-from holder is unissued and returns nothing.
class [[nodiscard]] pass {
public:
	// Unissued.
	pass() noexcept = default;

	// Takes ownership of @raw (an event-loop callback's ts_async_pass, a C
	// wait's result); unissued @raw gives an unissued holder.
	explicit pass(ts_pass raw) noexcept : p_(raw) {}

	pass(pass &&o) noexcept : p_(o.release()) {}

	// Gives back the pass held, then takes @o's.
	pass &operator=(pass &&o) noexcept
	{
		if (this != &o) {
			give_back();
			p_ = o.release();
		}
		return *this;
	}

	pass(const pass &) = delete;
	pass &operator=(const pass &) = delete;

	~pass() { give_back(); }

	// Whether a turn is held (false after a fail-open or refused wait).
	bool issued() const noexcept { return ts_pass_issued(&p_); }
	explicit operator bool() const noexcept { return issued(); }

	// Return the turn now, admitting the best waiter; no-op when unissued.
	void give_back() noexcept { ts_pass_return(&p_); }

	// Hand the raw pass out: the caller returns it (ts_pass_return); the
	// holder is left unissued.
	ts_pass release() noexcept
	{
		const ts_pass raw = p_;
		p_ = TS_PASS_NONE;
		return raw;
	}

	// How long the holder queued for it (0: it did not queue, or unissued).
	std::chrono::nanoseconds waited() const noexcept
	{
		return std::chrono::nanoseconds(ts_pass_waited_ns(&p_));
	}

private:
	ts_pass p_ = TS_PASS_NONE;
};

// ts_turnstile_wait into @out: 0 and @out issued, or ETIMEDOUT, ECANCELED,
// ESHUTDOWN, EINVAL (NULL @t) with @out unissued.  A pass @out already
// held is given back first, so re-waiting never holds two.
inline int wait(ts_turnstile *t, const ts_claim &claim, pass &out, deadline d = {},
		ts_cancel *cancel = nullptr) noexcept
{
	out.give_back();
	ts_pass raw = TS_PASS_NONE;
	const int err = ts_turnstile_wait(t, &claim, d.ns(), cancel, &raw);
	out = pass(raw);
	return err;
}

// ts_wait_turn: @job's turn on its shard.  Fails open: an unissued pass when
// nothing orders the job or the wait was refused (deadline, cancel, close).
inline pass turn(ts_job &job) noexcept { return pass(ts_wait_turn(&job)); }

// ts_wait_turn_strict into @out (given back first): 0 (issued, or unissued
// when nothing orders the job), ETIMEDOUT, ECANCELED or ESHUTDOWN with @out
// unissued.
inline int turn_strict(ts_job &job, pass &out) noexcept
{
	out.give_back();
	ts_pass raw = TS_PASS_NONE;
	const int err = ts_wait_turn_strict(&job, &raw);
	out = pass(raw);
	return err;
}

// ts_job_set_deadline with a chrono deadline (converted now): every later
// wait of @job gives up at @d.
inline void set_deadline(ts_job &job, deadline d) noexcept { ts_job_set_deadline(&job, d.ns()); }

// ts_gate_acquire into @out (given back first): false only when the set is
// closed (@out unissued); true otherwise, @out unissued when the job
// proceeds unordered.
inline bool acquire(const ts_gate &g, ts_job &job, int shard, pass &out) noexcept
{
	out.give_back();
	ts_pass raw = TS_PASS_NONE;
	const bool go = ts_gate_acquire(&g, &job, shard, &raw);
	out = pass(raw);
	return go;
}

// ts_gate_acquire_strict into @out (given back first): 0 (issued, or
// unissued for a negative or unsized shard), ESHUTDOWN, ETIMEDOUT,
// ECANCELED, EINVAL (a gate over no set) with @out unissued.
inline int acquire_strict(const ts_gate &g, ts_job &job, int shard, pass &out) noexcept
{
	out.give_back();
	ts_pass raw = TS_PASS_NONE;
	const int err = ts_gate_acquire_strict(&g, &job, shard, &raw);
	out = pass(raw);
	return err;
}

// One waitlist item, owned: move-only; when the holder is destroyed,
// assigned over or give_back() is called, the item goes back with
// ts_waitlist_put, or — if the list refuses it (closed, out of memory) — is
// destroyed with @Destroy and its creation slot freed with
// ts_waitlist_discard, as waitlist.h asks.  Exactly one of those happens,
// once; a moved-from holder holds nothing.  @Destroy is called on a non-null
// item only (a NULL token just frees its slot) and must not throw.  Holding
// is told by the holder, not the pointer: a NULL token is held too.
template <class T, class Destroy = std::default_delete<T>>
class item {
public:
	// Holds nothing, with a default-constructed destroyer.
	item() noexcept = default;

	// Holds nothing; @d destroys what it will hold.
	explicit item(Destroy d) noexcept : d_(std::move(d)) {}

	// Takes ownership of @p, taken from @w (or made for @w after an
	// event-loop take's TS_CREATE: owned as if taken, waitlist.h/async.h).
	item(ts_waitlist *w, T *p, Destroy d = Destroy()) noexcept : w_(w), p_(p), d_(std::move(d))
	{
	}

	item(item &&o) noexcept : w_(o.w_), p_(o.p_), d_(std::move(o.d_)) { o.forget(); }

	// Gives back the item held, then takes @o's (and its destroyer).
	item &operator=(item &&o) noexcept
	{
		if (this != &o) {
			give_back();
			w_ = o.w_;
			p_ = o.p_;
			d_ = std::move(o.d_);
			o.forget();
		}
		return *this;
	}

	item(const item &) = delete;
	item &operator=(const item &) = delete;

	~item() { give_back(); }

	// Whether an item (or NULL token) is held.
	bool held() const noexcept { return w_ != nullptr; }
	explicit operator bool() const noexcept { return held(); }

	T *get() const noexcept { return p_; }
	T *operator->() const noexcept { return p_; }

	// Put the item back now.  false: the list refused it, so it was
	// destroyed and discarded instead.  Holds nothing afterwards; true
	// when nothing was held.
	bool give_back() noexcept
	{
		if (!w_)
			return true;
		const bool back = ts_waitlist_put(w_, p_);
		if (!back)
			destroy_and_discard();
		forget();
		return back;
	}

	// The item is broken: destroy it and free its creation slot
	// (ts_waitlist_discard), so a waiting taker creates a replacement.
	// No-op when nothing is held.
	void discard() noexcept
	{
		if (!w_)
			return;
		destroy_and_discard();
		forget();
	}

	// Hand the item out: the caller now owns it as taken from its list
	// (ts_waitlist_put it, or destroy it and ts_waitlist_discard).
	T *release() noexcept
	{
		T *p = p_;
		forget();
		return p;
	}

	// Give back what is held, then hold @p, taken from @w (see the
	// adopting constructor), keeping the destroyer.
	void adopt(ts_waitlist *w, T *p) noexcept
	{
		give_back();
		w_ = w;
		p_ = p;
	}

private:
	void destroy_and_discard() noexcept
	{
		if (p_)
			d_(p_);
		ts_waitlist_discard(w_);
	}

	void forget() noexcept
	{
		w_ = nullptr;
		p_ = nullptr;
	}

	ts_waitlist *w_ = nullptr;
	T *p_ = nullptr;
	Destroy d_{};
};

namespace detail {

// A C++ loader as a ts_load_fn.  An exception it throws never crosses the
// library's C frames: it is kept, the load fails with EIO (freeing the
// creation slot, as any failed load), and ts::take rethrows it.
template <class T, class Load>
struct loader {
	explicit loader(Load &l) noexcept : load(l) {}

	Load &load;
#if defined(__cpp_exceptions)
	std::exception_ptr thrown;
#endif

	static int call(loader &self, void **made)
	{
		T *p = nullptr;
		const int err = self.load(p);
		if (err == 0)
			*made = p;
		return err;
	}

	static int run(void *arg, void **made) noexcept
	{
		loader &self = *static_cast<loader *>(arg);
#if defined(__cpp_exceptions)
		try {
			return call(self, made);
		} catch (...) {
			self.thrown = std::current_exception();
			return EIO;
		}
#else
		return call(self, made);
#endif
	}
};

} // namespace detail

// ts_waitlist_take into @out, whose item (if any) is given back first.
// @load(T *&made) runs only when the list lets this caller create an item,
// on this thread, outside the list's locks: it returns 0 with @made set
// (NULL makes a NULL token), or a positive errno value, which take returns
// (the slot is freed).  Results: 0 with @out holding the item, or the
// load's error, ESHUTDOWN, ECANCELED, ETIMEDOUT, EAGAIN, EINVAL with @out
// holding nothing — a blocking take never yields TS_CREATE, which only an
// event-loop take returns (adopt the item made for that slot into an
// ts::item, or ts_waitlist_discard if making it failed).  An exception
// thrown by @load is rethrown here after the library has freed the slot.
template <class T, class Destroy, class Load>
int take(ts_waitlist *w, item<T, Destroy> &out, Load &&load, deadline d = {},
	 ts_cancel *cancel = nullptr)
{
	static_assert(std::is_invocable_r_v<int, Load &, T *&>,
		      "load(T *&made) returns 0 (made set) or a positive errno value");
	out.give_back();
	detail::loader<T, std::remove_reference_t<Load>> call(load);
	void *got = nullptr;
	const int err = ts_waitlist_take(w, &got, &decltype(call)::run, &call, d.ns(), cancel);
#if defined(__cpp_exceptions)
	if (call.thrown)
		std::rethrow_exception(call.thrown);
#endif
	if (err == 0)
		out.adopt(w, static_cast<T *>(got));
	return err;
}

} // namespace ts

#endif
