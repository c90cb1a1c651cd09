#!/usr/bin/python3
"""Part size and connections of a prefix fetch from object storage: the measurement
behind the defaults of -o http_part_size and -o http_connections (BENCHMARKS.md,
"Parts over many connections").

    bench/s3parts.py --store STORE [--parts 2M,8M,32M] [--conns 4,16,32,64]
                     [--cap-mbps 2] [--rtt-ms 2] [--readers 16] [--window 20]

One s3rver on 127.0.0.1 (tests/s3/setup.sh) holds STORE; bench/capproxy.py in front
of it caps each connection (as one stream to S3 is capped), adds a round-trip time
and a cost per new connection. For each (part size, connections) a fresh s3:// mount
with an empty cache is read in record order (file names in order, --readers threads
taking the next file) for at most --window seconds: MB/s served, GETs per image and
bytes fetched / bytes served from /.pcrfs/stats, connections opened (the proxy's
count). Prints a Markdown table. Runs as root (FUSE mounts); everything started is
stopped at the end.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3  # noqa: E402  (bench/s3.py: the upload config)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KEY = "S3RVER"
BUCKET = "bench"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(pred, secs, what):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise RuntimeError("%s: not up within %d s" % (what, secs))


def up_http(url):
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def up_tcp(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def ctl(port, cmd):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((cmd + "\n").encode())
        line = s.makefile().readline()
    return json.loads(line) if cmd == "stats" else line


def upload(store, ep, prefix, work):
    files = sorted(os.path.relpath(os.path.join(d, f), store)
                   for d, _, fs in os.walk(store) for f in fs)
    cfg = os.path.join(work, "upload.cfg")
    s3.write_upload_cfg(cfg, store, files, ep, prefix)
    subprocess.run(["curl", "-K", cfg], check=True, timeout=1800)


def read_in_order(root, readers, window):
    names = []
    for d, dns, fns in os.walk(root):
        dns.sort()
        names += [os.path.join(d, f) for f in sorted(fns)]
    lock, it = threading.Lock(), iter(names)
    got = [0, 0]  # files, bytes
    end = time.monotonic() + window

    def worker():
        while time.monotonic() < end:
            with lock:
                p = next(it, None)
            if p is None:
                return
            with open(p, "rb") as f:
                n = len(f.read())
            with lock:
                got[0] += 1
                got[1] += n
    start = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(readers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got[0], got[1], time.monotonic() - start


def ceiling(port, n, objs, size=8 << 20):
    """MB/s of @n parallel ranged GETs of @size bytes through the proxy with curl: what a
    plain client gets from @n connections."""
    args = ["curl", "--parallel", "--parallel-max", str(n), "--parallel-immediate", "-s",
            "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (KEY, KEY),
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    for i in range(n):
        o, off = objs[i % len(objs)], (i // len(objs)) % 8 * size  # inside every record
        args += ["-r", "%d-%d" % (off, off + size - 1),
                 "-o", "/dev/null", "http://127.0.0.1:%d/%s/store/%s" % (port, BUCKET, o)]
    start = time.monotonic()
    subprocess.run(args, check=True, timeout=600)
    return n * size / (time.monotonic() - start) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--s3rver", default=os.path.join(REPO, "tests/s3/node_modules/.bin/s3rver"))
    ap.add_argument("--capproxy", default=os.path.join(HERE, "capproxy.py"))
    ap.add_argument("--parts", default="2M,8M,32M")
    ap.add_argument("--conns", default="4,16,32,64")
    ap.add_argument("--view", default="full")
    ap.add_argument("--cap-mbps", type=float, default=2.0)
    ap.add_argument("--rtt-ms", type=float, default=2.0)
    ap.add_argument("--connect-ms", type=float, default=5.0)
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--window", type=float, default=20.0)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="s3parts-")
    procs, mnt = [], os.path.join(work, "mnt")
    os.makedirs(mnt)
    try:
        s3port = free_port()
        ep = "http://127.0.0.1:%d" % s3port
        os.makedirs(os.path.join(work, "data"))
        procs.append(subprocess.Popen(
            [a.s3rver, "-d", os.path.join(work, "data"), "-a", "127.0.0.1", "-p",
             str(s3port), "--configure-bucket", BUCKET, "-s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        wait(lambda: up_http(ep + "/"), 60, "s3rver")
        upload(os.path.abspath(a.store), ep, "store", work)
        port, cport = free_port(), free_port()
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", a.capproxy, "--listen", str(port), "--upstream", str(s3port),
             "--cap-mbps", str(a.cap_mbps), "--rtt-ms", str(a.rtt_ms), "--connect-ms",
             str(a.connect_ms), "--control", str(cport)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        wait(lambda: up_tcp(cport), 30, "capproxy")
        objs = sorted("records/" + r for r in os.listdir(os.path.join(a.store, "records")))
        print("curl, N parallel ranged GETs of 8 MiB through the proxy: " + ", ".join(
            "%s: %.1f MB/s" % (n, ceiling(port, int(n), objs)) for n in a.conns.split(",")),
            flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL="http://127.0.0.1:%d" % port, AWS_ACCESS_KEY_ID=KEY,
                   AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        print("| part size | connections | MB/s served | GETs/image | fetched/served "
              "| connections opened |")
        print("|---|---|---|---|---|---|")
        for part in a.parts.split(","):
            for n in a.conns.split(","):
                cache = os.path.join(work, "cache-%s-%s" % (part, n))
                subprocess.run([os.path.join(a.build, "src/fuse/pcrfs"),
                                "s3://%s/store" % BUCKET, mnt, "-o",
                                "cache=%s,http_part_size=%s,http_connections=%s,http_timeout=60"
                                % (cache, part, n)], env=env, check=True, timeout=120)
                try:
                    ctl(cport, "reset")
                    files, nbytes, secs = read_in_order(os.path.join(mnt, a.view), a.readers,
                                                        a.window)
                    with open(os.path.join(mnt, ".pcrfs/stats"), "rb") as f:
                        st = json.loads(f.read())
                    px = ctl(cport, "stats")
                finally:
                    subprocess.run(["fusermount3", "-u", mnt], timeout=60)
                    shutil.rmtree(cache, ignore_errors=True)
                h = st["http"]
                served = sum(v["bytes"] for v in st["views"].values())
                print("| %s | %s | %.1f | %.4f | %.2f | %s |" % (
                    part, n, nbytes / secs / 1e6, h["gets"] / max(1, files),
                    (h["fetch_bytes"] + h["direct_bytes"]) / max(1, served),
                    px.get("conns", px.get("connections", "?"))), flush=True)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
