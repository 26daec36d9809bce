/* SPDX-License-Identifier: MIT */
/* Private: a notifier's doorbell — how a grant made in another process
 * reaches an event loop.  An eventfd cannot be written from outside, so a
 * notifier that waits on a process-shared turnstile binds an abstract
 * Unix datagram socket named after a random 64-bit id, in its epoll set;
 * a waiter slot in the segment carries the id, and whoever grants the slot
 * (in any process attached to it, on this host and in this network
 * namespace) sends one byte there after unlocking. */
#ifndef TS_LIB_DOORBELL_H
#define TS_LIB_DOORBELL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

static inline socklen_t ts_lib_doorbell_address(uint64_t id, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	/* sun_path[0] == 0: the abstract namespace, nothing on disk */
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "libturnstile/%016llx",
			 (unsigned long long)id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

#endif
