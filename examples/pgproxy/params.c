/* SPDX-License-Identifier: MIT */
/* pgproxy: client parameters, tracked as pgbouncer tracks them.
 *
 * Server connections are shared, so a parameter a client set (in its
 * startup packet or with SET) must not reach the next client, and must
 * still hold for this client on whichever connection runs its next
 * transaction.  Each client keeps the values it wants, each server
 * connection the values it has; before a client's transaction runs on a
 * connection, the SETs that take one to the other go first (client.c), as
 * one simple query whose answers are not relayed.  The values are the
 * server's own spelling: a ParameterStatus (after a SET, the client's or
 * ours) updates both sides.  extra_float_digits is not reported by the
 * server: its startup value is applied, a later SET of it is not tracked. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "pgproxy.h"

static const struct {
	const char *name;
	bool reported;
} tracked[NPARAMS] = {
	[PAR_CLIENT_ENCODING] = { "client_encoding", true },
	[PAR_DATESTYLE] = { "DateStyle", true },
	[PAR_TIMEZONE] = { "TimeZone", true },
	[PAR_INTERVALSTYLE] = { "IntervalStyle", true },
	[PAR_SCS] = { "standard_conforming_strings", true },
	[PAR_APPNAME] = { "application_name", true },
	[PAR_EXTRA_FLOAT_DIGITS] = { "extra_float_digits", false },
};

int param_lookup(const char *name)
{
	for (int p = 0; p < NPARAMS; p++)
		if (!strcasecmp(name, tracked[p].name)) /* GUC names ignore case */
			return p;
	return -1;
}

const char *param_name(int p) { return tracked[p].name; }
bool param_reported(int p) { return tracked[p].reported; }

void param_store(struct params *ps, int p, const char *v, size_t n)
{
	if (n >= PARAM_LEN)
		n = PARAM_LEN - 1;
	memcpy(ps->v[p], v, n);
	ps->v[p][n] = 0;
	ps->set[p] = true;
}

/* Appends "SET name TO 'value';" (E'' when the value has a backslash, so
 * the text means the same whatever standard_conforming_strings is). */
static bool add_set(char *sql, size_t n, size_t *at, const char *name, const char *v)
{
	bool esc = strchr(v, '\\') != NULL;
	int w = snprintf(sql + *at, n - *at, "SET %s TO %s'", name, esc ? "E" : "");
	if (w < 0 || (size_t)w >= n - *at)
		return false;
	*at += (size_t)w;
	for (; *v; v++) {
		if (*at + 3 >= n)
			return false;
		if (*v == '\'' || *v == '\\')
			sql[(*at)++] = *v;
		sql[(*at)++] = *v;
	}
	w = snprintf(sql + *at, n - *at, "';");
	if (w < 0 || (size_t)w >= n - *at)
		return false;
	*at += (size_t)w;
	return true;
}

bool params_diff_sql(const struct params *want, const struct params *have, char *sql, size_t n)
{
	size_t at = 0;
	sql[0] = 0;
	for (int p = 0; p < NPARAMS; p++) {
		if (want->set[p]) {
			if (have->set[p] && !strcmp(want->v[p], have->v[p]))
				continue;
			if (!add_set(sql, n, &at, tracked[p].name, want->v[p]))
				return false;
		} else if (have->set[p] && !tracked[p].reported) {
			int w = snprintf(sql + at, n - at, "RESET %s;", tracked[p].name);
			if (w < 0 || (size_t)w >= n - at)
				return false;
			at += (size_t)w;
		}
	}
	return true;
}

bool startup_param_ignored(const char *name)
{
	size_t len = strlen(name);
	for (const char *s = P.cfg.ignore_params; *s;) {
		const char *comma = strchr(s, ',');
		size_t n = comma ? (size_t)(comma - s) : strlen(s);
		if (n == len && !strncasecmp(s, name, n))
			return true;
		s += n + (comma != NULL);
	}
	return false;
}
