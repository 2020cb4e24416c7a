#!/usr/bin/env bash
# What a network namespace of its own costs a metal workload: a release `bulkhead-agent` as
# root, once giving its workloads namespaces (the default) and once sharing the host's network
# (the baseline: `ip` and `nft` hidden from its PATH, `--insecure-shared-network`), in the same
# run.
#
#   sudo benches/agent_network.sh [DURATION_SECS]     (default 10 s of wrk per mode)
#
# 1. Start: N workloads (`python3 -m http.server`, sized 2000m / 512 MiB) put at once, the time
#    from the PUTs to each answering HTTP at its address (p50 and max), for N = 1 and 16; then
#    their deletion.
# 2. Traffic: wrk (2 connections, then 64) against one `caddy respond` workload at the address
#    the agent gives it (through the host's nftables forwarding in the namespaced mode).
#
# Needs root, ip, nft, python3, caddy, wrk, curl and jq (Debian: apt-get install iproute2
# nftables python3 caddy wrk curl jq). Prints Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-10}"
for tool in ip nft python3 caddy wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "missing $tool (see the header of $0)" >&2; exit 2; }
done
source benches/lib/agent.sh
# Two cores each, so that no workload's CPU quota (its size) is what the figures measure.
size='{"cpu_millis": 2000, "memory_mib": 512}'

traffic() { # connections; prints requests/s and p99
  local address="$1" connections="$2"
  wrk -t2 "-c$connections" "-d${duration}s" --latency "http://$address/" > "$work/wrk"
  echo "$(awk '/^Requests\/sec/ {print $2}' "$work/wrk") $(awk '$1 == "99%" {print $2}' "$work/wrk")"
}

declare -A result
for mode in shared namespaces; do
  echo "mode: $mode" >&2
  path="$PATH" flags=()
  if [ "$mode" = shared ]; then
    path="$(dirname "$(command -v python3)"):$(dirname "$(command -v caddy)"):/usr/bin:/bin"
    flags=(--insecure-shared-network)
  fi
  agent_start "$mode"
  for n in 1 16; do result[$mode,start,$n]="$(starts "$n" "$size")"; done
  address="$(put fast 'caddy respond --listen 127.0.0.1:$PORT --body ok' "$size" | jq -r .address)"
  until curl -sf "http://$address/" > /dev/null; do sleep 0.05; done
  for c in 2 64; do result[$mode,traffic,$c]="$(traffic "$address" "$c")"; done
  curl -sf "${auth[@]}" -X DELETE "$base/v1/workloads/fast"
  agent_stop
done

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
echo "$(machine); wrk $duration s per run, 2 threads, on the same machine"
