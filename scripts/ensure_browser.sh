#!/usr/bin/env bash
# The WebDataset view's browser test drives Debian's chromium through
# chromium-driver. Install them where we may (root with apt); elsewhere say
# how, and carry on: that one test is skipped with the reason.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium/chromedriver missing: installing chromium chromium-driver with apt-get" >&2
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; then
    exit 0
  fi
  echo "apt-get could not install chromium chromium-driver; the browser test will be skipped" >&2
  exit 0
fi
echo "chromium and chromedriver are missing (sudo apt-get install -y chromium chromium-driver);" \
  "the browser test will be skipped" >&2
exit 0
