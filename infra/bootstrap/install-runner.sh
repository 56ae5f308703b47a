#!/usr/bin/env bash
# EMR bootstrap action: install sql-runner and its jar set (Spark's Kafka connector, spark-avro, the
# MSK IAM auth library and what they need, and the runner's own jar) on every node.
#   install-runner.sh s3://<artifacts>/runner/ s3://<artifacts>/jars/
# Each prefix holds a SHA256SUMS: the jars' is `make package`'s, the wheel's is written by the push
# (`make push-artifacts`, `make deploy-infra`). What they name is installed, checked against them, and
# nothing else: the wheel named under the first prefix, and the jars named under the second into
# /usr/lib/sql-runner/jars/ (spark.jars points there; their SHA256SUMS goes beside the folder, at
# /usr/lib/sql-runner/SHA256SUMS). A jar an earlier push left under the prefix (the runner's jar built
# from other sources, a connector of another version) is not installed: every file of the folder goes on
# every application's classpath, and two builds of one class there would leave which one runs to the
# order the folder is listed in. The team's MSK accepts IAM authentication only: without these jars no
# job could reach it, so a node that lacks one (or holds a changed one) fails its bootstrap instead of
# running jobs that cannot connect.
set -euo pipefail
runner_prefix="${1:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
jars_prefix="${2:?usage: install-runner.sh s3://bucket/runner/ s3://bucket/jars/}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# the names a SHA256SUMS file lists, one per line (a name in binary mode's `*name` and a CRLF line taken too)
names_in() {
  local _ name
  while read -r _ name || [ -n "$name" ]; do
    name="${name%$'\r'}"
    if [ -n "$name" ]; then printf '%s\n' "${name#\*}"; fi
  done < "$1"
}

# a name a SHA256SUMS lists, refused unless it is a plain file's of the kind (a glob) the prefix holds
check_name() {
  local prefix="$1" name="$2" kind="$3"
  # shellcheck disable=SC2254 # the kind is a glob
  case "$name" in
    */* | .* | *[][*?\\]*) echo "SHA256SUMS under $prefix names '$name', not a file of the prefix" >&2; exit 1 ;;
    $kind) ;;
    *) echo "SHA256SUMS under $prefix names '$name', not a $kind file" >&2; exit 1 ;;
  esac
}

# the files a SHA256SUMS (already in the folder) names, fetched from the prefix into the folder in one copy
fetch_named() {
  local prefix="$1" into="$2" kind="$3" name
  local -a include=()
  while read -r name; do
    check_name "$prefix" "$name" "$kind"
    include+=(--include "$name")
  done < <(names_in "$into/SHA256SUMS")
  [ ${#include[@]} -gt 0 ] || { echo "SHA256SUMS under $prefix names no $kind file" >&2; exit 1; }
  aws s3 cp --recursive --only-show-errors --exclude '*' "${include[@]}" "${prefix%/}/" "$into/" < /dev/null
  while read -r name; do
    [ -f "$into/$name" ] \
      || { echo "$name, named in SHA256SUMS, is missing under $prefix (make package, then make push-artifacts)" >&2; exit 1; }
  done < <(names_in "$into/SHA256SUMS")
}

aws s3 cp --only-show-errors "${runner_prefix%/}/SHA256SUMS" "$work/SHA256SUMS" \
  || { echo "no SHA256SUMS under $runner_prefix (make push-artifacts writes it beside the wheel)" >&2; exit 1; }
fetch_named "$runner_prefix" "$work" 'spark_sql_runner-*.whl'
wheel_name="$(names_in "$work/SHA256SUMS" | sed -n 1p)"
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
fetch_named "$jars_prefix" "$jars" '*.jar'
(cd "$jars" && sha256sum --check --quiet --strict SHA256SUMS) \
  || { echo "jars under $jars_prefix are missing or changed (make package, then make push-artifacts)" >&2; exit 1; }
sudo mkdir -p /usr/lib/sql-runner/jars
sudo cp "$jars"/*.jar /usr/lib/sql-runner/jars/
sudo cp "$jars/SHA256SUMS" /usr/lib/sql-runner/SHA256SUMS
echo "sql-runner installed from $(basename "$wheel"); jars: $(ls /usr/lib/sql-runner/jars | wc -l)"
