#!/usr/bin/env bash
# Debian's Chromium, for the tests that render published pages in a real browser.
# Idempotent: installs only when /usr/bin/chromium is missing; prints one line either way.
set -euo pipefail
version() { /usr/bin/chromium --version 2>/dev/null; }  # the launcher warns on stderr
if [ -x /usr/bin/chromium ]; then
  echo "chromium: $(version) (already installed)"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif command -v sudo >/dev/null; then
  sudo="sudo"
else
  echo "install-chromium: /usr/bin/chromium is missing and installing it needs root: run as root or install sudo (apt-get install chromium)" >&2
  exit 1
fi
$sudo apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "chromium: $(version) (installed)"
