# SPDX-License-Identifier: MIT
# asyncpg's typical workload, one transcript (see casekit.py).  asyncpg
# prepares a named statement for every query with results or parameters
# (its statement cache), uses the binary format, COPY for
# copy_records_to_table.
#   /usr/bin/python3 -B asyncpg_client.py HOST PORT DBNAME USER SCHEMA
import asyncio
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402
import asyncpg  # noqa: E402
import datetime  # noqa: E402
import decimal  # noqa: E402

host, port, db, user, S = casekit.args()


OPEN = []  # connections a case made: closed after it (a worker that failed may not have)


async def connect(**kw):
    conn = await asyncpg.connect(host=host, port=port, database=db, user=user, timeout=10, **kw)
    OPEN.append(conn)
    return conn


def rec(rows):
    return [tuple(r) for r in rows]


async def c_simple(out):
    conn = await connect()
    out(f"{rec(await conn.fetch('select 1 as a, $1::text as b, null as c', 'two'))}")
    out(f"{rec(await conn.fetch('select g, g * g from generate_series(1, 5) g order by g'))}")
    out(f"fetchval: {await conn.fetchval('select 42')}")
    out(f"execute (simple query): {await conn.execute('select 1; select 2')}")
    await conn.close()


async def c_params(out):
    conn = await connect()
    r = await conn.fetchrow("select $1::int + 1, $2::text, $3::text, $3::text is null",
                            41, "café ☕ 日本", None)
    out(f"{tuple(r)}")
    r = await conn.fetchrow("select $1::text || $2::text", "x'y", "\\z")
    out(f"{tuple(r)}")
    await conn.close()


async def c_types(out):
    conn = await connect()
    r = await conn.fetchrow("""select 12345.678900::numeric, 1e-20::numeric, date '2024-02-29',
                   timestamp '2024-02-29 13:14:15.123456',
                   timestamptz '2024-02-29 13:14:15+02',
                   '{"k": [1, 2, null], "é": "ü"}'::json, '{"b": 1, "a": 2}'::jsonb,
                   '\\x00ff10'::bytea, true, array[1, null, 3], interval '1 day 2 hours',
                   null::numeric, null::bytea, 'café'::varchar, 1.5::float8""")
    for v in r:
        out(f"{type(v).__name__}: {v!r}")
    r = await conn.fetchrow("select $1::bytea, $2::numeric, $3::date, $4::timestamp, $5::jsonb",
                            bytes(range(256)), decimal.Decimal("3.14159"), datetime.date(1999, 12, 31),
                            datetime.datetime(2000, 1, 1, 0, 0, 1), '{"x": "é"}')
    out(f"params back: {r[0] == bytes(range(256))}, {r[1]!r}, {r[2]!r}, {r[3]!r}, {r[4]!r}")
    await conn.close()


async def c_transactions(out):
    conn = await connect()
    await conn.execute(f"create table {S}.apg_tx (id int primary key, t text)")
    async with conn.transaction():
        await conn.execute(f"insert into {S}.apg_tx values ($1, $2), ($3, $4)", 1, "one", 2, None)
    try:
        async with conn.transaction():
            await conn.execute(f"insert into {S}.apg_tx values (3, 'rolled back')")
            raise RuntimeError("roll back")
    except RuntimeError:
        out("rolled back")
    tr = conn.transaction()
    await tr.start()
    try:
        await conn.execute(f"insert into {S}.apg_tx values ($1, 'duplicate')", 1)
    except asyncpg.PostgresError as e:
        out(f"duplicate: {casekit.describe(e)}")
    try:
        await conn.fetch("select 1")
    except asyncpg.PostgresError as e:
        out(f"after error: {casekit.describe(e)}")
    await tr.rollback()
    async with conn.transaction():
        try:
            async with conn.transaction():  # a savepoint
                await conn.fetch("select 1 / 0")
        except asyncpg.PostgresError as e:
            out(f"in savepoint: {casekit.describe(e)}")
        await conn.execute(f"insert into {S}.apg_tx values (4, 'after savepoint')")
    out(f"{rec(await conn.fetch(f'select id, t from {S}.apg_tx order by id'))}")
    await conn.close()


async def c_prepared(out):
    conn = await connect()
    st = await conn.prepare("select $1::int * 3 as apgprep")
    total = 0
    for i in range(10):
        total += await st.fetchval(i)
    out(f"explicit prepare, 10 executions, sum {total}")
    total = 0
    for i in range(10):  # the statement cache: prepared once, reused
        total += await conn.fetchval("select $1::int * 5 as apgcache", i)
    out(f"statement cache, 10 executions, sum {total}")
    async with conn.transaction():
        total = 0
        for i in range(10):
            total += await st.fetchval(i)
        out(f"in a transaction, sum {total}")
    try:
        await conn.fetchval("select $1::int / 0 as apgerr", 1)
    except asyncpg.PostgresError as e:
        out(f"error: {casekit.describe(e)}")
    out(f"after: {await st.fetchval(100)}")
    await conn.close()


async def c_executemany(out):
    conn = await connect()
    await conn.execute(f"create table {S}.apg_many (i int, t text)")
    await conn.executemany(f"insert into {S}.apg_many values ($1, $2)", [(i, f"r{i}é") for i in range(200)])
    out(f"{rec(await conn.fetch(f'select count(*), sum(i), max(t) from {S}.apg_many'))}")
    await conn.close()


async def c_copy(out):
    conn = await connect()
    await conn.execute(f"create table {S}.apg_copy (i int, t text, b bytea, d date)")
    records = [(i, f"line {i} é", bytes([i % 256]), datetime.date(2024, 1, 1)) for i in range(1000)]
    records.append((1000, None, None, None))
    r = await conn.copy_records_to_table("apg_copy", schema_name=S, records=records)
    out(f"copy_records_to_table: {r}")
    buf = io.BytesIO()
    r = await conn.copy_from_query(f"select i, t from {S}.apg_copy order by i", output=buf)
    out(f"copy_from_query: {r}, {len(buf.getvalue())} bytes")
    out(f"{rec(await conn.fetch(f'select count(*), count(t), sum(get_byte(b, 0)) from {S}.apg_copy'))}")
    await conn.close()


async def c_cursor(out):
    conn = await connect()
    async with conn.transaction():
        n = s = 0
        async for r in conn.cursor("select g from generate_series(1, 1000) g order by g", prefetch=100):
            n += 1
            s += r[0]
        out(f"cursor: {n} rows, sum {s}")
        cur = await conn.cursor("select g from generate_series(1, 100) g order by g")
        out(f"fetch 5: {[r[0] for r in await cur.fetch(5)]}")
    await conn.close()


async def c_loop(out):
    conn = await connect()
    total = 0
    for i in range(300):
        total += await conn.fetchval(f"select $1::int * 2 as loop{i % 7}", i)
    out(f"300 statements, sum {total}")
    await conn.close()


async def c_concurrent(out):
    setup = await connect()
    await setup.execute(f"create table {S}.apg_conc (w int, i int, v int)")

    async def worker(w):
        conn = await connect()
        try:
            return await rounds(conn, w)
        finally:
            conn.terminate()  # a failed worker lets go of its server connection at once

    async def rounds(conn, w):
        bad = 0
        for i in range(25):
            # the same statement names (__asyncpg_stmt_N__) on every connection, each its own text
            async with conn.transaction():
                await conn.execute(f"insert into {S}.apg_conc values ($1, $2, $2 + {w * 1000})", w, i)
                v = await conn.fetchrow(f"select v, {w} as w from {S}.apg_conc where w = $1 and i = $2", w, i)
            if tuple(v) != (i + w * 1000, w):
                bad += 1
            v = await conn.fetchval(f"select $1::int + {w}", i)  # out of a transaction
            if v != i + w:
                bad += 1
        return [f"worker {w}: 25 rounds, {bad} wrong"]

    async def guarded(w):
        try:
            return await worker(w)
        except Exception as e:
            return [f"worker {w}: exception: {casekit.describe(e)}"]

    for lines in await asyncio.gather(*(guarded(w) for w in range(casekit.WORKERS))):
        for line in lines:
            out(line)
    out(f"{rec(await setup.fetch(f'select w, count(*), sum(v) from {S}.apg_conc group by w order by w'))}")
    await setup.close()


CASES = [
    ("simple", c_simple), ("params", c_params), ("types", c_types),
    ("transactions", c_transactions), ("prepared", c_prepared),
    ("executemany", c_executemany), ("copy", c_copy), ("cursor", c_cursor),
    ("loop", c_loop), ("concurrent", c_concurrent),
]


async def main():
    only = sys.argv[6:]
    timeouts = 0
    for name, fn in CASES:
        if only and name not in only:
            continue
        if timeouts >= casekit.MAX_TIMEOUTS:
            print(f"== {name}\n{casekit.SKIPPED}")
            continue
        lines = []
        try:
            await asyncio.wait_for(fn(lines.append), casekit.CASE_TIMEOUT)
        except asyncio.TimeoutError:
            lines.append("timeout")
            timeouts += 1
        except Exception as e:
            lines.append(f"exception: {casekit.describe(e)}")
        for conn in OPEN:
            if not conn.is_closed():
                conn.terminate()
        OPEN.clear()
        print(f"== {name}")
        for line in lines:
            print(line)
        sys.stdout.flush()


asyncio.run(main())
os._exit(0)
