/* SPDX-License-Identifier: MIT */
/* tests/fleet.sh's hands on the board (fleet_board.h):
 *   fleet_board FILE init CEILING
 *   fleet_board FILE get FIELD [SLOT]        ceiling holders violations worst
 *                                            resized; per slot: active share
 *                                            members admitted pid left
 *                                            holding requests closings watches
 *                                            listed listed_self
 *                                            listed_shares listed_waiting
 *   fleet_board FILE set FIELD VALUE [SLOT]  ceiling resize_to; active
 *   fleet_board FILE shares                  "slot:share ..." and the sum
 *   fleet_board FILE dead SLOT               a member killed with -9: its
 *                                            holders (gone with it) leave
 *                                            the count */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fleet_board.h"

static _Atomic int64_t *field(struct board *b, const char *name, int slot)
{
	struct board_member *m = &b->m[slot];
	const struct {
		const char *name;
		_Atomic int64_t *at;
	} f[] = { { "ceiling", &b->ceiling },	  { "holders", &b->holders },
		  { "violations", &b->violations }, { "worst", &b->worst },
		  { "resize_to", &b->resize_to },   { "resized", &b->resized },
		  { "active", &m->active },	    { "share", &m->share },
		  { "members", &m->members },	    { "admitted", &m->admitted },
		  { "pid", &m->pid },		    { "left", &m->left },
		  { "holding", &m->holding },	    { "requests", &m->requests },
		  { "closings", &m->closings },	    { "watches", &m->watches },
		  { "listed", &m->listed },	    { "listed_self", &m->listed_self },
		  { "listed_shares", &m->listed_shares },
		  { "listed_waiting", &m->listed_waiting } };
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (!strcmp(f[i].name, name))
			return f[i].at;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 64;
	int fd = open(argv[1], O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(struct board)) < 0)
		return perror(argv[1]), 1;
	struct board *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED)
		return perror("mmap"), 1;
	if (!strcmp(argv[2], "init") && argc == 4) {
		memset(b, 0, sizeof(*b));
		atomic_store(&b->ceiling, atoll(argv[3]));
		return 0;
	}
	if (!strcmp(argv[2], "shares")) {
		int64_t sum = 0;
		for (int i = 0; i < BOARD_MEMBERS; i++)
			if (atomic_load(&b->m[i].pid) && !atomic_load(&b->m[i].left)) {
				printf("%d:%lld ", i, (long long)atomic_load(&b->m[i].share));
				sum += atomic_load(&b->m[i].share);
			}
		printf("sum=%lld\n", (long long)sum);
		return 0;
	}
	if (!strcmp(argv[2], "dead") && argc == 4) {
		struct board_member *m = &b->m[atoi(argv[3]) % BOARD_MEMBERS];
		atomic_fetch_sub(&b->holders, atomic_exchange(&m->holding, 0));
		atomic_store(&m->left, 1);
		return 0;
	}
	int get = !strcmp(argv[2], "get"), set = !strcmp(argv[2], "set");
	if ((!get && !set) || argc < 4)
		return 64;
	int slot = argc > 4 + set ? atoi(argv[4 + set]) : 0;
	_Atomic int64_t *at = slot >= 0 && slot < BOARD_MEMBERS ? field(b, argv[3], slot) : NULL;
	if (!at)
		return fprintf(stderr, "fleet_board: no field %s\n", argv[3]), 64;
	if (get)
		printf("%lld\n", (long long)atomic_load(at));
	else
		atomic_store(at, atoll(argv[4]));
	return 0;
}
