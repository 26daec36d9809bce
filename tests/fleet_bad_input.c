/* SPDX-License-Identifier: MIT */
/* libturnstile-fleet's bad input, as <turnstile/fleet.h> documents it: a
 * clear errno before any network call, never a crash or a hang; a
 * process-shared local is refused (ENOTSUP); no etcd listening is
 * ECONNREFUSED within the call's timeout, and leaves the local turnstile
 * as it was. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <turnstile/fleet.h>
#include <turnstile/shared.h>

#include "testutil.h"

static ts_fleet_config good(void)
{
	/* port 1 on loopback: nothing listens there */
	return (ts_fleet_config){ "http://127.0.0.1:1", "/bad-input/db", "m", 4, 0 };
}

static void refused(ts_turnstile *local, ts_fleet_config cfg, int expected)
{
	errno = 0;
	cr_assert_null(ts_fleet_join(local, &cfg));
	cr_assert_eq(errno, expected, "errno %d, expected %d", errno, expected);
}

Test(fleet_bad_input, join_refuses_each_bad_field_with_einval)
{
	ts_turnstile *t = ts_turnstile_new(0);
	ts_fleet_config c;

	errno = 0;
	cr_assert_null(ts_fleet_join(t, NULL));
	cr_assert_eq(errno, EINVAL);
	refused(NULL, good(), EINVAL);
	c = good(), c.endpoints = NULL, refused(t, c, EINVAL);
	c = good(), c.endpoints = "", refused(t, c, EINVAL);
	c = good(), c.key = NULL, refused(t, c, EINVAL);
	c = good(), c.key = "no-slash", refused(t, c, EINVAL);
	char long_key[300];
	memset(long_key, 'k', sizeof(long_key) - 1);
	long_key[0] = '/';
	long_key[sizeof(long_key) - 1] = 0;
	c = good(), c.key = long_key, refused(t, c, EINVAL);
	c = good(), c.ceiling = -1, refused(t, c, EINVAL);
	c = good(), c.ceiling = TS_CONCURRENCY_MAX + 1, refused(t, c, EINVAL);
	c = good(), c.lease_ns = TS_FLEET_LEASE_MIN_NS - 1, refused(t, c, EINVAL);
	c = good(), c.lease_ns = TS_FLEET_LEASE_MAX_NS + 1, refused(t, c, EINVAL);
	c = good(), c.member = "", refused(t, c, EINVAL);
	c = good(), c.member = "a/b", refused(t, c, EINVAL);
	c = good(), c.member = "a\"b", refused(t, c, EINVAL);
	cr_assert_eq(ts_turnstile_ceiling(t), 0);
	ts_turnstile_free(t);
}

Test(fleet_bad_input, join_refuses_a_process_shared_local_with_enotsup)
{
	int fd = memfd_create("fleet-bad-input", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ts_shared_format(fd, 3, NULL), 0);
	ts_turnstile *t = ts_shared_attach(fd);
	cr_assert_not_null(t);
	refused(t, good(), ENOTSUP);
	cr_assert_eq(ts_turnstile_ceiling(t), 3, "a refused join changed the turnstile");
	ts_turnstile_free(t);
	close(fd);
}

Test(fleet_bad_input, join_with_no_etcd_listening_is_econnrefused_and_leaves_local_alone)
{
	ts_turnstile *t = ts_turnstile_new(5);
	int64_t start = ts_now_ns();
	refused(t, good(), ECONNREFUSED);
	/* a call waits at most a sixth of the (default 5 s) lease */
	cr_assert_lt(ts_now_ns() - start, (int64_t)5 * 1000000000, "join hung");
	cr_assert_eq(ts_turnstile_ceiling(t), 5);
	ts_pass p;
	static const ts_claim mine = { 0, 0, 0 };
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), 0,
		     "a failed join left the turnstile guarded");
	ts_pass_return(&p);
	ts_turnstile_free(t);
}

Test(fleet_bad_input, the_other_calls_refuse_null_and_bad_values)
{
	int64_t share = 7, members = 7;
	cr_assert_eq(ts_fleet_resize(NULL, 1), EINVAL);
	cr_assert_eq(ts_fleet_share(NULL, &share, &members), EINVAL);
	cr_assert_eq(share, 7, "a refused call wrote its output");
	cr_assert_eq(ts_fleet_demand_from(NULL, NULL), EINVAL);
	cr_assert_eq(ts_fleet_members(NULL, NULL, NULL), -EINVAL);
	ts_fleet_leave(NULL); /* nothing to do, and no crash */
}
