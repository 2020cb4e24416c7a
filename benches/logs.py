#!/usr/bin/env python3
"""How long a line a workload prints takes to reach a follower of its service's logs.

A release `bulkhead dev` (the local platform: simulated gcp instances, real processes on the
host agent for metal) in a process of its own, and this client in another, as users run them.
For each service — 10 and 100 instances on gcp, 10 instances of `bulkhead hello` on metal —
LINES lines are printed (an HTTP request to an instance, which prints an access line), each
after a random pause of 0-1 s so that prints fall anywhere in the follower's cycle, and timed
until the line arrives:

- through a follower of the service's logs (Server-Sent Events);
- the baseline, in the same run: a client asking for the next page itself every 50 ms.

    benches/logs.py                       # builds the release binary first
    BULKHEAD_BIN=/path/to/bulkhead benches/logs.py

Needs python3 only. Prints one line per service: p50 and p99 of each, and their ratio.
"""

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

LINES = 50
TOKEN = "benchmark-logs-token-000001"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def service_of(base, provider, replicas, hello):
    suffix = f"{provider}-{replicas}-{random.randrange(1 << 30)}"
    project = call(base, "POST", "/v1/projects", {"name": f"logs-{suffix}"})["id"]
    environment = call(base, "POST", f"/v1/projects/{project}/environments", {"name": "production"})["id"]
    service = call(base, "POST", f"/v1/projects/{project}/services", {
        "environment_id": environment, "name": "web", "port": 8080, "replicas": replicas,
        "source": {"type": "command", "command": [hello, "hello"]},
        "placement": {"providers": [{"name": provider}]},
        "health_check": {"interval_ms": 5000, "timeout_ms": 1000},
    })["id"]
    path = f"/v1/projects/{project}/services/{service}"
    deployment = call(base, "POST", f"{path}/deployments")["id"]
    deadline = time.monotonic() + 180
    while call(base, "GET", f"{path}/deployments/{deployment}")["state"] != "healthy":
        if time.monotonic() > deadline:
            sys.exit(f"{provider} x{replicas}: not healthy within 180 s")
        time.sleep(0.5)
    instances = call(base, "GET", f"{path}/instances?limit=200")["items"]
    return path, [instance["address"] for instance in instances]


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def printed(address, text):
    """Makes the instance at `address` print an access line; returns the line."""
    urllib.request.urlopen(f"http://{address}/{text}", timeout=10).read()
    return f"GET /{text} 200"


def followed(base, path, addresses):
    arrived = {}
    stop = threading.Event()

    def read():
        request = urllib.request.Request(base + path + "/logs")
        request.add_header("Authorization", "Bearer " + TOKEN)
        request.add_header("Accept", "text/event-stream")
        with urllib.request.urlopen(request) as stream:
            for raw in stream:
                if stop.is_set():
                    return
                line = raw.decode()
                if line.startswith("data:"):
                    now = time.monotonic()
                    for logged in json.loads(line[5:])["lines"]:
                        arrived.setdefault(logged["text"], now)

    threading.Thread(target=read, daemon=True).start()
    time.sleep(2)
    samples = []
    for n in range(LINES):
        time.sleep(random.random())
        started = time.monotonic()
        text = printed(addresses[n % len(addresses)], f"followed-{n}")
        while text not in arrived:
            if time.monotonic() - started > 30:
                sys.exit(f"`{text}` did not reach the follower within 30 s")
            time.sleep(0.001)
        samples.append(arrived[text] - started)
    stop.set()
    return samples


def polled(base, path, addresses):
    cursor = call(base, "GET", f"{path}/logs")["next_cursor"]
    samples = []
    for n in range(LINES):
        time.sleep(random.random())
        started = time.monotonic()
        text = printed(addresses[n % len(addresses)], f"polled-{n}")
        while True:
            page = call(base, "GET", f"{path}/logs?limit=1000&cursor={urllib.parse.quote(cursor)}")
            cursor = page["next_cursor"]
            if any(logged["text"] == text for logged in page["lines"]):
                break
            if time.monotonic() - started > 30:
                sys.exit(f"`{text}` was not read within 30 s")
            time.sleep(0.05)
        samples.append(time.monotonic() - started)
    return samples


def main():
    binary = os.environ.get("BULKHEAD_BIN")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "bulkhead-api"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target/release/bulkhead")
    binary = os.path.abspath(binary)
    with tempfile.TemporaryDirectory() as data:
        # The agent's workloads run as users of their own, who pass through it.
        os.chmod(data, 0o711)
        log = open(os.path.join(data, "dev.log"), "w")
        env = dict(os.environ, BULKHEAD_BOOTSTRAP_TOKEN=TOKEN)
        server = subprocess.Popen(
            [binary, "dev", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(data, "dev")],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=data)
        try:
            base = None
            deadline = time.monotonic() + 60
            while base is None:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("bulkhead dev did not start: " + open(log.name).read()[-2000:])
                time.sleep(0.2)
                for line in open(log.name):
                    if line.startswith("bulkhead listening on "):
                        base = line.split()[-1].strip()
            for provider, replicas in [("gcp", 10), ("gcp", 100), ("metal", 10)]:
                path, addresses = service_of(base, provider, replicas, binary)
                follower = followed(base, path, addresses)
                poller = polled(base, path, addresses)
                ms = lambda seconds: f"{seconds * 1000:.0f} ms"
                print(f"{provider}, {replicas} instances: printed → follower p50 {ms(statistics.median(follower))} "
                      f"p99 {ms(percentile(follower, 99))}; polled every 50 ms p50 {ms(statistics.median(poller))} "
                      f"p99 {ms(percentile(poller, 99))}; p99 ratio {percentile(follower, 99) / percentile(poller, 99):.2f}",
                      flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
