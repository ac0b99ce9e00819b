# Shell helpers the callgrind benches share (sourced by imap-cpu.sh and
# lmtp-cpu.sh): the work directory's clean-up, a free loopback port, waiting
# for a started petreld's port, and stopping one. The caller sets `work` (a
# directory it made), `pids` (an array of the daemons it started) and may set
# PYTHON and WAIT_TRIES (50 ms each) before sourcing.

PYTHON="${PYTHON:-/usr/bin/python3}"
WAIT_TRIES="${WAIT_TRIES:-600}"

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  if [ -n "${CPU_KEEP:-}" ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # port pid log
  for _ in $(seq "$WAIT_TRIES"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  echo "petreld did not start:" >&2
  cat "$3" >&2
  exit 1
}

stop() { # pid
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local keep=()
  for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done
  pids=("${keep[@]}")
}
