#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install the Debian packages named that are not installed yet on this machine: one apt-get run, none when every one is
# there. The one install loop of the setup (the Makefile and the sandbox/*/rules.mk files call it).
#
#   sandbox/apt_ensure.sh WHO PKG...     WHO names the caller in the one line it prints
set -euo pipefail
who=$1
shift
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "$who: installing ${missing[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
