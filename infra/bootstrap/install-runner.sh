#!/usr/bin/env bash
# EMR bootstrap action: install sql-runner, the Kafka connector jars and the MSK IAM auth library
# on every node.
#   install-runner.sh s3://<artifacts>/runner/ s3://<artifacts>/jars/
# The runner wheel is the newest sql_runner-*.whl under the first prefix; every jar under the
# second goes to /usr/lib/sql-runner/jars/ (spark.jars points there). The team's MSK accepts
# IAM authentication only: without the connector and aws-msk-iam-auth no job could reach it,
# so a node without them fails its bootstrap instead of running jobs that cannot connect.
set -euo pipefail
runner_prefix="${1:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
jars_prefix="${2:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

aws s3 cp --recursive --exclude '*' --include 'spark_sql_runner-*.whl' "$runner_prefix" "$work/"
wheel="$(ls -t "$work"/spark_sql_runner-*.whl | head -n 1)"
[ -n "$wheel" ] || { echo "no spark_sql_runner wheel under $runner_prefix" >&2; exit 1; }

# The runner needs Python 3.11 (emr-spark-8.0.0 has it; older images get the Amazon Linux 2023 package).
command -v python3.11 >/dev/null || sudo dnf install -y -q python3.11 python3.11-pip
sudo python3.11 -m pip install --quiet "$wheel"
# EMR steps call /usr/local/bin/sql-runner; link it if pip put the script elsewhere.
if [ ! -x /usr/local/bin/sql-runner ]; then
  sudo ln -sf "$(sudo find /usr -path '*/bin/sql-runner' -type f | head -n 1)" /usr/local/bin/sql-runner
fi
/usr/local/bin/sql-runner --help >/dev/null

sudo mkdir -p /usr/lib/sql-runner/jars
sudo aws s3 cp --recursive --exclude '*' --include '*.jar' "$jars_prefix" /usr/lib/sql-runner/jars/
missing=""
for required in 'spark-sql-kafka-0-10_2.13-*.jar' 'spark-token-provider-kafka-0-10_2.13-*.jar' \
                'kafka-clients-*.jar' 'commons-pool2-*.jar' 'aws-msk-iam-auth-*-all.jar'; do
  compgen -G "/usr/lib/sql-runner/jars/$required" >/dev/null || missing="$missing $required"
done
[ -z "$missing" ] || { echo "missing under $jars_prefix:$missing (make package fetches them)" >&2; exit 1; }
echo "sql-runner installed from $(basename "$wheel"); jars: $(ls /usr/lib/sql-runner/jars | wc -l)"
