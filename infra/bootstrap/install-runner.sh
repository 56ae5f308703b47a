#!/usr/bin/env bash
# EMR bootstrap action: install sql-runner and its jar set (Spark's Kafka connector, spark-avro, the
# MSK IAM auth library and what they need) on every node.
#   install-runner.sh s3://<artifacts>/runner/ s3://<artifacts>/jars/
# The runner wheel is the newest sql_runner-*.whl under the first prefix, checked against the SHA256SUMS
# beside it; every jar under the
# second goes to /usr/lib/sql-runner/jars/ (spark.jars points there), checked against the
# SHA256SUMS that `make package` wrote beside them. The team's MSK accepts IAM authentication
# only: without these jars no job could reach it, so a node that lacks one (or holds a changed
# one) fails its bootstrap instead of running jobs that cannot connect.
set -euo pipefail
runner_prefix="${1:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
jars_prefix="${2:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

aws s3 cp --recursive --exclude '*' --include 'spark_sql_runner-*.whl' --include 'SHA256SUMS' "$runner_prefix" "$work/"
wheel="$(ls -t "$work"/spark_sql_runner-*.whl 2>/dev/null | head -n 1)"
[ -n "$wheel" ] || { echo "no spark_sql_runner wheel under $runner_prefix" >&2; exit 1; }
# the wheel as `make push-artifacts` pushed it: its checksum is written beside it
(cd "$work" && grep -E "  $(basename "$wheel")\$" SHA256SUMS 2>/dev/null | sha256sum --check --quiet --strict) \
  || { echo "runner wheel $(basename "$wheel") under $runner_prefix is missing from or differs from its SHA256SUMS (make package, then make push-artifacts)" >&2; exit 1; }

# The runner needs Python 3.11 (emr-spark-8.0.0 has it; older images get the Amazon Linux 2023 package).
command -v python3.11 >/dev/null || sudo dnf install -y -q python3.11 python3.11-pip
sudo python3.11 -m pip install --quiet "$wheel"
# EMR steps call /usr/local/bin/sql-runner; link it if pip put the script elsewhere.
if [ ! -x /usr/local/bin/sql-runner ]; then
  sudo ln -sf "$(sudo find /usr -path '*/bin/sql-runner' -type f | head -n 1)" /usr/local/bin/sql-runner
fi
/usr/local/bin/sql-runner --help >/dev/null

sudo mkdir -p /usr/lib/sql-runner/jars
sudo aws s3 cp --recursive --exclude '*' --include '*.jar' --include 'SHA256SUMS' "$jars_prefix" /usr/lib/sql-runner/jars/
[ -f /usr/lib/sql-runner/jars/SHA256SUMS ] || { echo "no SHA256SUMS under $jars_prefix (make package writes it)" >&2; exit 1; }
(cd /usr/lib/sql-runner/jars && sha256sum --check --quiet --strict SHA256SUMS) \
  || { echo "jars under $jars_prefix are missing or changed (make package, then make push-artifacts)" >&2; exit 1; }
echo "sql-runner installed from $(basename "$wheel"); jars: $(ls /usr/lib/sql-runner/jars | wc -l)"
