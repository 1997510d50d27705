#!/usr/bin/env bash
# PySpark 4 needs Java 17 or newer. Install it where we may (root with apt),
# else stop with the one command that does.
set -euo pipefail
java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Java 17 is missing: installing openjdk-17-jre-headless with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi
echo "PySpark 4 needs Java 17. Install it, e.g.: sudo apt-get install -y openjdk-17-jre-headless" >&2
exit 1
