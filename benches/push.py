#!/usr/bin/env python3
"""How long a push takes to run: from a GitHub-shaped push to the new commit answering
through the edge.

A release `bulkhead dev` (the host agent runs metal's workloads as real processes) in a process
of its own, an edge (`bulkhead edge` driving a real Caddy) in another, a real `git daemon`
serving a repository this script commits to, and this client, as users run them. Services of a
`git` source on metal (`build.sh` writes the commit's VERSION to BUILT; `app.py` serves it),
each on a verified domain of its own, are bound to the repository's `main`; each push (a new
commit, then its webhook delivery, signed) is timed until every bound service's domain answers
the new VERSION through Caddy. Measured at 1 and 20 services bound to one branch (PUSHES pushes
each).

The baseline, in the same run: what a push must do at least, by hand on the same machine with
no control plane: fetch the commit (shallow, by id, into a fresh bare repository), `git archive
| tar` it, run the build, start the app and wait for its first answer.

    benches/push.py                       # builds the release binary first
    BULKHEAD_BIN=/path/to/bulkhead benches/push.py

Needs python3, git and caddy. Prints one line per size: p50 and p99 of each, and their ratio.
"""

import hashlib
import hmac
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

PUSHES = 12
TOKEN = "benchmark-push-token-000001"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = """import http.server as h, os
class H(h.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.end_headers()
        s.wfile.write(b'ok' if s.path == '/health' else open('BUILT', 'rb').read())
    def log_message(s, *a): pass
h.ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()
"""
BUILD = "cat VERSION > BUILT\n"


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answer(address, timeout=1):
    try:
        with urllib.request.urlopen(f"http://{address}/", timeout=timeout) as response:
            return response.read().decode()
    except OSError:
        return None


def commit(tree, version):
    with open(os.path.join(tree, "VERSION"), "w") as f:
        f.write(version)
    git(tree, "add", "--all")
    git(tree, "commit", "--quiet", "-m", version)
    return git(tree, "rev-parse", "HEAD")


def services_bound(base, url, count, suffix):
    """`count` services running the repository's code on metal, bound to its `main` in one
    installation: their paths, and the installation's id and secret."""
    project = call(base, "POST", "/v1/projects", {"name": f"push-{count}-{suffix}"})["id"]
    environment = call(base, "POST", f"/v1/projects/{project}/environments", {"name": "production"})["id"]
    paths, bindings = [], []
    for n in range(count):
        service = call(base, "POST", f"/v1/projects/{project}/services", {
            "environment_id": environment, "name": f"web-{n}", "port": 8080,
            "source": {"type": "git", "repository": url, "build": ["sh", "build.sh"],
                       "command": ["python3", "app.py"]},
            "placement": {"providers": [{"name": "metal"}]},
            "health_check": {"path": "/health", "interval_ms": 200, "timeout_ms": 1000},
        })["id"]
        paths.append(f"/v1/projects/{project}/services/{service}")
        bindings.append({"repository": "bench/web", "branch": "main", "service_id": service})
    installation = call(base, "POST", f"/v1/projects/{project}/git-installations", {"bindings": bindings})
    return paths, installation["id"], installation["secret"]


def pushed(base, installation, secret, sha, n):
    body = json.dumps({
        "ref": "refs/heads/main", "before": "0" * 40, "after": sha,
        "repository": {"full_name": "bench/web", "pushed_at": int(time.time())},
        "head_commit": {"id": sha, "message": f"push {n}"},
    }).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(f"{base}/v1/hooks/github?installation={installation}", data=body, method="POST")
    for name, value in [("Content-Type", "application/json"), ("X-GitHub-Event", "push"),
                        ("X-GitHub-Delivery", f"bench-{installation}-{n}"), ("X-Hub-Signature-256", signature)]:
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202, response.status


def through_edge(edge, hostname):
    request = urllib.request.Request(f"http://{edge}/", headers={"Host": hostname})
    try:
        with urllib.request.urlopen(request, timeout=1) as response:
            return response.read().decode()
    except OSError:
        return None


def until_all_answer(edge, hostnames, version, started):
    """Seconds from `started` until every domain answers `version` through the edge."""
    waiting = set(hostnames)
    while waiting:
        if time.monotonic() - started > 120:
            sys.exit(f"{len(waiting)} domain(s) never answered {version} through the edge: "
                     f"{[(h, through_edge(edge, h)) for h in waiting][:3]}")
        for hostname in list(waiting):
            if through_edge(edge, hostname) == version:
                waiting.discard(hostname)
        time.sleep(0.01)
    return time.monotonic() - started


def domains_bound(base, dns_api, paths, prefix):
    """A verified domain for each service (its challenge published on the dev DNS server)."""
    hostnames = []
    for n, path in enumerate(paths):
        project, service = path.split("/")[3], path.split("/")[5]
        hostname = f"{prefix}-{n}.push.test"
        made = call(base, "POST", f"/v1/projects/{project}/domains", {"hostname": hostname, "service_id": service})
        challenge = made["challenge"]
        record = urllib.request.Request(f"{dns_api}/records/{challenge['name']}", method="PUT",
                                        data=json.dumps({"txt": [challenge["value"]]}).encode(),
                                        headers={"Content-Type": "application/json"})
        urllib.request.urlopen(record, timeout=10).read()
        verified = call(base, "POST", f"/v1/projects/{project}/domains/{made['id']}/verify")
        assert verified["status"] == "verified", verified
        hostnames.append(hostname)
    return hostnames


def edge_start(binary, base, data):
    """Caddy with only its admin API, and `bulkhead edge` configuring it from the routing table:
    the processes and where the edge serves."""
    admin, listen = free_port(), free_port()
    caddy_dir = os.path.join(data, "caddy")
    os.mkdir(caddy_dir)
    config = os.path.join(caddy_dir, "initial.json")
    with open(config, "w") as f:
        json.dump({"admin": {"listen": f"127.0.0.1:{admin}"}}, f)
    caddy = subprocess.Popen(["caddy", "run", "--config", config], cwd=caddy_dir,
                             env=dict(os.environ, XDG_CONFIG_HOME=caddy_dir, XDG_DATA_HOME=caddy_dir),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = call(base, "POST", "/v1/tokens", {"name": "bench-edge", "scopes": ["routing:read"]})["secret"]
    token_file, keys_file = os.path.join(data, "edge.token"), os.path.join(data, "trusted-keys.json")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token)
    with open(keys_file, "w") as f:
        json.dump(call(base, "GET", "/v1/routing-table/keys"), f)
    edge = subprocess.Popen(
        [binary, "edge", "--id", "bench-edge", "--control-plane", base, "--token-file", token_file,
         "--trusted-keys", keys_file, "--state-dir", os.path.join(data, "edge"),
         "--caddy-admin", f"http://127.0.0.1:{admin}", "--caddy-listen", f"127.0.0.1:{listen}", "--plain-http",
         "--listen", f"127.0.0.1:{free_port()}"],
        stdout=open(os.path.join(data, "edge.log"), "w"), stderr=subprocess.STDOUT)
    return [edge, caddy], f"127.0.0.1:{listen}"


def by_hand(url, sha, work):
    """The baseline: fetch, check out, build, start, first answer, with no control plane."""
    started = time.monotonic()
    repo = os.path.join(work, f"cache-{sha}.git")
    git(work, "init", "--quiet", "--bare", repo)
    git(work, "--git-dir", repo, "fetch", "--quiet", "--depth", "1", "--no-tags", url, sha)
    app = os.path.join(work, f"app-{sha}")
    os.mkdir(app)
    archive = subprocess.Popen(["git", "--git-dir", repo, "archive", "--format=tar", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-f", "-"], cwd=app, stdin=archive.stdout, check=True)
    archive.wait()
    subprocess.run(["sh", "build.sh"], cwd=app, check=True)
    port = free_port()
    server = subprocess.Popen(["python3", "app.py"], cwd=app, env=dict(os.environ, PORT=str(port)))
    try:
        while answer(f"127.0.0.1:{port}", 0.2) is None:
            time.sleep(0.005)
        return time.monotonic() - started
    finally:
        server.kill()
        server.wait()


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def main():
    binary = os.environ.get("BULKHEAD_BIN")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "bulkhead-api"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target/release/bulkhead")
    binary = os.path.abspath(binary)
    with tempfile.TemporaryDirectory() as data:
        # The agent's workloads run as users of their own, who pass through it.
        os.chmod(data, 0o711)
        tree = os.path.join(data, "web")
        os.mkdir(tree)
        git(tree, "init", "--quiet", "-b", "main")
        for name, text in [("app.py", APP), ("build.sh", BUILD)]:
            with open(os.path.join(tree, name), "w") as f:
                f.write(text)
        first = commit(tree, "v0")
        git_port = free_port()
        daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
                                   f"--port={git_port}", f"--base-path={data}", data],
                                  stderr=subprocess.DEVNULL)
        url = f"git://127.0.0.1:{git_port}/web"
        log = open(os.path.join(data, "dev.log"), "w")
        # Each of 20 services runs twice while it rolls out, and replaced instances drain for a
        # while after: room for several pushes' worth.
        env = dict(os.environ, BULKHEAD_BOOTSTRAP_TOKEN=TOKEN, BULKHEAD_AGENT_SLOTS="200")
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
            dns_api = None
            for line in open(log.name):
                if line.strip().startswith("DNS server"):
                    dns_api = line.split("PUT ")[1].split("/records")[0]
            processes, edge = edge_start(binary, base, data)
            work = os.path.join(data, "by-hand")
            os.mkdir(work)
            for count in [1, 20]:
                paths, installation, secret = services_bound(base, url, count, random.randrange(1 << 30))
                hostnames = domains_bound(base, dns_api, paths, f"s{count}")
                pushed(base, installation, secret, first, 0)
                until_all_answer(edge, hostnames, "v0", time.monotonic())
                pushes, hand = [], []
                for n in range(1, PUSHES + 1):
                    version = f"v{count}-{n}"
                    sha = commit(tree, version)
                    time.sleep(random.random())
                    started = time.monotonic()
                    pushed(base, installation, secret, sha, n)
                    pushes.append(until_all_answer(edge, hostnames, version, started))
                    hand.append(by_hand(url, sha, work))
                s = lambda seconds: f"{seconds:.2f} s"
                print(f"{count} service(s): push → new code answering through the edge p50 {s(statistics.median(pushes))} "
                      f"p99 {s(percentile(pushes, 99))}; by hand p50 {s(statistics.median(hand))} "
                      f"p99 {s(percentile(hand, 99))}; p50 ratio {statistics.median(pushes) / statistics.median(hand):.1f}",
                      flush=True)
        except SystemExit:
            for path in locals().get("paths", []):
                latest = call(base, "GET", f"{path}/deployments?limit=3")["items"]
                print(path, [(d["number"], d["state"], d.get("reason"), (d.get("revision") or {}).get("commit", "")[:7])
                             for d in latest], file=sys.stderr)
            for name in ["dev.log", "edge.log"]:
                print(f"--- {name}", open(os.path.join(data, name)).read()[-3000:], file=sys.stderr)
            if os.environ.get("BENCH_KEEP_LOG"):
                subprocess.run(["cp", os.path.join(data, "dev.log"), os.environ["BENCH_KEEP_LOG"]])
            raise
        finally:
            for process in locals().get("processes", []):
                process.terminate()
            server.terminate()
            server.wait(timeout=30)
            daemon.kill()


if __name__ == "__main__":
    main()
