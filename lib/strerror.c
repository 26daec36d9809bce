/* SPDX-License-Identifier: MIT */
/* What each result of the library means, in the library's words. */
#include <turnstile/common.h>
#include <turnstile/async.h>

#include <errno.h>
#include <string.h>

TS_API const char *ts_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case TS_CREATE:
		return "nothing ready: a creation slot is the caller's, to make an item";
	case EINVAL:
		return "invalid argument: a required object is NULL or a value is out of range";
	case ENOMEM:
		return "out of memory";
	case ETIMEDOUT:
		return "deadline passed before a pass or item was granted";
	case ECANCELED:
		return "cancel token fired before a pass or item was granted";
	case ESHUTDOWN:
		return "closed: the turnstile, set or waitlist was closed";
	case EAGAIN:
		return "too many waiters: the waitlist's waiter cap, or a shared turnstile's max_waiters, is reached";
	case EBUSY:
		return "busy: a wait is still pending on the node or the notifier, or a live process is attached to the shared turnstile";
	case EINPROGRESS:
		return "queued: the outcome is delivered later, to the callback";
	case ENOENT:
		return "not pending: the node has no wait to withdraw";
	case EUSERS:
		return "too many processes: the shared turnstile's max_processes are attached";
	case EPROTO:
		return "another layout: the shared turnstile's file was laid out by another layout version";
	case EALREADY:
		return "already completed: the wait's pass, item or slot was handed on";
	default: {
		/* Any other value is a load function's own error.  strerrordesc_np
		 * is thread-safe (strerror need not be); NULL when unknown. */
		const char *d = err > 0 ? strerrordesc_np(err) : NULL;
		return d ? d : "unknown error";
	}
	}
}
