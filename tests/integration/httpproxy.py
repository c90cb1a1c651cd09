#!/usr/bin/python3
"""The tests' one HTTP proxy: in front of an S3-compatible server (s3rver), it
forwards HTTP/1.1 with keep-alive, logs the head of every request, counts requests in
flight, and misbehaves on demand as object storage does.

As a class in the test's process (test_s3.py, test_s3_robust.py):

    p = Proxy(upstream_port, target=lambda r: "/records/" in r.path)
    ... pcrfs p.url("/bucket/prefix") ...
    p.mode = "trickle"; p.requests(lambda r: r.method == "GET"); p.reset(); p.close()

As a program, e.g. inside a network namespace of its own (test_multinode.py):

    httpproxy.py --listen HOST:PORT --upstream HOST:PORT [--log FILE]

prints "listening HOST:PORT" once it accepts (port 0: one the kernel chose) and runs
until SIGTERM or SIGINT; --log gets one line per request (read_log() reads it back).

Each client connection has one upstream connection of its own, opened at its first
request and kept while both sides keep alive, so the server sees the client's
connections one for one. Headers pass unchanged (a SigV4 signature covers Host), so
s3:// and http:// stores both work through it. What a request is logged as (Request):
when its head arrived (time.monotonic(), a clock every network namespace shares), the
connection (numbered from 1 in accept order), the client's address, method, path,
Range (None without one, blanks removed) and the status answered (None while under
way; 0 when none was: hung, cut, or the server unreachable).

Faults (attributes, read as each request goes; reset() restores them all) act on the
requests the predicate @target selects (default: every request):
  storm_until     until this time.monotonic() instant, answer 503 SlowDown (with
                  Retry-After: retry_after when that is not None)
  mode "pass"     forward
       "hang"     answer nothing; the connection closes at reset(), close() or 60 s
       "norange"  forward without the Range header (the whole object comes back)
       "badsize"  a HEAD answered with a Content-Length one byte too large
       "corrupt"  flip the middle byte of a 206 body longer than corrupt_min, for the
                  next corrupt_left such answers
       "trickle"  send a body 8 bytes every 0.25 s (at most 30 s, then cut)
       "cap"      send a body at cap_bps bytes/s per connection (at most 60 s, then
                  cut); cap_bps is read as it goes, so it can change mid-body
  delay           seconds each request waits before it is answered (reset() ends the
                  waits under way)
A body cut short, a hang ended and an unreachable server close the client's connection
(what a client sees as "connection lost"). reset() also ends every hang, trickle and
capped body under way.

Counted (the predicate @counted, default every request): a request is in flight from
the arrival of its head until its answer starts, after the delay, so a client that
sends its next request once it has the last byte of one is never counted twice;
inflight and max_inflight (the most at once) say how many. sent[path] holds the body
bytes the server answered GETs of path with (the Content-Length, when given, as the
answer starts: a body the client drops midway counts whole).

Every wait is bounded: a client idle for 120 s, or the server silent for 30 s, closes
the connection.
"""

import argparse
import dataclasses
import signal
import socket
import sys
import threading
import time

HEAD_MAX = 64 * 1024  # no request or response head of ours is this long
CHUNK = 64 * 1024
CLIENT_IDLE = 120.0  # seconds a client connection may wait for its next request
UPSTREAM_TIMEOUT = 30.0  # connect, and each wait for the server's bytes
HANG_MAX = 60.0
TRICKLE = (8, 0.25, 30.0)  # mode "trickle": bytes per write, seconds between, at most
CAP_SLICE, CAP_MAX = 8192, 60.0  # mode "cap": bytes per write, seconds at most

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


@dataclasses.dataclass
class Request:
    """One request as the proxy saw it (the module's docstring says each field)."""
    t: float
    conn: int
    client: str
    method: str
    path: str
    range: str = None
    status: int = None


def _field(s):
    """@s as one blank-free field of a log line (bytes a client sent are untrusted)."""
    return "".join(c if " " < c < "\x7f" else "%%%02X" % (ord(c) & 0xFF) for c in s) or "-"


def log_line(r):
    """The line of --log for @r: "time conn client method range path"."""
    return "%.6f %d %s %s %s %s\n" % (r.t, r.conn, _field(r.client), _field(r.method),
                                      _field(r.range or "-"), _field(r.path))


def read_log(path):
    """The Requests of a --log file, in its order ([] while it does not exist); the
    statuses are not in it (None)."""
    out = []
    try:
        with open(path, encoding="latin-1") as f:
            for ln in f:
                p = ln.rstrip("\n").split(" ", 5)
                if len(p) == 6 and ln.endswith("\n"):  # (not a line being written)
                    out.append(Request(float(p[0]), int(p[1]), p[2], p[3], p[5],
                                       None if p[4] == "-" else p[4]))
    except OSError:
        pass
    return out


def hostport(s):
    host, _, port = s.rpartition(":")
    return host or "127.0.0.1", int(port)


class Closed(Exception):
    """The connection ended (or must end) before the exchange did."""


class Conn:
    """A socket with a read buffer: HTTP heads and bodies read from it."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        d = self.sock.recv(CHUNK)
        if not d:
            raise Closed("closed by the peer")
        self.buf += d

    def head(self, at_start=False):
        """(first line, [(name, value)]) of the next head; None if the peer closed
        cleanly before its first byte and @at_start."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self.buf) > HEAD_MAX:
                raise Closed("a head over %d bytes" % HEAD_MAX)
            try:
                self.fill()
            except Closed:
                if at_start and not self.buf:
                    return None
                raise
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        self.buf = self.buf[end + 4:]
        hdrs = []
        for ln in lines[1:]:
            k, sep, v = ln.partition(":")
            if sep:
                hdrs.append((k.strip(), v.strip()))
        return lines[0], hdrs

    def take(self, n):
        """Up to @n buffered or newly received bytes (at least one)."""
        if not self.buf:
            self.fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > HEAD_MAX:
                raise Closed("a chunk line over %d bytes" % HEAD_MAX)
            self.fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln + b"\r\n"

    def body(self, framing):
        """The raw bytes of a body as they arrive, framing included (chunked bodies
        pass as they are): @framing is an int (Content-Length), "chunked" or "close"
        (until the peer closes)."""
        if framing == "close":
            while True:
                try:
                    yield self.take(CHUNK)
                except Closed:
                    return
        if framing == "chunked":
            while True:
                ln = self.line()
                yield ln
                try:
                    n = int(ln.split(b";")[0], 16)
                except ValueError:
                    raise Closed("a bad chunk size")
                if n == 0:  # trailers, up to the empty line
                    while ln != b"\r\n":
                        ln = self.line()
                        yield ln
                    return
                left = n + 2  # the data and its CRLF
                while left:
                    d = self.take(min(left, CHUNK))
                    left -= len(d)
                    yield d
        left = framing
        while left > 0:
            d = self.take(min(left, CHUNK))
            left -= len(d)
            yield d


def header(hdrs, name):
    name = name.lower()
    for k, v in hdrs:
        if k.lower() == name:
            return v
    return None


def framing_of(hdrs, request, method=None, status=None):
    """How the body after a head with @hdrs is delimited (0: no body)."""
    if not request and (method == "HEAD" or status in (204, 304) or 100 <= status < 200):
        return 0
    if "chunked" in (header(hdrs, "Transfer-Encoding") or "").lower():
        return "chunked"
    n = header(hdrs, "Content-Length")
    if n is not None:
        try:
            return max(0, int(n))
        except ValueError:
            raise Closed("a bad Content-Length")
    return 0 if request else "close"


def wants_close(version, hdrs):
    tokens = [t.strip().lower() for t in (header(hdrs, "Connection") or "").split(",")]
    return "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)


def encode_head(first, hdrs):
    return ("\r\n".join([first] + ["%s: %s" % kv for kv in hdrs]) + "\r\n\r\n").encode(
        "latin-1")


class Proxy:
    """The proxy (the module's docstring says what it does); serves until close()."""

    def __init__(self, upstream_port, listen=("127.0.0.1", 0), upstream_host="127.0.0.1",
                 target=None, counted=None, logfile=None):
        self.upstream = (upstream_host, upstream_port)
        self.target = target or (lambda r: True)
        self.counted = counted or (lambda r: True)
        self.logfile = logfile  # a file object: a line per request (log_line())
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)  # reset() and close() wake waits
        self.log = []  # Requests in the order their heads arrived
        self.sent = {}
        self.inflight = self.max_inflight = 0
        self.epoch = 0  # reset()s so far: what was under way before one ends
        self.closed = False
        self.conns = set()  # open sockets, shut down by close()
        self.nconns = 0
        self.defaults()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        # a reader sends a GET per range at once: with a backlog of 5 a connect beyond
        # it waited for the SYN's retransmission (1 s)
        self.sock.listen(128)
        self.sock.settimeout(0.5)  # accept() sees close() within that
        self.host, self.port = self.sock.getsockname()[:2]
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def defaults(self):
        self.mode = "pass"
        self.storm_until = 0.0
        self.retry_after = None
        self.delay = 0.0
        self.cap_bps = 64 * 1024
        self.corrupt_left = 0
        self.corrupt_min = 65536

    def url(self, path=""):
        return "http://%s:%d%s" % (self.host, self.port, path)

    def requests(self, pred=lambda r: True):
        """The logged Requests that @pred accepts, in their order."""
        with self.lock:
            return [r for r in self.log if pred(r)]

    def reset(self):
        """Faults back to their defaults, the log, sent and max_inflight cleared;
        every hang, delay, trickle and capped body under way ends."""
        with self.lock:
            self.log.clear()
            self.sent.clear()
            self.max_inflight = self.inflight
            self.defaults()
            self.epoch += 1
            self.cond.notify_all()

    def close(self):
        with self.lock:
            self.closed = True
            self.epoch += 1
            self.cond.notify_all()
            conns = list(self.conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)
        self.sock.close()

    # -- serving ------------------------------------------------------------------

    def pause(self, epoch, secs):
        """Wait @secs; False at once when a reset() or close() came after @epoch."""
        with self.cond:
            return not self.cond.wait_for(lambda: self.epoch != epoch, timeout=secs)

    def accept(self):
        while not self.closed:
            try:
                c, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                if self.closed:
                    c.close()
                    return
                self.nconns += 1
                n = self.nconns
                self.conns.add(c)
            threading.Thread(target=self.serve, args=(c, addr[0], n), daemon=True).start()

    def serve(self, c, ip, n):
        link = {"up": None}  # the server's Conn for this client, while kept
        try:
            c.settimeout(CLIENT_IDLE)
            client = Conn(c)
            while True:
                head = client.head(at_start=True)
                if head is None or not self.exchange(client, head, link, ip, n):
                    break
        except (Closed, OSError):
            pass
        finally:
            self.drop(c)
            if link["up"]:
                self.drop(link["up"].sock)

    def drop(self, s):
        with self.lock:
            self.conns.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def ask(self, link, data):
        """@data (a request) to the server on @link's connection, a new one if there is
        none; the head of its answer. A kept connection the server closed while idle
        (s3rver does after 5 s) is opened again and asked once more, as a client does."""
        for fresh in (link["up"] is None, True):
            if link["up"] is None:
                s = socket.create_connection(self.upstream, timeout=UPSTREAM_TIMEOUT)
                with self.lock:
                    self.conns.add(s)
                link["up"] = Conn(s)
            try:
                link["up"].sock.sendall(data)
                return link["up"].head()
            except (Closed, OSError) as e:
                got = link["up"].buf
                self.drop(link["up"].sock)
                link["up"] = None
                if fresh or got or isinstance(e, socket.timeout):  # (not closed: silent)
                    raise
        raise Closed("unreachable")  # (the loop returns or raises)

    def exchange(self, client, head, link, ip, n):
        """One request of @client and its answer, through @link's server connection:
        whether the client's connection goes on. Raises Closed when it must close."""
        first, hdrs = head
        parts = first.split(" ")
        if len(parts) != 3:
            raise Closed("not an HTTP request line")
        method, path, version = parts
        rng = header(hdrs, "Range")
        req = Request(time.monotonic(), n, ip, method, path,
                      None if rng is None else "".join(rng.split()))
        with self.lock:
            self.log.append(req)
            if self.logfile:
                self.logfile.write(log_line(req))
                self.logfile.flush()
            epoch = self.epoch
        faulty, counted = self.target(req), self.counted(req)
        close_after = wants_close(version, hdrs)
        if header(hdrs, "Expect"):
            # answered here: the server then gets the body at once, not after the
            # client's wait for a 100 the server would send
            hdrs = [(k, v) for k, v in hdrs if k.lower() != "expect"]
            client.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = list(client.body(framing_of(hdrs, True)))
        if counted:
            with self.lock:
                self.inflight += 1
                self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if faulty and self.delay:
                self.pause(epoch, self.delay)
        finally:
            if counted:
                with self.lock:
                    self.inflight -= 1
        if faulty and time.monotonic() < self.storm_until:
            req.status = 503
            out = [("Content-Type", "application/xml"),
                   ("Content-Length", str(len(SLOWDOWN)))]
            if self.retry_after is not None:
                out.append(("Retry-After", str(self.retry_after)))
            client.sock.sendall(encode_head("HTTP/1.1 503 Slow Down", out) +
                                (b"" if method == "HEAD" else SLOWDOWN))
            return not close_after
        mode = self.mode if faulty else "pass"
        if mode == "hang":
            req.status = 0
            self.pause(epoch, HANG_MAX)
            raise Closed("hung")
        if mode == "norange":
            hdrs = [(k, v) for k, v in hdrs if k.lower() != "range"]
        try:
            rfirst, rhdrs = self.ask(link, encode_head(first, hdrs) + b"".join(body))
        except (Closed, OSError):
            req.status = 0
            raise Closed("the server is unreachable")
        rparts = rfirst.split(" ", 2)
        try:
            status = int(rparts[1])
        except (IndexError, ValueError):
            raise Closed("not an HTTP status line")
        req.status = status
        framing = framing_of(rhdrs, False, method, status)
        if mode == "badsize" and method == "HEAD":
            rhdrs = [(k, str(int(v) + 1) if k.lower() == "content-length" else v)
                     for k, v in rhdrs]
        flip = -1
        with self.lock:
            if method == "GET" and isinstance(framing, int):
                self.sent[path] = self.sent.get(path, 0) + framing
            if (mode == "corrupt" and self.corrupt_left and status == 206 and
                    isinstance(framing, int) and framing > self.corrupt_min):
                self.corrupt_left -= 1
                flip = framing // 2
        client.sock.sendall(encode_head(rfirst, rhdrs))
        start, off = time.monotonic(), 0
        for d in link["up"].body(framing):
            with self.lock:
                if method == "GET" and not isinstance(framing, int):
                    self.sent[path] = self.sent.get(path, 0) + len(d)
            if off <= flip < off + len(d):
                d = d[:flip - off] + bytes([d[flip - off] ^ 0x5A]) + d[flip - off + 1:]
            off += len(d)
            self.send_body(client.sock, d, mode, epoch, start)
        # the server's connection goes on where its answer ended cleanly and did not
        # say close; the client's too, unless it asked to close or the answer's end
        # was the close
        if framing == "close" or wants_close(rparts[0], rhdrs):
            self.drop(link["up"].sock)
            link["up"] = None
        return not (close_after or framing == "close" or
                    "close" in (header(rhdrs, "Connection") or "").lower())

    def send_body(self, sock, d, mode, epoch, start):
        """@d to the client, paced as @mode says; Closed once a paced body runs out of
        time or a reset() or close() came after @epoch."""
        if mode not in ("trickle", "cap"):
            sock.sendall(d)
            return
        step, most = (TRICKLE[0], TRICKLE[2]) if mode == "trickle" else (CAP_SLICE, CAP_MAX)
        for i in range(0, len(d), step):
            if time.monotonic() > start + most or self.epoch != epoch:
                raise Closed("a paced body cut")
            piece = d[i:i + step]
            sock.sendall(piece)
            wait = TRICKLE[1] if mode == "trickle" else len(piece) / max(1, self.cap_bps)
            if not self.pause(epoch, wait):
                raise Closed("a paced body cut")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT (port 0: any)")
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    ap.add_argument("--log", help="a line per request: time conn client method range path")
    a = ap.parse_args()
    uhost, uport = hostport(a.upstream)
    log = open(a.log, "a", encoding="latin-1") if a.log else None
    p = Proxy(uport, listen=hostport(a.listen), upstream_host=uhost, logfile=log)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print("listening %s:%d" % (p.host, p.port), flush=True)
    while not done.wait(1.0):
        pass
    p.close()
    if log:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
