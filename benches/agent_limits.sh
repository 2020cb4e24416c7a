#!/usr/bin/env bash
# What a cgroup of its own costs a metal workload's start: a release `bulkhead-agent` as root,
# once holding its workloads to their sizes (the default) and once not (the baseline: the
# agent in a mount namespace where /sys/fs/cgroup is read-only, with --insecure-no-limits), in
# the same run.
#
#   sudo benches/agent_limits.sh [ROUNDS]     (default 3 rounds of each mode, interleaved)
#
# N workloads (`python3 -m http.server`, sized 2000m / 512 MiB so that no quota binds on a
# 2-core machine) put at once, the time from the PUTs to each answering HTTP at its address
# (p50 and max), for N = 1 and 16; then their deletion. Prints a Markdown table of the median
# of the rounds.
#
# Needs root, unshare (util-linux), python3, curl and jq (Debian: apt-get install util-linux
# python3 curl jq).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
for tool in unshare python3 curl jq; do
  command -v "$tool" >/dev/null || { echo "missing $tool (see the header of $0)" >&2; exit 2; }
done
source benches/lib/agent.sh
size='{"cpu_millis": 2000, "memory_mib": 512}'
# The baseline's agent sees every cgroup hierarchy read-only, so its probe fails.
readonly_cgroups='for m in $(findmnt -rn -t cgroup,cgroup2 -o TARGET); do
  mount -o remount,bind,ro "$m"; done; exec "$@"'

declare -A result
for round in $(seq 1 "$rounds"); do
  for mode in unheld cgroups; do
    echo "round $round, mode: $mode" >&2
    wrap=() flags=()
    if [ "$mode" = unheld ]; then
      wrap=(unshare --mount --propagation private sh -c "$readonly_cgroups" sh)
      flags=(--insecure-no-limits)
    fi
    agent_start "$mode"
    for n in 1 16; do result[$mode,$n,$round]="$(starts "$n" "$size")"; done
    agent_stop
  done
done

# The median over the rounds of field `f` (1: p50, 2: max, 3: delete) for mode and N.
median() { # mode, n, field
  for round in $(seq 1 "$rounds"); do echo "${result[$1,$2,$round]}" | cut -d' ' -f"$3"; done \
    | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
echo "| workloads put at once | unheld: PUT → answering p50 / max | cgroups: p50 / max | ratio of p50 | delete all: unheld / cgroups |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for n in 1 16; do
  up50="$(median unheld "$n" 1)" cp50="$(median cgroups "$n" 1)"
  echo "| $n | $up50 / $(median unheld "$n" 2) ms | $cp50 / $(median cgroups "$n" 2) ms | $(ratio "$cp50" "$up50") | $(median unheld "$n" 3) / $(median cgroups "$n" 3) ms |"
done
echo
echo "$(machine); median of $rounds rounds, the modes interleaved"
