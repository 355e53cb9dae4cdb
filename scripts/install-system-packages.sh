#!/usr/bin/env bash
# The system packages the tests use, installed with apt-get when their program is missing
# (idempotent: nothing is installed when everything is there), then a Redis server on
# 127.0.0.1:6379 started when none answers there. The README's set-up and .ci/run call it;
# tests/support/system_tools.py names the programs the tests check for (its unit test checks
# that every package it names is installed here).
set -euo pipefail

# program -> Debian package
PACKAGES=(
  redis-server:redis-server
  redis-cli:redis-tools
  chromium:chromium                              # browser contexts (scrapy-playwright), the report's screenshots
  prometheus:prometheus                          # the metrics tests start their own servers on free ports
  promtool:prometheus
  prometheus-pushgateway:prometheus-pushgateway
  nginx:nginx                                    # reverse-proxy and forward-proxy tests
  tinyproxy:tinyproxy
  squid:squid
)

sudo=()
if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
# programs in sbin are found even when this user's PATH lacks it
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

need=()
for pair in "${PACKAGES[@]}"; do
  program=${pair%%:*} package=${pair#*:}
  command -v "$program" >/dev/null || need+=("$package")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q $(printf '%s\n' "${need[@]}" | sort -u)
fi

# Redis on 127.0.0.1:6379 for the tests (the packaged service is not started in a container)
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /tmp/scale-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/scale-redis --logfile /tmp/scale-redis/redis.log
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
fi
