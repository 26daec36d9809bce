/* SPDX-License-Identifier: MIT */
/* pgproxy: what a loop watches.  Every watched object starts with a
 * struct watch, which epoll's data.ptr points at; a closed one stays
 * allocated until the loop's current batch of events is done (an event
 * already returned for it is then seen as stale, not as freed memory). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "pgproxy.h"

void watch_set(struct watch *w, uint32_t mask)
{
	if (w->mask == mask || w->fd < 0)
		return;
	struct epoll_event ev = { .events = mask, .data.ptr = w };
	int op = !w->mask ? EPOLL_CTL_ADD : !mask ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
	if (epoll_ctl(w->loop->ep, op, w->fd, &ev) != 0) {
		/* only a bug gets here: say so loudly rather than hang */
		fprintf(stderr, "pgproxy: epoll_ctl(%d, fd %d): %s\n", op, w->fd, strerror(errno));
		abort();
	}
	w->mask = mask;
}

void watch_close(struct watch *w)
{
	watch_set(w, 0);
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	w->dead = true;
	w->zombie_next = w->loop->zombies;
	w->loop->zombies = w;
}
