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

step "produce 1,000,000 records: 20 sensors x 25 overlapping sessions, three of every fault kind"
$lakehouse produce --sensors 20 --sessions 25 --rows 200 --updates 2000 --resync-every 600 \
  --fault gap=3 --fault duplicate=3 --fault reorder=3 --fault malformed_json=3 \
  --fault missing_field=3 --fault wrong_type=3 --fault oversize=3 --fault null_key=3

step "the graph lakehouse build walks: streams, gold models and every table's checks"
$lakehouse ls

step "build it all in one Spark application: Kafka -> bronze -> silver -> gold, each table checked"
# Exit 1 would mean a `fail` expectation failed: the demo shows it and goes on.
$lakehouse build || echo "(a node failed: see above)"

step "run it as deployed (run all --continuous) while traffic flows, and ask status meanwhile"
log="$demo_state/run-all.log"
LAKEHOUSE__GOLD__EVERY_SECONDS=15 $lakehouse run all --continuous > "$log" 2>&1 &
pipeline=$!
$lakehouse produce --seed 8 --sensors 20 --first-sensor 21 --sessions 1 --rows 50 \
  --updates 950 --rate 1000 > /dev/null
$lakehouse status || echo "(status exit $?: see the lines marked WARN or ERROR)"
# until gold has taken in the new records (at most 3 minutes), then SIGTERM
for _ in $(seq 90); do grep -q "^gold: .*incremental" "$log" && break; sleep 2; done
kill -TERM "$pipeline"
wait "$pipeline" || echo "(run all exit $?)"
echo "-- what the continuous run printed:"
grep -E "^(run all|bronze|silver|gold): |wrote" "$log" | tail -12

step "query gold by name with SQL (read-only; time travel with VERSION AS OF)"
$lakehouse sql "SELECT sensor_id, day, hours_active, sessions_active, updates,
                       round(temperature_mean, 2) AS temperature_mean
                FROM gold.sensor_daily ORDER BY updates DESC LIMIT 5"
$lakehouse sql "SELECT status, count(*) AS sessions, sum(violations) AS violations,
                       round(avg(duration_seconds), 1) AS avg_seconds
                FROM gold.session_summary GROUP BY status ORDER BY status"
$lakehouse sql "SELECT 'after the build' AS gold_sensor_hourly, count(DISTINCT sensor_id) AS sensors,
                       sum(updates) AS updates FROM gold.sensor_hourly VERSION AS OF 1
                UNION ALL
                SELECT 'now', count(DISTINCT sensor_id), sum(updates) FROM gold.sensor_hourly"
$lakehouse sql "DROP TABLE gold.sensor_daily" || echo "(refused: downstream SQL is read-only)"

step "the violations silver found, by reason (each injected fault under its own)"
$lakehouse sql "SELECT reason, count(*) AS violations, count(DISTINCT sensor_id) AS sensors
                FROM silver.violations GROUP BY reason ORDER BY violations DESC"

step "explain one session the faults hit: its records in Kafka and bronze, silver's view, its gold rows"
session=$($lakehouse sql "SELECT concat(sensor_id, '/', session_id) AS session FROM silver.sessions
                          WHERE gaps > 0 ORDER BY sensor_id, session_id LIMIT 1" --format csv | tail -1)
$lakehouse explain "$session" || echo "(explain exit $?: see above)"

step "data-quality report: a summary, the Data Docs site, and a copy published to S3"
$lakehouse s3 start --bucket reports
$lakehouse report --publish s3://reports/data-docs

step "where the tables are: files and bytes of each table and checkpoint"
$lakehouse storage du
