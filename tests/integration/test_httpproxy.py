#!/usr/bin/python3
"""The tests' proxy (httpproxy.py) against a small HTTP/1.1 server of this file's own:
what test_s3.py, test_s3_robust.py and test_multinode.py rely on it for, checked
where a failure names the proxy rather than pcrfs.

What each test asserts, and would be false if the proxy broke:
  test_keepalive_and_log  requests on one client connection reach the server on one
                          connection of its own, bodies (Content-Length and chunked)
                          pass whole, the log has method, path, Range (blanks
                          removed), connection and status of each, in order; a server
                          connection closed while idle is opened again unseen
  test_faults             503 SlowDown with Retry-After during a storm; norange drops
                          Range; badsize adds one to a HEAD's length; corrupt flips
                          exactly the middle byte of one 206 body; only the requests
                          @target selects are hit; sent counts GET bodies
  test_paced_and_hang     cap paces a body at about cap_bps; a trickle and a hang end
                          (the client's connection cut) at reset(), not later
  test_inflight_and_delay  four requests delayed at once: max_inflight 4, inflight
                          back to 0, only the @counted ones counted
  test_program_log        run as a program: "listening HOST:PORT", forwards, and its
                          --log read back by read_log() names each request
Every wait is bounded; nothing but 127.0.0.1 is contacted.
Run by hand: /usr/bin/python3 test_httpproxy.py -v
"""

import http.client
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import httpproxy  # noqa: E402

DATA = bytes(range(256)) * 1000


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.server.peers.add(self.client_address)
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        rng = self.headers.get("Range")
        if rng:
            a, b = (int(x) for x in rng.split("=")[1].split("-"))
            body = DATA[a:b + 1]
            self.send_response(206)
        else:
            body = DATA
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.server.peers.add(self.client_address)
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()


def get(conn, path, rng=None, method="GET"):
    conn.request(method, path, headers={"Range": rng} if rng else {})
    r = conn.getresponse()
    return r, r.read()


class ProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.srv.daemon_threads = True
        cls.srv.peers = set()
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()
        cls.srv.server_close()

    def proxy(self, **kw):
        p = httpproxy.Proxy(self.srv.server_address[1], **kw)
        self.addCleanup(p.close)
        return p

    def client(self, p):
        c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=20)
        self.addCleanup(c.close)
        return c

    def test_keepalive_and_log(self):
        p = self.proxy()
        c = self.client(p)
        self.srv.peers.clear()
        for _ in range(3):
            r, d = get(c, "/rec", "bytes = 0-99")
            self.assertEqual((r.status, d), (206, DATA[:100]))
        r, d = get(c, "/rec", method="HEAD")
        self.assertEqual(r.getheader("Content-Length"), str(len(DATA)))
        r, d = get(c, "/chunked")
        self.assertEqual(d, b"hello world")
        self.assertEqual(len(self.srv.peers), 1, self.srv.peers)  # one server connection
        got = [(e.conn, e.client, e.method, e.path, e.range, e.status) for e in p.requests()]
        self.assertEqual(got, [(1, "127.0.0.1", "GET", "/rec", "bytes=0-99", 206)] * 3 +
                         [(1, "127.0.0.1", "HEAD", "/rec", None, 200),
                          (1, "127.0.0.1", "GET", "/chunked", None, 200)])
        self.assertEqual(sorted(e.t for e in p.log), [e.t for e in p.log])
        # the server closes its side while idle (s3rver does after 5 s): the client's
        # next request is answered all the same
        with p.lock:
            ups = [s for s in p.conns if s.getpeername()[1] == self.srv.server_address[1]]
        self.assertEqual(len(ups), 1)
        self.srv.peers.clear()
        ups[0].shutdown(2)
        r, d = get(c, "/rec", "bytes=5-9")
        self.assertEqual((r.status, d), (206, DATA[5:10]))
        self.assertEqual(len(self.srv.peers), 1)

    def test_faults(self):
        p = self.proxy(target=lambda r: r.path.startswith("/rec"))
        c = self.client(p)
        p.storm_until = time.monotonic() + 30
        p.retry_after = 1
        r, d = get(c, "/rec", "bytes=0-9")
        self.assertEqual((r.status, r.getheader("Retry-After")), (503, "1"))
        self.assertIn(b"<Code>SlowDown</Code>", d)
        r, d = get(c, "/other", "bytes=0-9")  # not a target: forwarded
        self.assertEqual((r.status, d), (206, DATA[:10]))
        p.reset()
        self.assertEqual(p.requests(), [])
        p.mode = "norange"
        r, d = get(c, "/rec", "bytes=0-9")
        self.assertEqual((r.status, len(d)), (200, len(DATA)))
        p.mode = "badsize"
        r, _ = get(c, "/rec", method="HEAD")
        self.assertEqual(r.getheader("Content-Length"), str(len(DATA) + 1))
        p.mode = "corrupt"
        p.corrupt_left, p.corrupt_min = 1, 1000
        r, d = get(c, "/rec", "bytes=0-999")  # not longer than corrupt_min: as it is
        self.assertEqual(d, DATA[:1000])
        for want in ([100000], []):  # the next one body, then none
            r, d = get(c, "/rec", "bytes=0-199999")
            self.assertEqual(len(d), 200000)
            self.assertEqual([i for i in range(len(d)) if d[i] != DATA[i]], want)
            self.assertEqual(p.corrupt_left, 0)
        self.assertEqual(p.sent, {"/rec": len(DATA) + 1000 + 2 * 200000})

    def test_paced_and_hang(self):
        p = self.proxy()
        c = self.client(p)
        p.mode, p.cap_bps = "cap", 100000
        t = time.monotonic()
        r, d = get(c, "/rec", "bytes=0-49999")
        took = time.monotonic() - t
        self.assertEqual(d, DATA[:50000])
        self.assertGreater(took, 0.4)  # 50 kB at 100 kB/s, the last slice's wait too
        self.assertLess(took, 5)
        for mode in ("trickle", "hang"):
            p.mode = mode
            c = self.client(p)
            threading.Timer(1.0, p.reset).start()
            t = time.monotonic()
            with self.assertRaises((http.client.HTTPException, OSError)):
                get(c, "/rec", "bytes=0-999")
            self.assertLess(time.monotonic() - t, 5, mode)
            self.assertGreater(time.monotonic() - t, 0.9, mode)

    def test_inflight_and_delay(self):
        p = self.proxy(counted=lambda r: r.method == "GET")
        p.delay = 0.5
        out = []

        def one():
            c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=20)
            out.append(get(c, "/rec", "bytes=0-9")[1])
            c.close()
        ts = [threading.Thread(target=one) for _ in range(4)]
        for t in ts:
            t.start()
        time.sleep(0.2)
        get(self.client(p), "/rec", method="HEAD")  # delayed, not counted
        for t in ts:
            t.join(20)
        self.assertEqual(out, [DATA[:10]] * 4)
        self.assertEqual((p.max_inflight, p.inflight), (4, 0))

    def test_program_log(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "requests.log")
            proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "httpproxy.py"), "--listen",
                 "127.0.0.1:0", "--upstream", "127.0.0.1:%d" % self.srv.server_address[1],
                 "--log", log], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            try:
                line = proc.stdout.readline().decode()
                self.assertTrue(line.startswith("listening 127.0.0.1:"), line)
                c = http.client.HTTPConnection("127.0.0.1", int(line.rsplit(":", 1)[1]),
                                               timeout=20)
                r, d = get(c, "/a%20b/rec", "bytes=1-2")
                self.assertEqual(d, DATA[1:3])
                get(c, "/x", method="HEAD")
                c.close()
            finally:
                proc.terminate()
                self.assertEqual(proc.wait(20), 0)
                proc.stdout.close()
            got = [(e.conn, e.client, e.method, e.path, e.range)
                   for e in httpproxy.read_log(log)]
            self.assertEqual(got, [(1, "127.0.0.1", "GET", "/a%20b/rec", "bytes=1-2"),
                                   (1, "127.0.0.1", "HEAD", "/x", None)])


if __name__ == "__main__":
    unittest.main()
