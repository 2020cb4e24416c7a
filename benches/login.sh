#!/usr/bin/env bash
# Login under attack: 200 connections sending wrong passwords to a warmed release server on
# SQLite, with wrk, while the server's resident memory is sampled.
#
#   benches/login.sh [DURATION_SECS]     (default 15 s)
#
# Two runs on one server start each: with the default rate limits (most attempts refused with
# 429 before any hashing), and with the limits lifted, so that every attempt is hashed and only
# the cap on concurrent hashes bounds memory. Needs wrk and curl (Debian: apt-get install wrk
# curl). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-15}"
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install $tool" >&2; exit 2; }
done
cargo build --release -q -p bulkhead-api
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cat > "$work/login.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/v1/auth/login", nil,
    '{"email":"victim' .. (n % 50) .. '@example.com","password":"wrong password ' .. n .. '"}')
end
LUA

run() { # file name, label, extra serve flags...
  local name="$1" label="$2"; shift 2
  rm -rf "$work/data"
  RUST_LOG=error target/release/bulkhead serve --listen 127.0.0.1:0 --data-dir "$work/data" "$@" \
    > "$work/out" 2> "$work/err" &
  local server=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
  local base; base="$(sed -n 's/^bulkhead listening on //p' "$work/out")"
  local peak=0
  ( while kill -0 $server 2>/dev/null; do
      awk '/VmRSS/ {print $2}' /proc/$server/status; sleep 0.2
    done ) > "$work/rss" &
  local sampler=$!
  wrk -t2 -c200 "-d${duration}s" --latency -s "$work/login.lua" "$base" > "$work/$name.txt"
  kill $server; wait $server 2>/dev/null || true; wait $sampler 2>/dev/null || true
  peak="$(sort -n "$work/rss" | tail -1)"
  local rps p99 non2xx
  rps="$(awk '/^Requests\/sec/ {print $2}' "$work/$name.txt")"
  p99="$(awk '$1 == "99%" {print $2}' "$work/$name.txt")"
  non2xx="$(awk '/Non-2xx/ {print $5}' "$work/$name.txt")"
  echo "| $label | $rps | $p99 | ${non2xx:-0} | $((peak / 1024)) MiB |"
}

echo "| run | answers/s | p99 latency | non-2xx answers | peak server RSS |"
echo "| --- | ---: | ---: | ---: | ---: |"
run default "default limits (30/min per address, 10/min per account)"
run lifted "limits lifted; hashes capped at $(nproc)" --login-rate-per-ip 100000000 --login-rate-per-account 100000000
echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(date -u +%Y-%m-%d); $duration s per run, 200 connections, wrk 2 threads on the same machine"
