#!/usr/bin/env bash
# What a network namespace of its own costs a metal workload: a release `bulkhead-agent` as
# root, once giving its workloads namespaces (the default) and once sharing the host's network
# (the baseline: `ip` and `nft` hidden from its PATH, `--insecure-shared-network`), in the same
# run.
#
#   sudo benches/agent_network.sh [DURATION_SECS]     (default 10 s of wrk per mode)
#
# 1. Start: N workloads (`python3 -m http.server`) put at once, the time from the PUTs to each
#    answering HTTP at its address (p50 and max), for N = 1 and 16; then their deletion.
# 2. Traffic: wrk (2 connections, then 64) against one `caddy respond` workload at the address
#    the agent gives it (through the host's nftables forwarding in the namespaced mode).
#
# Needs root, ip, nft, python3, caddy, wrk, curl and jq (Debian: apt-get install iproute2
# nftables python3 caddy wrk curl jq). Prints Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-10}"
[ "$(id -u)" = 0 ] || { echo "run as root: the agent isolates workloads only as root" >&2; exit 2; }
for tool in ip nft python3 caddy wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "missing $tool (see the header of $0)" >&2; exit 2; }
done
cargo build --release -q -p bulkhead-agent
work="$(mktemp -d)"
chmod 755 "$work"
agent=""
trap '[ -n "$agent" ] && kill "$agent" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
token="bench-agent-token-$(date +%s%N)"
printf '%s\n' "$token" > "$work/token"
chmod 600 "$work/token"
auth=(-H "Authorization: Bearer $token")
now_ms() { date +%s%3N; }

agent_start() { # mode: namespaces | shared
  local mode="$1" path="$PATH" flags=()
  if [ "$mode" = shared ]; then
    path="$(dirname "$(command -v python3)"):$(dirname "$(command -v caddy)"):/usr/bin:/bin"
    flags=(--insecure-shared-network)
  fi
  rm -rf "$work/data-$mode"
  PATH="$path" RUST_LOG=warn target/release/bulkhead-agent --listen 127.0.0.1:0 \
    --data-dir "$work/data-$mode" --token-file "$work/token" --slots 32 \
    --workload-uids 61140-61179 "${flags[@]}" > "$work/out-$mode" 2> "$work/err-$mode" &
  agent=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$work/out-$mode" 2>/dev/null && break; sleep 0.1; done
  base="$(sed -n 's/^bulkhead agent listening on //p' "$work/out-$mode")"
  grep -q "workloads:" "$work/out-$mode" && sed -n 's/^workloads: /  /p' "$work/out-$mode" >&2
}

agent_stop() {
  kill "$agent"; wait "$agent" 2>/dev/null || true; agent=""
}

put() { # key, command
  curl -sf "${auth[@]}" -X PUT -H 'Content-Type: application/json' "$base/v1/workloads/$1" \
    -d "$(jq -n --arg command "$2" '{command: $command}')"
}

# Start N workloads at once; prints "p50 max" of PUT → the workload answers HTTP at its address
# (ms), and the deletion's ms.
starts() { # mode, N
  local mode="$1" n="$2" i
  local began; began="$(now_ms)"
  local pids=()
  for i in $(seq 1 "$n"); do
    put "w$i" 'python3 -m http.server $PORT' | jq -r .address > "$work/address-$i" & pids+=($!)
  done
  wait "${pids[@]}"
  : > "$work/lat"
  for i in $(seq 1 "$n"); do
    until curl -sf -o /dev/null -m 1 "http://$(cat "$work/address-$i")/"; do sleep 0.01; done
    echo $(( $(now_ms) - began )) >> "$work/lat"
  done
  local p50 max
  p50="$(sort -n "$work/lat" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
  max="$(sort -n "$work/lat" | tail -1)"
  local deleting; deleting="$(now_ms)"
  pids=()
  for i in $(seq 1 "$n"); do curl -sf "${auth[@]}" -X DELETE "$base/v1/workloads/w$i" & pids+=($!); done
  wait "${pids[@]}"
  echo "$p50 $max $(( $(now_ms) - deleting ))"
}

traffic() { # connections; prints requests/s and p99
  local address="$1" connections="$2"
  wrk -t2 "-c$connections" "-d${duration}s" --latency "http://$address/" > "$work/wrk"
  echo "$(awk '/^Requests\/sec/ {print $2}' "$work/wrk") $(awk '$1 == "99%" {print $2}' "$work/wrk")"
}

declare -A result
for mode in shared namespaces; do
  echo "mode: $mode" >&2
  agent_start "$mode"
  for n in 1 16; do result[$mode,start,$n]="$(starts "$mode" "$n")"; done
  address="$(put fast 'caddy respond --listen 127.0.0.1:$PORT --body ok' | jq -r .address)"
  until curl -sf "http://$address/" > /dev/null; do sleep 0.05; done
  for c in 2 64; do result[$mode,traffic,$c]="$(traffic "$address" "$c")"; done
  curl -sf "${auth[@]}" -X DELETE "$base/v1/workloads/fast"
  agent_stop
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "| workloads put at once | shared: PUT → answering p50 / max | namespaces: p50 / max | ratio of p50 | delete all: shared / namespaces |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for n in 1 16; do
  read -r sp50 smax sdel <<< "${result[shared,start,$n]}"
  read -r np50 nmax ndel <<< "${result[namespaces,start,$n]}"
  echo "| $n | $sp50 / $smax ms | $np50 / $nmax ms | $(ratio "$np50" "$sp50") | $sdel / $ndel ms |"
done
echo
echo "| wrk connections | shared: requests/s (p99) | namespaces: requests/s (p99) | ratio |"
echo "| ---: | ---: | ---: | ---: |"
for c in 2 64; do
  read -r srps sp99 <<< "${result[shared,traffic,$c]}"
  read -r nrps np99 <<< "${result[namespaces,traffic,$c]}"
  echo "| $c | $srps ($sp99) | $nrps ($np99) | $(ratio "$nrps" "$srps") |"
done
echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(date -u +%Y-%m-%d); wrk $duration s per run, 2 threads, on the same machine"
