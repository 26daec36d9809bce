# SPDX-License-Identifier: MIT
# psycopg2's typical workload, one transcript (see casekit.py).
#   /usr/bin/python3 -B psycopg2_client.py HOST PORT DBNAME USER SCHEMA
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402
import psycopg2  # noqa: E402
import psycopg2.extras  # noqa: E402
import io  # noqa: E402

host, port, db, user, S = casekit.args()


def connect(**kw):
    return casekit.track(psycopg2.connect(host=host, port=port, dbname=db, user=user,
                            connect_timeout=10, **kw))


def rows(cur):
    return [tuple(r) for r in cur.fetchall()]


def c_simple(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute("select 1 as a, 'two' as b, null as c")
    out(f"{rows(cur)}")
    cur.execute("select g, g * g from generate_series(1, 5) g order by g")
    out(f"{rows(cur)}")
    cur.execute("select 1; select 2 as last")
    out(f"multi: {rows(cur)}")
    conn.close()


def c_params(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute("select %s::int + 1, %s::text, %s, %s::text is null",
                (41, "café ☕ 日本", None, None))
    out(f"{rows(cur)}")
    cur.execute("select %(a)s || %(b)s", {"a": "x'y", "b": "\\z"})
    out(f"{rows(cur)}")
    conn.close()


def c_types(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute("""select 12345.678900::numeric, 1e-20::numeric, date '2024-02-29',
                   timestamp '2024-02-29 13:14:15.123456',
                   timestamptz '2024-02-29 13:14:15+02',
                   '{"k": [1, 2, null], "é": "ü"}'::json, '{"b": 1, "a": 2}'::jsonb,
                   '\\x00ff10'::bytea, true, array[1, null, 3], interval '1 day 2 hours',
                   null::numeric, null::bytea""")
    r = cur.fetchone()
    for v in r:
        if isinstance(v, memoryview):
            v = bytes(v)
        out(f"{type(v).__name__}: {v!r}")
    cur.execute("select %s::bytea, octet_length(%s::bytea)",
                (psycopg2.Binary(bytes(range(256))), psycopg2.Binary(b"\x00\x01")))
    b, n = cur.fetchone()
    out(f"bytea 256: {bytes(b) == bytes(range(256))}, {n}")
    conn.close()


def c_transactions(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute(f"create table {S}.p2_tx (id int primary key, t text)")
    conn.commit()
    cur.execute(f"insert into {S}.p2_tx values (1, 'one'), (2, null)")
    conn.commit()
    cur.execute(f"insert into {S}.p2_tx values (3, 'rolled back')")
    conn.rollback()
    try:
        cur.execute(f"insert into {S}.p2_tx values (1, 'duplicate')")
    except psycopg2.Error as e:
        out(f"duplicate: {casekit.describe(e)}")
    try:
        cur.execute("select 1")
    except psycopg2.Error as e:
        out(f"after error: {casekit.describe(e)}")
    conn.rollback()
    try:
        cur.execute("select 1 / 0")
    except psycopg2.Error as e:
        out(f"division: {casekit.describe(e)}")
    conn.rollback()
    cur.execute(f"select id, t from {S}.p2_tx order by id")
    out(f"{rows(cur)}")
    conn.commit()
    conn.close()


def c_executemany(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute(f"create table {S}.p2_many (i int, t text)")
    cur.executemany(f"insert into {S}.p2_many values (%s, %s)",
                    [(i, f"r{i}é") for i in range(200)])
    conn.commit()
    cur.execute(f"select count(*), sum(i), max(t) from {S}.p2_many")
    out(f"{rows(cur)}")
    conn.commit()
    conn.close()


def c_named_cursor(out):
    conn = connect()
    cur = conn.cursor(name="p2cursor")
    cur.itersize = 100
    cur.execute("select g, md5(g::text) from generate_series(1, 1000) g order by g")
    n = s = 0
    while True:
        batch = cur.fetchmany(100)
        if not batch:
            break
        n += len(batch)
        s += sum(r[0] for r in batch)
    out(f"fetched {n} rows, sum {s}")
    cur.close()
    conn.commit()
    conn.close()


def c_copy(out):
    conn = connect()
    cur = conn.cursor()
    cur.execute(f"create table {S}.p2_copy (i int, t text)")
    data = "".join(f"{i}\tline {i} é\n" for i in range(1000)) + "1000\t\\N\n"
    cur.copy_expert(f"copy {S}.p2_copy from stdin", io.StringIO(data))
    conn.commit()
    buf = io.StringIO()
    cur.copy_expert(f"copy (select * from {S}.p2_copy order by i) to stdout", buf)
    conn.commit()
    out(f"copied back: {buf.getvalue() == data}, {len(buf.getvalue())} chars")
    cur.execute(f"select count(*), count(t) from {S}.p2_copy")
    out(f"{rows(cur)}")
    conn.commit()
    conn.close()


def c_loop(out):
    conn = connect()
    conn.autocommit = True
    cur = conn.cursor()
    total = 0
    for i in range(300):
        cur.execute("select %s::int * 2", (i,))
        total += cur.fetchone()[0]
    out(f"300 statements, sum {total}")
    conn.close()


def latin1(out, conn):
    cur = conn.cursor()
    cur.execute("show client_encoding")
    out(f"client_encoding: {cur.fetchone()[0]}, python side: {conn.encoding}")
    cur.execute("select %s, %s, length(%s), octet_length(convert_to(%s, 'UTF8'))",
                ("café", "é", "café", "é"))
    out(f"{rows(cur)}")
    cur.execute("select chr(233), 'caf' || chr(233) = %s", ("café",))
    out(f"{rows(cur)}")
    conn.rollback()
    conn.close()


def c_latin1_set(out):
    conn = connect()
    conn.set_client_encoding("LATIN1")
    latin1(out, conn)


def c_latin1_connect(out):
    latin1(out, connect(client_encoding="LATIN1"))


def c_concurrent(out):
    setup = connect()
    setup.cursor().execute(f"create table {S}.p2_conc (w int, i int, v int)")
    setup.commit()

    def worker(w):
        conn = connect()
        try:
            return rounds(conn, w)
        finally:
            conn.close()  # a failed worker lets go of its server connection at once

    def rounds(conn, w):
        cur = conn.cursor()
        bad = 0
        for i in range(25):
            cur.execute(f"insert into {S}.p2_conc values (%s, %s, %s::int + {w * 1000})", (w, i, i))
            cur.execute(f"select v from {S}.p2_conc where w = %s and i = %s", (w, i))
            if cur.fetchone()[0] != i + w * 1000:
                bad += 1
            if i % 2:
                conn.commit()
            else:
                conn.rollback()
        return [f"worker {w}: 25 rounds, {bad} wrong"]

    casekit.run_threads(out, worker)
    cur = setup.cursor()
    cur.execute(f"select w, count(*), sum(v) from {S}.p2_conc group by w order by w")
    out(f"{rows(cur)}")
    setup.commit()
    setup.close()


casekit.run_cases([
    ("simple", c_simple), ("params", c_params), ("types", c_types),
    ("transactions", c_transactions), ("executemany", c_executemany),
    ("named_cursor", c_named_cursor), ("copy", c_copy), ("loop", c_loop),
    ("latin1_set", c_latin1_set), ("latin1_connect", c_latin1_connect),
    ("concurrent", c_concurrent),
], sys.argv[6:])
