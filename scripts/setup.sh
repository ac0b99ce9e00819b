#!/usr/bin/env bash
# Installs every Debian package Petrel needs to build, run and test. Idempotent.
set -euo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  libevent-dev libssl-dev libjansson-dev libyaml-dev libcmocka-dev
  libsqlite3-dev libpq-dev libhiredis-dev libcrypt-dev libargon2-dev
  libcurl4-openssl-dev zlib1g-dev
  python3 python3-pytest openssl curl wrk whois apache2-utils argon2 swaks
  redis-server redis-tools postgresql prometheus dovecot-imapd dovecot-pop3d isync mutt strace
  postfix
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Keep package post-install scripts from starting system services (redis, postgresql).
if [ ! -e /usr/sbin/policy-rc.d ] && [ "$(id -u)" -eq 0 ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
echo "setup: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
