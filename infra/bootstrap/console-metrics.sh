#!/usr/bin/env bash
# EMR bootstrap action: on the primary node only, run `sql-runner console` as a service and ship its
# /metrics to CloudWatch with the CloudWatch agent (infra/console_metrics.py writes the files it reads).
#   console-metrics.sh s3://<artifacts>/console/
# Runs after install-runner.sh (the runner is installed). The console's token for the agent is made
# anew when the service starts (the state store keeps only its digest) and kept in a root-only file,
# never on a command line.
set -euo pipefail
prefix="${1:?usage: console-metrics.sh s3://bucket/console/}"
if ! grep -q '"isMaster": *true' /mnt/var/lib/info/instance.json; then
  echo "not the primary node: nothing to do"
  exit 0
fi
sudo mkdir -p /etc/sql-runner
sudo chmod 700 /etc/sql-runner
for file in console.args token.args prometheus.yaml cloudwatch-agent.json; do
  sudo aws s3 cp --quiet "${prefix}${file}" "/etc/sql-runner/${file}"
done

# the command lines as the stack wrote them (words in single quotes where needed), in the unit as systemd
# splits them: the token's inside the double quotes of bash -c, which keep single quotes for bash
console_command="$(sudo cat /etc/sql-runner/console.args)"
token_command="$(sudo cat /etc/sql-runner/token.args)"
sudo tee /etc/systemd/system/sql-runner-console.service >/dev/null <<UNIT
[Unit]
Description=sql-runner console (read-only) and its /metrics
After=network-online.target

[Service]
ExecStartPre=/bin/bash -c "umask 077 && exec ${token_command} > /etc/sql-runner/console-token"
ExecStart=${console_command}
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
sudo systemctl daemon-reload
sudo systemctl enable --now sql-runner-console.service

command -v /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl >/dev/null \
  || sudo dnf install -y -q amazon-cloudwatch-agent
sudo /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl \
  -a fetch-config -m ec2 -s -c file:/etc/sql-runner/cloudwatch-agent.json
echo "sql-runner console and its CloudWatch metrics set up"
