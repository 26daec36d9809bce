/* SPDX-License-Identifier: MIT */
/* libturnstile — umbrella header.  Each part has its own header:
 *   turnstile/common.h     clock, deadlines, ts_strerror, export macro
 *   turnstile/version.h    TS_VERSION_* and ts_version (generated)
 *   turnstile/cancel.h     cancel tokens
 *   turnstile/turnstile.h  bounded, ordered admission (turnstile, pass, claim)
 *   turnstile/set.h        one turnstile per shard, lock-free lookup
 *   turnstile/job.h        a job's claim across calls; ts_wait_turn
 *   turnstile/gate.h       a job's first turn, before pickup
 *   turnstile/waitlist.h   FIFO-fair pool of reusable items
 *   turnstile/async.h      event-loop waiters: notifier, async waits
 */
#ifndef TURNSTILE_H
#define TURNSTILE_H

#include <turnstile/common.h>
#include <turnstile/version.h>
#include <turnstile/cancel.h>
#include <turnstile/turnstile.h>
#include <turnstile/set.h>
#include <turnstile/job.h>
#include <turnstile/gate.h>
#include <turnstile/waitlist.h>
#include <turnstile/async.h>
#include <turnstile/shared.h>

#endif
