#!/usr/bin/env bash
# The run command: every Petrel component in one process on loopback, with
# its data under ./var/ (examples/standalone.yaml). Ctrl-C stops it.
# Started as root, petreld runs as the unprivileged user `nobody`.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=examples/standalone.yaml
RUN_AS=nobody

scripts/setup.sh
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release
fi
meson compile -C build
mkdir -p var/dict var/mail var/tls
if [ ! -f var/tls/imap.pem ]; then
  # A self-signed certificate for the IMAP listeners (loopback only).
  openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=localhost" \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout var/tls/imap.key -out var/tls/imap.pem 2>/dev/null
fi

if [ ! -f var/mail/public/dovecot-acl ]; then
  # The public namespace's root ACL (docs/acl.md): demo may create folders
  # there, demo2 read them and add to them; new folders inherit it.
  mkdir -p var/mail/public
  printf 'user=demo lrswipkxtea\nuser=demo2 lrswi\n' > var/mail/public/dovecot-acl
fi

if [ ! -s var/ring.secret ]; then
  # The director's ring secret, proven by the monitor (director.ring.secret_file
  # and the monitor's director_secret_file name this file).
  (umask 077 && openssl rand -hex 32 > var/ring.secret)
fi

cmd=(build/petreld -c "$CONFIG")
if [ "$(id -u)" -eq 0 ]; then
  chown -R "$RUN_AS" var
  as_user=(setpriv --reuid="$(id -u "$RUN_AS")" --regid="$(id -g "$RUN_AS")" --init-groups
           --inh-caps=-all --)
  if ! "${as_user[@]}" test -x build/petreld -a -r "$CONFIG" -a -w var; then
    echo "run-standalone: user $RUN_AS cannot reach $PWD (build/petreld, $CONFIG, var/);" \
         "clone the repository somewhere world-readable, e.g. under /srv or /opt" >&2
    exit 1
  fi
  cmd=("${as_user[@]}" "${cmd[@]}")
  echo "run-standalone: running petreld as $RUN_AS (uid $(id -u "$RUN_AS"))"
fi

# Where each component listens, from the effective configuration: every
# `listen`/`listen_tls` key (scalar or list) under a top-level section or one
# level below it (director.api, director.ring).
"${cmd[@]}" --check-config 2>/dev/null | awk '
  function show(addr) {
    gsub("\"", "", addr)
    printf "run-standalone: %-16s %s%s%s\n", label, label ~ /^(telemetry|backend_api)$/ ? "http://" : "", addr, tls ? " (TLS)" : ""
  }
  function key_label(line) { return line ~ /^    / ? section "." inner : section }
  /^[a-z0-9_]+:/ { section = $1; sub(":", "", section); in_list = 0; next }
  /^  [a-z0-9_]+:/ { inner = $1; sub(":", "", inner) }
  /^ +listen(_tls)?:/ {
    label = key_label($0); tls = ($1 ~ /tls/)
    if (NF > 1) { show($2); in_list = 0 } else in_list = 1
    next
  }
  in_list && /^ +- / { show($2); next }
  { in_list = 0 }'
echo "run-standalone: data under $PWD/var/; try: build/petrelctl backend health," \
     "build/petrelctl auth test demo (password demo); Ctrl-C stops"

exec "${cmd[@]}"
