/* SPDX-License-Identifier: MIT */
/* The board that tests/fleet.sh's members share (a mapped file): the
 * holders across all members, and what each member reports. */
#ifndef TS_TESTS_FLEET_BOARD_H
#define TS_TESTS_FLEET_BOARD_H

#include <stdatomic.h>
#include <stdint.h>

#define BOARD_MEMBERS 8

struct board_member {
	_Atomic int64_t active;   /* clients with work (the test writes it) */
	_Atomic int64_t share, members, admitted, pid, left;
	_Atomic int64_t holding;  /* its part of holders */
	_Atomic int64_t requests; /* sent to etcd so far */
	_Atomic int64_t closings; /* times its clock failed it closed (rule 3) */
	_Atomic int64_t watches;  /* times its watch of the keys was set up */
	/* ts_fleet_members, last call: members told, how many were itself,
	 * their shares summed, callers queued in all of them */
	_Atomic int64_t listed, listed_self, listed_shares, listed_waiting;
	_Atomic int slot;
};

struct board {
	_Atomic int64_t ceiling;    /* what admissions are judged against */
	_Atomic int64_t holders;    /* passes held now, all members */
	_Atomic int64_t violations; /* admissions that found holders > ceiling */
	_Atomic int64_t worst;
	_Atomic int64_t resize_to, resized; /* member 0 runs ts_fleet_resize */
	struct board_member m[BOARD_MEMBERS];
};

#endif
