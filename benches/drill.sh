#!/usr/bin/env bash
# The outage drill as users run it, several times in a row: `bulkhead drill` with its default
# flags from a release build, on SQLite and (given a PostgreSQL server) on PostgreSQL, one
# fresh database per run.
#
#   benches/drill.sh [RUNS]                 (default 5 on each database)
#
# BULKHEAD_BIN=path     drills with that binary instead of building `target/release/bulkhead`
# BULKHEAD_DRILL_POSTGRES=postgres://user@host:port
#                       also drills on PostgreSQL: each run gets a new database on that server
#                       (dropped after a passing run)
# Extra drill flags go in BULKHEAD_DRILL_FLAGS (e.g. "--replicas 3", with PostgreSQL only).
# Needs jq (and psql for PostgreSQL). Prints a Markdown table, one row per run, and
# keeps the JSON reports of failed runs in the directory it names.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
for tool in jq; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install $tool" >&2; exit 2; }
done
if [ -z "${BULKHEAD_BIN:-}" ]; then
  cargo build --release -q -p bulkhead-api
  BULKHEAD_BIN=target/release/bulkhead
fi
reports="$(mktemp -d -t bulkhead-drill-runs.XXXXXX)"
# shellcheck disable=SC2206
extra=(${BULKHEAD_DRILL_FLAGS:-})

databases=(sqlite)
if [ -n "${BULKHEAD_DRILL_POSTGRES:-}" ]; then
  command -v psql >/dev/null || { echo "missing psql: apt-get install postgresql-client" >&2; exit 2; }
  databases+=(postgres)
fi

echo "| run | database | checks passed | seconds | gcp breaker open | dead routes out | backlog drain (set 4/s) | requests failed through Caddy | intake p99 | failed checks |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
failures=0
for database in "${databases[@]}"; do
  for run in $(seq 1 "$runs"); do
    flags=("${extra[@]}")
    name=""
    if [ "$database" = postgres ]; then
      name="bulkhead_drill_$(date +%s)_$run"
      psql -q "$BULKHEAD_DRILL_POSTGRES/postgres" -c "CREATE DATABASE $name"
      flags+=(--database-url "$BULKHEAD_DRILL_POSTGRES/$name")
    fi
    report="$reports/$database-$run.json"
    "$BULKHEAD_BIN" drill --output json "${flags[@]}" > "$report" 2> "$reports/$database-$run.log" || true
    if ! jq -e . "$report" >/dev/null 2>&1; then
      echo "| $run | $database | no report | | | | | | | see $reports/$database-$run.log |"
      failures=$((failures + 1))
      continue
    fi
    jq -r --arg run "$run" --arg database "$database" '
      def figure($check; $name): [.checks[] | select(.name == $check) | .figures[$name]] | first;
      def seconds($check): figure($check; "seconds") | if . == null then "–" else "\(. * 10 | round / 10) s" end;
      [.checks[] | select(.name | startswith("edge_serves")) | .figures] as $traffic
      | "| \($run) | \($database) | \([.checks[] | select(.passed)] | length) of \(.checks | length)"
        + " | \(.duration_secs | floor) | \(seconds("breaker_opens")) | \(seconds("dead_instances_leave_routes"))"
        + " | \(figure("backlog_drains_at_rate"; "rate") // 0 | . * 100 | round / 100)/s"
        + " | \([$traffic[].failed] | add) of \([$traffic[].requests] | add)"
        + " | \(figure("intake_answers_fast"; "p99_ms") // 0 | round) ms"
        + " | \([.checks[] | select(.passed | not) | "\(.name): \(.measured)"] | join("; ")) |"
    ' "$report"
    if jq -e '.passed' "$report" >/dev/null; then
      rm -f "$report" "$reports/$database-$run.log"
      if [ -n "$name" ]; then
        psql -q "$BULKHEAD_DRILL_POSTGRES/postgres" -c "DROP DATABASE $name" || true
      fi
    else
      failures=$((failures + 1))
    fi
  done
done
if [ "$failures" -gt 0 ]; then
  echo "$failures run(s) failed: their reports and logs are in $reports" >&2
  exit 1
fi
rm -rf "$reports"
