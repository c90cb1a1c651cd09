#!/usr/bin/python3
"""A TCP proxy on 127.0.0.1 that adds a fixed one-way delay in each direction, and
counts the HTTP requests and bytes that pass through it.

    delayproxy.py --listen PORT --upstream PORT --rtt-ms MS [--control PORT]

The kernel here has no netem, so a round-trip time is emulated in user space: every
chunk read from one side is written to the other side RTT/2 after it arrived, in
order, with no bandwidth limit (each direction has a queue; a writer sleeps until a
chunk is due). A new connection also pays one RTT before its first bytes go
upstream (the TCP handshake a real network would cost). Only 127.0.0.1 is used.

Counting: the clients benchmarked here (libcurl in pcrfs, s3fs-fuse) send bodiless
requests (GET, HEAD) through a read-only mount, so the client->server stream is a
sequence of header blocks ending in an empty line; each block is one request, its
first word the method. A GET whose target has a query naming a listing
(list-type=, delimiter=, prefix=) is counted as a LIST. Bytes: all bytes from the
server (headers included) and from the client.

Control (--control PORT, line protocol): "stats" answers one JSON line with the
counters since the last "reset"; "reset" zeroes them. Exits on SIGTERM/SIGINT.
"""
import argparse
import asyncio
import json
import signal
import time

BUF = 256 * 1024


class Counters:
    def __init__(self):
        self.reset()

    def reset(self):
        self.methods = {}
        self.down = 0  # server -> client bytes
        self.up = 0    # client -> server bytes
        self.conns = 0

    def as_dict(self):
        return {"requests": sum(self.methods.values()), "methods": dict(self.methods),
                "gets": self.methods.get("GET", 0), "lists": self.methods.get("LIST", 0),
                "heads": self.methods.get("HEAD", 0), "bytes_down": self.down,
                "bytes_up": self.up, "connections": self.conns}


C = Counters()


class RequestParser:
    """Splits the client's stream into header blocks and counts their methods."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 1 << 20:  # not HTTP as we expect: stop parsing
                    self.buf = b""
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            line = head.split(b"\r\n", 1)[0].split()
            if not line:
                continue
            method = line[0].decode("latin-1", "replace")
            target = line[1] if len(line) > 1 else b""
            if method == "GET" and b"?" in target and any(
                    k in target for k in (b"list-type=", b"delimiter=", b"prefix=")):
                method = "LIST"
            C.methods[method] = C.methods.get(method, 0) + 1


async def pipe(reader, writer, delay, not_before, parser, upward, bucket=None, queue=0,
               chunk=BUF):
    """Copy @reader to @writer, each chunk @delay s after it arrived (and not before
    @not_before, monotonic, nor before @bucket, if any, has the tokens for it: see
    bench/capproxy.py), preserving order. At most @queue chunks wait (0: no bound),
    so that a slow writer slows the reader down; reads of at most @chunk bytes."""
    q = asyncio.Queue(queue)

    async def pump_out():
        try:
            while True:
                arrived, data = await q.get()
                if data is None:
                    break
                now = time.monotonic()
                due = max(arrived + delay, not_before)
                if bucket:
                    due = max(due, bucket.due(len(data), now))
                if due > now:
                    await asyncio.sleep(due - now)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    out = asyncio.ensure_future(pump_out())
    try:
        while not out.done():
            data = await reader.read(chunk)
            if not data:
                break
            if upward:
                C.up += len(data)
                parser.feed(data)
            else:
                C.down += len(data)
            await q.put((time.monotonic(), data))
    except (ConnectionError, OSError):
        pass
    if not out.done():
        await q.put((0, None))
        await out


async def handle(creader, cwriter, a):
    C.conns += 1
    one_way = a.rtt_ms / 2000.0
    t0 = time.monotonic()
    try:
        sreader, swriter = await asyncio.open_connection("127.0.0.1", a.upstream)
    except OSError:
        cwriter.close()
        return
    # the handshake costs one RTT before the request can leave
    await asyncio.gather(
        pipe(creader, swriter, one_way, t0 + 2 * one_way, RequestParser(), True),
        pipe(sreader, cwriter, one_way, 0, None, False))


async def control(reader, writer, stats=None, reset=None):
    """The control connection: "stats" answers stats() (default: the counters) as one
    JSON line, "reset" calls reset() (default: zero the counters)."""
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = line.strip().decode()
            if cmd == "stats":
                writer.write((json.dumps(stats() if stats else C.as_dict()) + "\n").encode())
            elif cmd == "reset":
                (reset or C.reset)()
                writer.write(b"ok\n")
            else:
                writer.write(b"?\n")
            await writer.drain()
    finally:
        writer.close()


async def main(a):
    srv = await asyncio.start_server(lambda r, w: handle(r, w, a), "127.0.0.1", a.listen)
    servers = [srv]
    if a.control:
        servers.append(await asyncio.start_server(control, "127.0.0.1", a.control))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("delayproxy: 127.0.0.1:%d -> 127.0.0.1:%d, RTT %g ms" % (a.listen, a.upstream,
                                                                    a.rtt_ms), flush=True)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--rtt-ms", type=float, default=0.0)
    ap.add_argument("--control", type=int, default=0)
    asyncio.run(main(ap.parse_args()))
