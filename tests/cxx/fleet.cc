// SPDX-License-Identifier: MIT
// <turnstile/fleet.h> from C++: every function, with bad input and with an
// etcd that is not there (nothing listens on port 1).
#include <turnstile.h>
#include <turnstile/fleet.h>

#include <cerrno>
#include <cstdio>

int main()
{
	ts_turnstile *t = ts_turnstile_new(4);
	ts_fleet_config cfg = {};
	cfg.endpoints = "http://127.0.0.1:1";
	cfg.key = "/cxx/fleet";
	cfg.ceiling = 4;
	errno = 0;
	if (ts_fleet_join(nullptr, &cfg) || errno != EINVAL)
		return std::puts("join(NULL local) is not EINVAL"), 1;
	cfg.key = "relative";
	if (ts_fleet_join(t, &cfg) || errno != EINVAL)
		return std::puts("a key without '/' is not EINVAL"), 1;
	cfg.key = "/cxx/fleet";
	cfg.lease_ns = 1000;
	if (ts_fleet_join(t, &cfg) || errno != EINVAL)
		return std::puts("a lease below the minimum is not EINVAL"), 1;
	cfg.lease_ns = 0;
	if (ts_fleet_join(t, &cfg) || errno != ECONNREFUSED)
		return std::printf("no etcd: errno %d, not ECONNREFUSED\n", errno), 1;
	int64_t share = -1, members = -1;
	if (ts_fleet_share(nullptr, &share, &members) != EINVAL || ts_fleet_resize(nullptr, 3) != EINVAL)
		return std::puts("NULL fleet is not EINVAL"), 1;
	if (ts_fleet_demand_from(nullptr, t) != EINVAL || ts_fleet_members(nullptr, nullptr, nullptr) != -EINVAL)
		return std::puts("NULL fleet is not EINVAL (demand_from, members)"), 1;
	ts_fleet_leave(nullptr);
	ts_turnstile_free(t);
	return 0;
}
