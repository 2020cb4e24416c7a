#!/usr/bin/env bash
# Load benchmark of a warmed release server on SQLite: authenticated `GET /v1/projects/{id}`
# (API token and JWT) and the project's list of services (empty, then pages of 10, 50 and 100
# of its 100 services, and a poll of an unchanged page answered 304: the dashboard lives on
# lists) against `/healthz` on the same server in the same run, with wrk.
# With two cores or more, the server runs on core 0 and wrk on core 1 (`taskset`), so that the
# server's work is measured on one core and wrk does not take from it.
#
#   benches/load.sh [DURATION_SECS] [CONNECTIONS]     (defaults: 15 s, 64 connections)
#   BULKHEAD_BIN=/path/to/bulkhead benches/load.sh …  (another build, e.g. a baseline commit's)
#
# Needs wrk, curl and jq (Debian: apt-get install wrk curl jq). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-15}"
connections="${2:-64}"
for tool in wrk curl jq taskset; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install $tool" >&2; exit 2; }
done

# BULKHEAD_BIN: another build's binary, to compare two builds in one session.
binary="${BULKHEAD_BIN:-target/release/bulkhead}"
[ -n "${BULKHEAD_BIN:-}" ] || cargo build --release -q -p bulkhead-api
work="$(mktemp -d)"
admin="bench-admin-token-0123456789"
server_cpu=(); client_cpu=()
if [ "$(nproc)" -ge 2 ]; then server_cpu=(taskset -c 0); client_cpu=(taskset -c 1); fi
BULKHEAD_BOOTSTRAP_TOKEN="$admin" RUST_LOG=warn "${server_cpu[@]}" "$binary" serve \
  --listen 127.0.0.1:0 --data-dir "$work/data" > "$work/out" 2> "$work/err" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
base="$(sed -n 's/^bulkhead listening on //p' "$work/out")"

json=(-H "Content-Type: application/json")
curl -sf "${json[@]}" -H "Authorization: Bearer $admin" "$base/v1/users" \
  -d '{"email":"bench@example.com","name":"Bench","password":"bench password 123"}' > /dev/null
jwt="$(curl -sf "${json[@]}" "$base/v1/auth/login" -d '{"email":"bench@example.com","password":"bench password 123"}' | jq -r .access_token)"
project="$(curl -sf "${json[@]}" -H "Authorization: Bearer $jwt" "$base/v1/projects" -d '{"name":"bench"}' | jq -r .id)"
token="$(curl -sf "${json[@]}" -H "Authorization: Bearer $jwt" "$base/v1/tokens" -d '{"name":"bench","scopes":["read"]}' | jq -r .secret)"

run() { # name, path, [token], [If-None-Match]
  local args=(-t2 "-c$connections" "-d${duration}s" --latency)
  [ -n "${3:-}" ] && args+=(-H "Authorization: Bearer $3")
  [ -n "${4:-}" ] && args+=(-H "If-None-Match: $4")
  "${client_cpu[@]}" wrk "${args[@]}" "$base$2" > "$work/$1.txt"
  local rps p99
  rps="$(awk '/^Requests\/sec/ {print $2}' "$work/$1.txt")"
  p99="$(awk '$1 == "99%" {print $2}' "$work/$1.txt")"
  # wrk counts answers of 400 and above as "Non-2xx or 3xx" (a 304 is not one of them).
  errors="$(grep -E 'Non-2xx|Socket errors' "$work/$1.txt" || true)"
  [ -z "$errors" ] || { echo "errors in $1: $errors" >&2; exit 1; }
  echo "$1 $rps $p99"
}

# Warm-up (connections, caches, SQLite pages), not recorded.
"${client_cpu[@]}" wrk -t2 "-c$connections" -d5s -H "Authorization: Bearer $token" "$base/v1/projects/$project" > /dev/null

services="/v1/projects/$project/services"
results=()
results+=("$(run healthz /healthz)")
results+=("$(run project-api-token "/v1/projects/$project" "$token")")
results+=("$(run project-jwt "/v1/projects/$project" "$jwt")")
results+=("$(run services-empty "$services" "$token")")
environment="$(curl -sf "${json[@]}" -H "Authorization: Bearer $jwt" "$base/v1/projects/$project/environments" -d '{"name":"production"}' | jq -r .id)"
# 100 services: the default limit of a project.
for n in $(seq 1 100); do
  curl -sf "${json[@]}" -H "Authorization: Bearer $jwt" "$base$services" \
    -d '{"environment_id":"'"$environment"'","name":"web-'"$n"'","port":8080,"replicas":1,"source":{"type":"artifact","image":"shop/web:1"}}' > /dev/null
done
for size in 10 50 100; do
  results+=("$(run "services-$size" "$services?limit=$size" "$token")")
done
# What a dashboard's poll of an unchanged page gets: 304.
etag="$(curl -sf -D - -o /dev/null -H "Authorization: Bearer $token" "$base$services?limit=50" | tr -d '\r' | sed -n 's/^etag: //Ip')"
status="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" -H "If-None-Match: $etag" "$base$services?limit=50")"
[ -n "$etag" ] && [ "$status" = 304 ] || { echo "the page's ETag ($etag) answered $status, not 304" >&2; exit 1; }
results+=("$(run services-50-not-modified "$services?limit=50" "$token" "$etag")")

healthz_rps="$(echo "${results[0]}" | awk '{print $2}')"
echo "| endpoint | requests/s | p99 latency | vs /healthz |"
echo "| --- | ---: | ---: | ---: |"
for line in "${results[@]}"; do
  read -r name rps p99 <<< "$line"
  ratio="$(awk -v a="$rps" -v b="$healthz_rps" 'BEGIN { printf "%.2f", a / b }')"
  echo "| $name | $rps | $p99 | $ratio |"
done
echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(date -u +%Y-%m-%d); $duration s per run, $connections connections, $([ ${#server_cpu[@]} -gt 0 ] && echo "server on core 0, wrk (2 threads) on core 1" || echo "wrk 2 threads on the same cores")"
