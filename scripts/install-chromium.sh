#!/usr/bin/env bash
# Debian's Chromium, for the test that renders the Data Docs site in a real browser.
# Idempotent: does nothing when /usr/bin/chromium is there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif command -v sudo >/dev/null; then
  sudo="sudo"
else
  echo "install-chromium: /usr/bin/chromium is missing and installing it needs root (apt-get install chromium)" >&2
  exit 1
fi
echo "installing Debian's chromium (headless browser for the Data Docs test) ..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "chromium: $(/usr/bin/chromium --version)"
