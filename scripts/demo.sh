#!/usr/bin/env bash
# The whole pipeline on embedded defaults: what `make demo` runs, step by step.
# LAKEHOUSE_TARGET=local-cluster (make demo-cluster): every job on a local Spark cluster,
# every table on a local S3 server.
set -euo pipefail
cd "$(dirname "$0")/.."
lakehouse=.venv/bin/lakehouse
demo_state=.state/demo
target=${LAKEHOUSE_TARGET:-local}
if [ "$target" = local ]; then
  export LAKEHOUSE__STORAGE__ROOT="$demo_state/lake"
fi
export LAKEHOUSE__STORAGE__LOCAL_STATE="$demo_state"
export LAKEHOUSE__QUALITY__LOCAL_DIR="$demo_state/quality"

step() { printf '\n== %s\n' "$*"; }

rm -rf "$demo_state"
trap '$lakehouse kafka stop >/dev/null; $lakehouse s3 stop >/dev/null; $lakehouse catalog stop >/dev/null; $lakehouse cluster stop >/dev/null' EXIT

step "start a Kafka broker (KRaft) and the catalog (a metastore every job shares) on 127.0.0.1"
$lakehouse kafka start
$lakehouse catalog start
if [ "$target" != local ]; then
  step "start the S3 server the lake lives on$([ "$target" = local-cluster ] && echo ', and a Spark cluster of two workers')"
  $lakehouse s3 start --bucket lakehouse
  if [ "$target" = local-cluster ]; then $lakehouse cluster start; fi
  $lakehouse storage init
fi

step "produce sensor sessions to sensors.* (with a few injected faults)"
$lakehouse produce --sensors 3 --sessions 4 --rows 200 --updates 250 --resync-every 60 \
  --fault gap=2 --fault duplicate=2 --fault reorder=1 --fault malformed_json=1 \
  --fault missing_field=1 --fault wrong_type=1 --fault oversize=1 --fault null_key=1

step "ingest Kafka into bronze.sensor_records (every record, bytes untouched)"
$lakehouse run bronze

step "rebuild every session in silver (strict sequence checks, quarantine on violation)"
$lakehouse run silver

step "build gold: session summaries, hourly and daily sensor rollups (first run: full)"
$lakehouse run gold

step "more traffic for the hours gold has aggregated, then the whole pipeline as one build"
$lakehouse produce --seed 8 --sensors 2 --sessions 2 --rows 50 --updates 100
echo "-- the graph build walks (lakehouse ls), then one Spark application runs and checks it all;"
echo "-- gold recomputes only the hours, days and sessions these records touch:"
$lakehouse ls
$lakehouse build

step "status: is it keeping up, is the data fresh? (exit 0 ok, 1 warn, 2 error)"
$lakehouse status || echo "(status exit $?: see the lines marked WARN or ERROR)"

step "compact: bin-pack small files, cluster gold tables, VACUUM (retention checked against readers' lag)"
$lakehouse compact

step "query gold by name with SQL (read-only; time travel with VERSION AS OF)"
$lakehouse sql "SELECT sensor_id, day, hours_active, sessions_active, updates,
                       round(temperature_mean, 2) AS temperature_mean
                FROM gold.sensor_daily ORDER BY sensor_id, day"
$lakehouse sql "SELECT status, count(*) AS sessions, sum(violations) AS violations,
                       round(avg(duration_seconds), 1) AS avg_seconds
                FROM gold.session_summary GROUP BY status ORDER BY status"
$lakehouse sql "SELECT sensor_id, first_run.updates AS updates_first_run, latest.updates AS updates_now
                FROM (SELECT sensor_id, sum(updates) AS updates
                      FROM gold.sensor_hourly VERSION AS OF 1 GROUP BY sensor_id) AS first_run
                JOIN (SELECT sensor_id, sum(updates) AS updates
                      FROM gold.sensor_hourly GROUP BY sensor_id) AS latest USING (sensor_id)
                ORDER BY sensor_id"
$lakehouse sql "DROP TABLE gold.sensor_daily" || echo "(refused: downstream SQL is read-only)"

step "live session state in silver's checkpoint (first 5)"
$lakehouse inspect --limit 5

step "validate every table against its expectation suite (expectations/)"
# Exit 1 means an expectation of severity `fail` failed: the demo shows it and goes on.
$lakehouse check || echo "(a table failed a blocking expectation: see above)"

step "data-quality report: a summary, the Data Docs site, and a copy published to S3"
$lakehouse s3 start --bucket reports
$lakehouse report --publish s3://reports/data-docs

step "what each table and checkpoint takes on storage"
$lakehouse storage du
