#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver for tests/ui/test_browser.py, from Debian's package registry
# (apt-get only; never a browser download). Idempotent: does nothing when both are already installed.
set -euo pipefail
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
  echo "install_browser: /usr/bin/chromium and /usr/bin/chromedriver already installed"
  exit 0
fi
SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver
for exe in /usr/bin/chromium /usr/bin/chromedriver; do
  if [[ ! -x "$exe" ]]; then
    echo "install_browser: $exe is still missing after apt-get install" >&2
    exit 1
  fi
done
echo "install_browser: installed $(/usr/bin/chromedriver --version | head -n 1)"
