# SPDX-License-Identifier: MIT
"""A SCRAM login through pgproxy with Python's client stacks (asyncpg,
psycopg 3, psycopg2; tests/pgproxy_auth.sh runs it): the right password
gives current_user, a wrong one the server's refusal.

usage: login.py STACK PORT USER PASSWORD DATABASE
prints "user NAME" or "refused SQLSTATE-or-none: MESSAGE"; with
PGCLIENT_SSLROOTCERT set, over TLS only (verify-full against that CA: the
certificate names 127.0.0.1)
"""
import os
import ssl
import sys

stack, port, user, password, db = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ca = os.environ.get("PGCLIENT_SSLROOTCERT")  # TLS, verify-full against this CA
host = "127.0.0.1"
sslmode = "verify-full" if ca else "disable"


def name(v):
    """current_user as text: psycopg 3 hands bytes over an SQL_ASCII database"""
    return v.decode() if isinstance(v, bytes) else v


def report(sqlstate, e):
    print(f"refused {sqlstate or 'none'}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")


if stack == "asyncpg":
    import asyncio
    import asyncpg

    async def main():
        try:
            c = await asyncpg.connect(host=host, port=port, user=user, password=password, database=db,
                                      ssl=ssl.create_default_context(cafile=ca) if ca else False,
                                      timeout=10)
        except asyncpg.PostgresError as e:
            return report(e.sqlstate, e)
        print("user", name(await c.fetchval("select current_user")))
        await c.close()
    asyncio.run(main())
elif stack == "psycopg":
    import psycopg
    try:
        with psycopg.connect(host=host, port=port, user=user, password=password, dbname=db,
                             sslmode=sslmode, sslrootcert=ca, connect_timeout=10) as c:
            print("user", name(c.execute("select current_user").fetchone()[0]))
    except psycopg.OperationalError as e:
        report(e.sqlstate, e)
elif stack == "psycopg2":
    import psycopg2
    try:
        c = psycopg2.connect(host=host, port=port, user=user, password=password, dbname=db,
                             sslmode=sslmode, sslrootcert=ca, connect_timeout=10)
        cur = c.cursor()
        cur.execute("select current_user")
        print("user", name(cur.fetchone()[0]))
        c.close()
    except psycopg2.OperationalError as e:
        report(e.pgcode, e)
else:
    sys.exit(f"unknown stack {stack}")
