# SPDX-License-Identifier: MIT
"""pgproxy's SCRAM login, byte by byte (tests/pgproxy_auth.sh runs it).

A client written here from RFC 5802/7677 (Python's hashlib and hmac, none
of pgproxy's code) logs in through the proxy; then the logins a hostile or
confused client makes: a wrong password, an unknown user, a wrong message
or mechanism, lengths that lie, an oversized message, and a client that
goes quiet mid-exchange. Each must end with the ErrorResponse PostgreSQL
itself would send (severity, SQLSTATE) and a closed connection, or, for
the quiet one, a close within --client-login-timeout.

usage: pgproxy_auth.py PORT USER PASSWORD LOGIN_TIMEOUT_S
"""
import base64
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

PORT, USER, PASSWORD, LOGIN_TIMEOUT = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
failures = 0


def check(cond, what):
    global failures
    if cond:
        print(f"pgproxy_auth.py: ok: {what}")
    else:
        print(f"pgproxy_auth.py: FAIL: {what}")
        failures += 1


def startup(user, database="postgres"):
    body = struct.pack("!i", 196608)
    for k, v in (("user", user), ("database", database)):
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def msg(t, body):
    return t + struct.pack("!i", len(body) + 4) + body


class Conn:
    def __init__(self, user):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=LOGIN_TIMEOUT + 10)
        self.buf = b""
        self.s.sendall(startup(user))

    def read(self):
        """(type, body), or None at end of stream"""
        while True:
            if len(self.buf) >= 5:
                n = struct.unpack("!i", self.buf[1:5])[0]
                if len(self.buf) >= n + 1:
                    t, body = self.buf[:1], self.buf[5:n + 1]
                    self.buf = self.buf[n + 1:]
                    return t, body
            d = self.s.recv(65536)
            if not d:
                return None
            self.buf += d

    def closed(self):
        try:
            return self.read() is None
        except ConnectionResetError:
            return True


def error_fields(body):
    f = {}
    for part in body.split(b"\0"):
        if part:
            f[part[:1].decode()] = part[1:].decode()
    return f


def expect_error(c, code, what, contains=None):
    m = c.read()
    ok = m is not None and m[0] == b"E"
    f = error_fields(m[1]) if ok else {}
    ok = ok and f.get("S") == "FATAL" and f.get("C") == code
    if contains:
        ok = ok and contains in f.get("M", "")
    check(ok and c.closed(), f"{what}: FATAL {code}" + (f" ({f.get('M')})" if f else f" (got {m!r})"))


def sasl_start(c):
    m = c.read()
    ok = m is not None and m[0] == b"R" and struct.unpack("!i", m[1][:4])[0] == 10
    check(ok and b"SCRAM-SHA-256\0" in m[1][4:], "AuthenticationSASL offers SCRAM-SHA-256")


def initial(first, mech=b"SCRAM-SHA-256"):
    return msg(b"p", mech + b"\0" + struct.pack("!i", len(first)) + first)


def scram_login(user, password):
    """the whole exchange: True when AuthenticationOk and ReadyForQuery come"""
    c = Conn(user)
    sasl_start(c)
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n=,r={nonce}"
    c.s.sendall(initial(("n,," + bare).encode()))
    m = c.read()
    if not m or m[0] != b"R" or struct.unpack("!i", m[1][:4])[0] != 11:
        return c, m, None
    server_first = m[1][4:].decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    check(attrs["r"].startswith(nonce) and len(attrs["r"]) > len(nonce), "the server nonce extends ours")
    salt, iters = base64.b64decode(attrs["s"]), int(attrs["i"])
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iters)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored, auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig))
    c.s.sendall(msg(b"p", f"{without_proof},p={base64.b64encode(proof).decode()}".encode()))
    m = c.read()
    if not m or m[0] != b"R" or struct.unpack("!i", m[1][:4])[0] != 12:
        return c, m, (salt, iters)
    want = base64.b64encode(hmac.new(server_key, auth, "sha256").digest()).decode()
    check(m[1][4:].decode() == f"v={want}", "the server's signature proves it knows the secret")
    m = c.read()
    check(m is not None and m[0] == b"R" and struct.unpack("!i", m[1][:4])[0] == 0, "AuthenticationOk")
    while m and m[0] != b"Z":
        m = c.read()
    return c, m, (salt, iters)


# the right password: in, and a query answered
c, m, _ = scram_login(USER, PASSWORD)
check(m is not None and m[0] == b"Z", "a right password logs in")
c.s.sendall(msg(b"Q", b"select 1\0"))
rows = []
while True:
    m = c.read()
    if m is None or m[0] == b"Z":
        break
    rows.append(m[0])
check(b"D" in rows, "and its query is answered")
c.s.sendall(msg(b"X", b""))

# a wrong password, an unknown user: the same answer
c, m, _ = scram_login(USER, PASSWORD + "x")
check(m is not None and m[0] == b"E" and error_fields(m[1]).get("C") == "28P01" and c.closed(),
      "a wrong password: FATAL 28P01 and closed")
c, m, salt1 = scram_login("nobody-here", "whatever")
check(m is not None and m[0] == b"E" and error_fields(m[1]).get("C") == "28P01"
      and error_fields(m[1]).get("M") == 'password authentication failed for user "nobody-here"',
      "an unknown user: the same FATAL 28P01 as a wrong password")
c, m, salt2 = scram_login("nobody-here", "whatever")
check(salt1 is not None and salt1 == salt2, "an unknown user sees the same salt each time")

# clients that send the wrong thing
c = Conn(USER)
sasl_start(c)
c.s.sendall(msg(b"Q", b"select 1\0"))
expect_error(c, "08P01", "a query instead of a SASL response", "expected SASL response")
c = Conn(USER)
sasl_start(c)
c.s.sendall(initial(b"n,,n=,r=abc", b"SCRAM-SHA-1"))
expect_error(c, "08P01", "a mechanism not offered", "invalid SASL authentication mechanism")
c = Conn(USER)
sasl_start(c)
c.s.sendall(msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", 500) + b"n,,n=,r=abc"))
expect_error(c, "08P01", "a SASLInitialResponse whose length lies", "malformed SASLInitialResponse")
c = Conn(USER)
sasl_start(c)
c.s.sendall(msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", -1)))
expect_error(c, "08P01", "a SASLInitialResponse without its message")
c = Conn(USER)
sasl_start(c)
c.s.sendall(initial(b"p=tls-server-end-point,,n=,r=abc"))
expect_error(c, "08P01", "channel binding that was not offered")
c = Conn(USER)
sasl_start(c)
c.s.sendall(initial(b"n,,n=,r=abc"))
m = c.read()
check(m is not None and m[0] == b"R", "server-first for a short client nonce")
c.s.sendall(msg(b"p", b"c=biws,r=abc,p=AAAA"))
expect_error(c, "08P01", "a final message with another nonce", "nonce mismatch")
c = Conn(USER)
sasl_start(c)
c.s.sendall(b"p" + struct.pack("!i", 1 << 20))
expect_error(c, "08P01", "a 1 MiB SASL message announced", "invalid SASL message length")
c = Conn(USER)
sasl_start(c)
c.s.sendall(initial(b"n,,n=,r=" + b"a" * 900))
expect_error(c, "08P01", "a 900-byte client nonce", "too long")

# quiet mid-exchange: closed by --client-login-timeout
c = Conn(USER)
sasl_start(c)
t0 = time.monotonic()
try:
    last = None
    while (m := c.read()) is not None:
        last = m
    closed = last is not None and last[0] == b"E" and error_fields(last[1]).get("C") == "08006"
except ConnectionResetError:
    closed = True
took = time.monotonic() - t0
check(closed and took < LOGIN_TIMEOUT + 5, f"a client quiet mid-exchange is closed ({took:.1f} s)")

sys.exit(1 if failures else 0)
