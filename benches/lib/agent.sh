# Shared by the host agent's benchmarks (sourced, not run): a release `bulkhead-agent` as root
# in a scratch directory, its API called with curl, workloads started N at once and timed until
# they answer HTTP at their address.
#
# The caller sets `duration` and the agent's flags; needs root, python3, curl and jq.

[ "$(id -u)" = 0 ] || { echo "run as root: the agent isolates workloads only as root" >&2; exit 2; }
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

# Starts the agent for `mode` (its data directory's name) with PATH `path`, extra `flags` and
# a command `wrap` put before it (all set by the caller); sets `agent` and `base`.
agent_start() { # mode
  local mode="$1"
  rm -rf "$work/data-$mode"
  PATH="${path:-$PATH}" RUST_LOG=warn ${wrap[@]+"${wrap[@]}"} "$PWD/target/release/bulkhead-agent" \
    --listen 127.0.0.1:0 --data-dir "$work/data-$mode" --token-file "$work/token" --slots 32 \
    --workload-uids 61140-61179 --cpu-millis 64000 --memory-mib 32768 \
    ${flags[@]+"${flags[@]}"} > "$work/out-$mode" 2> "$work/err-$mode" &
  agent=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$work/out-$mode" 2>/dev/null && break; sleep 0.1; done
  base="$(sed -n 's/^bulkhead agent listening on //p' "$work/out-$mode")"
  [ -n "$base" ] || { cat "$work/err-$mode" >&2; exit 1; }
  sed -n 's/^workloads: /  /p' "$work/out-$mode" >&2
}

agent_stop() {
  kill "$agent"; wait "$agent" 2>/dev/null || true; agent=""
}

put() { # key, command[, size as JSON]
  curl -sf "${auth[@]}" -X PUT -H 'Content-Type: application/json' "$base/v1/workloads/$1" \
    -d "$(jq -n --arg command "$2" --argjson size "${3:-null}" \
      '{command: $command} + (if $size then {size: $size} else {} end)')"
}

# Starts N workloads at once; prints "p50 max" of PUT → the workload answers HTTP at its address
# (ms), and the deletion's ms.
starts() { # N[, size as JSON]
  local n="$1" size="${2:-null}" i
  local began; began="$(now_ms)"
  local pids=()
  for i in $(seq 1 "$n"); do
    put "w$i" 'python3 -m http.server $PORT' "$size" | jq -r .address > "$work/address-$i" & pids+=($!)
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

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
machine() { echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(date -u +%Y-%m-%d)"; }
