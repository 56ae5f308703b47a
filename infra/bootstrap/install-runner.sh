#!/usr/bin/env bash
# EMR bootstrap action: install sql-runner and its jar set (Spark's Kafka connector, spark-avro, the
# MSK IAM auth library and what they need, and the runner's own jar) on every node.
#   install-runner.sh s3://<artifacts>/runner/ s3://<artifacts>/jars/
# Each prefix holds a SHA256SUMS that `make package` wrote and `make push-artifacts` pushed last. What it
# names is installed, checked against it, and nothing else: the wheel it names under the first prefix, and
# the jars it names under the second into /usr/lib/sql-runner/jars/ (spark.jars points there). A jar an
# earlier push left under the prefix (the runner's jar built from other sources, a connector of another
# version) stays out of the folder: every jar in it is on every application's classpath, and two builds
# of one class there would leave which one runs to the order the JVM lists the folder in. The team's MSK
# accepts IAM authentication only: without these jars no job could reach it, so a node that lacks one
# (or holds a changed one) fails its bootstrap instead of running jobs that cannot connect.
set -euo pipefail
runner_prefix="${1:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
jars_prefix="${2:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# one file SHA256SUMS names, fetched from the prefix into a folder: refuses a name that is not a plain file's
fetch_named() {
  local prefix="$1" name="$2" into="$3"
  case "$name" in
    '' | */* | .*) echo "SHA256SUMS under $prefix names '$name', not a file of the prefix" >&2; exit 1 ;;
  esac
  aws s3 cp --only-show-errors "${prefix%/}/$name" "$into/$name" \
    || { echo "$name, named in SHA256SUMS, is missing under $prefix (make package, then make push-artifacts)" >&2; exit 1; }
}

aws s3 cp --only-show-errors "${runner_prefix%/}/SHA256SUMS" "$work/SHA256SUMS" \
  || { echo "no SHA256SUMS under $runner_prefix (make push-artifacts writes it beside the wheel)" >&2; exit 1; }
read -r _ wheel_name < "$work/SHA256SUMS" || true
case "$wheel_name" in
  spark_sql_runner-*.whl) ;;
  *) echo "SHA256SUMS under $runner_prefix names no spark_sql_runner wheel" >&2; exit 1 ;;
esac
fetch_named "$runner_prefix" "$wheel_name" "$work"
wheel="$work/$wheel_name"
(cd "$work" && sha256sum --check --quiet --strict SHA256SUMS) \
  || { echo "runner wheel $wheel_name under $runner_prefix is missing from or differs from its SHA256SUMS (make package, then make push-artifacts)" >&2; exit 1; }

# The runner needs Python 3.11 (emr-spark-8.0.0 has it; older images get the Amazon Linux 2023 package).
command -v python3.11 >/dev/null || sudo dnf install -y -q python3.11 python3.11-pip
sudo python3.11 -m pip install --quiet "$wheel"
# EMR steps call /usr/local/bin/sql-runner; link it if pip put the script elsewhere.
if [ ! -x /usr/local/bin/sql-runner ]; then
  sudo ln -sf "$(sudo find /usr -path '*/bin/sql-runner' -type f | head -n 1)" /usr/local/bin/sql-runner
fi
/usr/local/bin/sql-runner --help >/dev/null

jars="$work/jars"
mkdir -p "$jars"
aws s3 cp --only-show-errors "${jars_prefix%/}/SHA256SUMS" "$jars/SHA256SUMS" \
  || { echo "no SHA256SUMS under $jars_prefix (make package writes it)" >&2; exit 1; }
while read -r _ name; do
  fetch_named "$jars_prefix" "$name" "$jars"
done < "$jars/SHA256SUMS"
(cd "$jars" && sha256sum --check --quiet --strict SHA256SUMS) \
  || { echo "jars under $jars_prefix are missing or changed (make package, then make push-artifacts)" >&2; exit 1; }
sudo mkdir -p /usr/lib/sql-runner/jars
sudo cp "$jars"/* /usr/lib/sql-runner/jars/
echo "sql-runner installed from $(basename "$wheel"); jars: $(ls /usr/lib/sql-runner/jars | wc -l)"
