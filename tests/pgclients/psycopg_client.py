# SPDX-License-Identifier: MIT
# psycopg 3's typical workload, one transcript (see casekit.py): server-side
# parameters (extended protocol), statements prepared after prepare_threshold
# (5) executions, pipeline mode, COPY.
#   /usr/bin/python3 -B psycopg_client.py HOST PORT DBNAME USER SCHEMA
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402
import psycopg  # noqa: E402

host, port, db, user, S = casekit.args()


def connect(**kw):
    return casekit.track(psycopg.connect(host=host, port=port, dbname=db, user=user,
                           connect_timeout=10, **kw))


def show(v):
    if isinstance(v, memoryview):
        v = bytes(v)
    return f"{type(v).__name__}: {v!r}"


def c_simple(out):
    with connect() as conn:
        out(f"{conn.execute('select 1 as a, %s as b, null as c', ['two']).fetchall()}")
        out(f"{conn.execute('select g, g * g from generate_series(1, 5) g order by g').fetchall()}")
        cur = conn.cursor()
        cur.execute("select 1; select 2 as last")  # no parameters: simple query
        out(f"multi: {cur.fetchall()}")


def c_params(out):
    with connect() as conn:
        r = conn.execute("select %s::int + 1, %s::text, %s, %s::text is null",
                         (41, "café ☕ 日本", None, None)).fetchall()
        out(f"{r}")
        r = conn.execute("select %(a)s || %(b)s", {"a": "x'y", "b": "\\z"}).fetchall()
        out(f"{r}")
        r = conn.execute("select %b, %t", (b"\x00\xff", "text")).fetchall()
        out(f"binary/text params: {r}")


def c_types(out):
    with connect() as conn:
        r = conn.execute("""select 12345.678900::numeric, 1e-20::numeric, date '2024-02-29',
                   timestamp '2024-02-29 13:14:15.123456',
                   timestamptz '2024-02-29 13:14:15+02',
                   '{"k": [1, 2, null], "é": "ü"}'::json, '{"b": 1, "a": 2}'::jsonb,
                   '\\x00ff10'::bytea, true, array[1, null, 3], interval '1 day 2 hours',
                   null::numeric, null::bytea""").fetchone()
        for v in r:
            out(show(v))
        cur = conn.cursor(binary=True)
        r = cur.execute("select %s::bytea, 1.5::numeric, date '2000-01-01', now() > '2000-01-01'",
                        (bytes(range(256)),)).fetchone()
        out(f"binary: {bytes(r[0]) == bytes(range(256))}, {r[1]!r}, {r[2]!r}, {r[3]}")


def c_transactions(out):
    with connect() as conn:
        conn.execute(f"create table {S}.p3_tx (id int primary key, t text)")
        conn.commit()
        with conn.transaction():
            conn.execute(f"insert into {S}.p3_tx values (%s, %s), (%s, %s)", (1, "one", 2, None))
        try:
            with conn.transaction():
                conn.execute(f"insert into {S}.p3_tx values (3, 'rolled back')")
                raise RuntimeError("roll back")
        except RuntimeError:
            out("rolled back")
        try:
            conn.execute(f"insert into {S}.p3_tx values (%s, 'duplicate')", (1,))
        except psycopg.Error as e:
            out(f"duplicate: {casekit.describe(e)}")
        try:
            conn.execute("select 1")
        except psycopg.Error as e:
            out(f"after error: {casekit.describe(e)}")
        conn.rollback()
        with conn.transaction():
            try:
                with conn.transaction():  # a savepoint
                    conn.execute("select 1 / 0")
            except psycopg.Error as e:
                out(f"in savepoint: {casekit.describe(e)}")
            conn.execute(f"insert into {S}.p3_tx values (4, 'after savepoint')")
        out(f"{conn.execute(f'select id, t from {S}.p3_tx order by id').fetchall()}")


def c_prepared(out):
    with connect() as conn:
        conn.autocommit = True
        total = 0
        for i in range(10):  # prepared by the 6th (prepare_threshold 5)
            total += conn.execute("select %s::int * 3 as p3prep", (i,)).fetchone()[0]
        out(f"10 executions, sum {total}")
        for i in range(3):
            r = conn.execute("select %s::text || 'x' as p3explicit", (str(i),), prepare=True).fetchone()
            out(f"prepare=True: {r}")
        with conn.transaction():
            for i in range(8):
                total += conn.execute("select %s::int * 3 as p3prep", (i,)).fetchone()[0]
        out(f"and 8 in a transaction, sum {total}")
        try:
            conn.execute("select %s::int / 0 as p3err", (1,), prepare=True)
        except psycopg.Error as e:
            out(f"prepared error: {casekit.describe(e)}")
        out(f"{conn.execute('select %s::int * 3 as p3prep', (100,)).fetchone()}")


def c_pipeline(out):
    with connect() as conn:
        conn.execute(f"create table {S}.p3_pipe (i int, t text)")
        conn.commit()
        with conn.pipeline():
            for i in range(500):
                conn.execute(f"insert into {S}.p3_pipe values (%s, %s)", (i, f"p{i}"))
            cur = conn.execute(f"select count(*), sum(i) from {S}.p3_pipe")
        out(f"{cur.fetchall()}")
        conn.commit()
        conn.autocommit = True
        with conn.pipeline():
            curs = [conn.execute("select %s::int + 1 as p3pipe", (i,)) for i in range(50)]
        out(f"50 in autocommit: sum {sum(c.fetchone()[0] for c in curs)}")
        try:
            with conn.pipeline():
                conn.execute("select %s::int / 0", (1,))
                conn.execute("select 2")
        except psycopg.Error as e:
            out(f"pipeline error: {casekit.describe(e)}")
        out(f"{conn.execute(f'select count(*) from {S}.p3_pipe').fetchall()}")


def c_executemany(out):
    with connect() as conn:
        conn.execute(f"create table {S}.p3_many (i int, t text)")
        cur = conn.cursor()
        cur.executemany(f"insert into {S}.p3_many values (%s, %s)", [(i, f"r{i}é") for i in range(200)])
        conn.commit()
        out(f"{conn.execute(f'select count(*), sum(i), max(t) from {S}.p3_many').fetchall()}")


def c_copy(out):
    with connect() as conn:
        conn.execute(f"create table {S}.p3_copy (i int, t text, b bytea, d date)")
        cur = conn.cursor()
        with cur.copy(f"copy {S}.p3_copy (i, t, b, d) from stdin") as copy:
            for i in range(1000):
                copy.write_row((i, f"line {i} é", bytes([i % 256]), "2024-01-01"))
            copy.write_row((1000, None, None, None))
        conn.commit()
        n = 0
        s = 0
        with cur.copy(f"copy (select i, t from {S}.p3_copy order by i) to stdout") as copy:
            for row in copy.rows():
                n += 1
                s += int(row[0])
        out(f"copied back {n} rows, sum {s}")
        out(f"{conn.execute(f'select count(*), count(t), sum(get_byte(b, 0)) from {S}.p3_copy').fetchall()}")


def c_loop(out):
    with connect(autocommit=True) as conn:
        total = 0
        for i in range(300):
            total += conn.execute(f"select %s::int * 2 as loop{i % 7}", (i,)).fetchone()[0]
        out(f"300 statements, sum {total}")


def c_latin1_connect(out):
    with connect(client_encoding="LATIN1") as conn:
        out(f"client_encoding: {conn.execute('show client_encoding').fetchone()[0]}, python side: {conn.info.encoding}")
        r = conn.execute("select %s, %s, length(%s), octet_length(convert_to(%s, 'UTF8'))",
                         ("café", "é", "café", "é")).fetchall()
        out(f"{r}")
        out(f"{conn.execute('select chr(233), %s::text = %s', ('café', 'caf' + chr(233))).fetchall()}")


def c_concurrent(out):
    with connect() as setup:
        setup.execute(f"create table {S}.p3_conc (w int, i int, v int)")

    def worker(w):
        bad = 0
        with connect() as conn:
            for i in range(25):
                # the same statement names (_pg3_0, ...) on every connection, each its own text
                conn.execute(f"insert into {S}.p3_conc values (%s, %s, %s::int + {w * 1000})", (w, i, i))
                v = conn.execute(f"select v, {w} as w from {S}.p3_conc where w = %s and i = %s",
                                 (w, i)).fetchone()
                if v != (i + w * 1000, w):
                    bad += 1
                conn.commit()  # (a rollback would make psycopg forget what it prepared)
        return [f"worker {w}: 25 rounds, {bad} wrong"]

    casekit.run_threads(out, worker)
    with connect() as conn:
        out(f"{conn.execute(f'select w, count(*), sum(v) from {S}.p3_conc group by w order by w').fetchall()}")


casekit.run_cases([
    ("simple", c_simple), ("params", c_params), ("types", c_types),
    ("transactions", c_transactions), ("prepared", c_prepared),
    ("pipeline", c_pipeline), ("executemany", c_executemany), ("copy", c_copy),
    ("loop", c_loop), ("latin1_connect", c_latin1_connect), ("concurrent", c_concurrent),
], sys.argv[6:])
