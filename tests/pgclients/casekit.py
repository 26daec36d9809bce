# SPDX-License-Identifier: MIT
# Shared by the Python client programs of tests/pgclients.sh: argument
# parsing and the case runner.  A program prints one transcript: for each
# case a line "== NAME", then its deterministic results (rows, SQLSTATEs;
# never timings).  A case that raises prints "exception: ..." and the next
# case goes on with fresh connections; one that takes longer than
# PGCLIENTS_CASE_TIMEOUT seconds (default 10) prints "timeout" and is left
# behind (its thread is a daemon), so a wedged proxy costs one case, not all;
# after 2 such, the cases left print "not run".
import os
import sys
import threading

CASE_TIMEOUT = float(os.environ.get("PGCLIENTS_CASE_TIMEOUT", "10"))
WORKERS = 4
_open = []  # connections a case made: closed after it (a worker that failed may not have)
_open_lock = threading.Lock()


def track(conn):
    with _open_lock:
        _open.append(conn)
    return conn


def _close_all():
    with _open_lock:
        conns = list(_open)
        _open.clear()
    for c in conns:
        try:
            c.close()
        except Exception:
            pass


def args():
    """argv: HOST PORT DBNAME USER SCHEMA"""
    host, port, db, user, schema = sys.argv[1:6]
    return host, int(port), db, user, schema


def sqlstate(e):
    for attr in ("sqlstate", "pgcode"):
        v = getattr(e, attr, None)
        if v:
            return v
    return None


def describe(e):
    s = sqlstate(e)
    return f"sqlstate {s}" if s else f"{type(e).__name__}"


def run_threads(case_out, fn, n=WORKERS):
    """fn(w) -> list of lines, in n threads at once; their lines in worker order"""
    results = [None] * n

    def body(w):
        try:
            results[w] = fn(w)
        except Exception as e:  # one worker's failure is part of the transcript
            results[w] = [f"worker {w}: exception: {describe(e)}"]

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        for line in r:
            case_out(line)


MAX_TIMEOUTS = 2  # then the other cases are not run: a wedged proxy costs seconds, not minutes
SKIPPED = "not run: 2 cases timed out"


def run_cases(cases, only=None):
    timeouts = 0
    for name, fn in cases:
        if only and name not in only:
            continue
        if timeouts >= MAX_TIMEOUTS:
            print(f"== {name}\n{SKIPPED}")
            continue
        out = []
        done = threading.Event()

        def target(fn=fn, out=out, done=done):
            try:
                fn(out.append)
            except Exception as e:
                out.append(f"exception: {describe(e)}")
            done.set()

        threading.Thread(target=target, daemon=True).start()
        finished = done.wait(CASE_TIMEOUT)
        if finished:
            _close_all()
        else:  # left to the wedged thread
            with _open_lock:
                _open.clear()
        lines = list(out)
        print(f"== {name}")
        for line in lines:
            print(line)
        if not finished:
            print("timeout")
            timeouts += 1
        sys.stdout.flush()
    sys.stdout.flush()
    os._exit(0)  # do not wait for a case left behind
