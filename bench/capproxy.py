#!/usr/bin/python3
"""A TCP proxy on 127.0.0.1 that caps each connection's throughput and adds a
round-trip time, as one stream to a remote object store would (for
bench/node_throughput.py).

    capproxy.py --listen PORT --upstream PORT [--cap-mbps MB/s] [--rtt-ms MS]
                [--connect-ms MS] [--burst-kb KB] [--control PORT] [--json FILE]

--cap-mbps caps what the server sends to the client on EACH connection with a token
bucket (MB = 10^6 bytes; 0: no cap; --burst-kb deep, default 64 kB): a client gets
more bandwidth only by opening more connections, as with S3, where one stream
carries tens of MB/s. --rtt-ms delays every chunk by half of it in each direction,
so each request/response turn costs one round trip (the kernel here has no netem).
--connect-ms delays a new connection's first bytes upstream (the TCP and TLS
handshakes a real network costs). Chunks wait in a bounded queue per direction, so
a slow client slows the server down instead of filling memory.

Counting (bench/delayproxy.py's parser: requests by method, a LIST told from a
GET): connections, the most open at once, bytes each way. Control (--control PORT,
line protocol): "stats" answers one JSON line with the counters since the last
"reset"; "reset" zeroes them. At exit (SIGTERM/SIGINT) the counters since the start
are printed as one JSON line, and written to --json FILE if given. Only 127.0.0.1.
"""
import argparse
import asyncio
import json
import signal
import time

import delayproxy as dp

CHUNK = 64 * 1024  # read size: small against a second's worth of the cap
QUEUE = 16  # chunks buffered per direction (1 MiB)


class Totals:
    """What delayproxy's counters held before each "reset", and the most connections
    open at once (since the start and since the last reset)."""

    def __init__(self):
        self.conns = self.down = self.up = 0
        self.methods = {}
        self.open = self.peak = self.peak_since_reset = 0

    def reset(self):
        self.conns += dp.C.conns
        self.down += dp.C.down
        self.up += dp.C.up
        for m, n in dp.C.methods.items():
            self.methods[m] = self.methods.get(m, 0) + n
        self.peak_since_reset = self.open
        dp.C.reset()


T = Totals()


class Bucket:
    """A token bucket of @rate bytes/s, @burst bytes deep, as a virtual clock: the
    time at which the bytes sent so far have been paid for."""

    def __init__(self, rate, burst):
        self.rate, self.burst = rate, burst
        self.vt = time.monotonic()

    def due(self, n, now):
        if self.rate <= 0:
            return now
        self.vt = max(self.vt, now - self.burst / self.rate) + n / self.rate
        return self.vt


async def handle(creader, cwriter, a):
    dp.C.conns += 1
    T.open += 1
    T.peak = max(T.peak, T.open)
    T.peak_since_reset = max(T.peak_since_reset, T.open)
    t0 = time.monotonic()
    try:
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", a.upstream)
        except OSError:
            cwriter.close()
            return
        bucket = Bucket(a.cap_mbps * 1e6, a.burst_kb * 1e3) if a.cap_mbps > 0 else None
        one_way = a.rtt_ms / 2000.0
        await asyncio.gather(
            dp.pipe(creader, swriter, one_way, t0 + a.connect_ms / 1000.0,
                    dp.RequestParser(), True, None, QUEUE, CHUNK),
            dp.pipe(sreader, cwriter, one_way, 0, None, False, bucket, QUEUE, CHUNK))
    finally:
        T.open -= 1


def stats(since_start):
    d = dp.C.as_dict()
    if since_start:
        methods = dict(T.methods)
        for m, n in dp.C.methods.items():
            methods[m] = methods.get(m, 0) + n
        d.update(requests=sum(methods.values()), methods=methods,
                 gets=methods.get("GET", 0), lists=methods.get("LIST", 0),
                 heads=methods.get("HEAD", 0), connections=T.conns + dp.C.conns,
                 bytes_down=T.down + dp.C.down, bytes_up=T.up + dp.C.up)
    d.update(peak_connections=T.peak if since_start else T.peak_since_reset,
             open_connections=T.open)
    return d


async def main(a):
    srv = await asyncio.start_server(lambda r, w: handle(r, w, a), "127.0.0.1", a.listen,
                                     backlog=1024)
    servers = [srv]
    if a.control:
        servers.append(await asyncio.start_server(
            lambda r, w: dp.control(r, w, lambda: stats(False), T.reset), "127.0.0.1",
            a.control))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("capproxy: 127.0.0.1:%d -> 127.0.0.1:%d, cap %g MB/s per connection, RTT %g ms, "
          "%g ms per new connection" % (a.listen, a.upstream, a.cap_mbps, a.rtt_ms,
                                         a.connect_ms), flush=True)
    await stop.wait()
    for s in servers:
        s.close()
    line = json.dumps(stats(True))
    print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--cap-mbps", type=float, default=2.0,
                    help="MB/s per connection, server to client (0: no cap; default 2)")
    ap.add_argument("--burst-kb", type=float, default=64.0)
    ap.add_argument("--rtt-ms", type=float, default=0.0)
    ap.add_argument("--connect-ms", type=float, default=0.0)
    ap.add_argument("--control", type=int, default=0)
    ap.add_argument("--json", default="")
    asyncio.run(main(ap.parse_args()))
