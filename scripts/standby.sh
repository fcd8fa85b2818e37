#!/usr/bin/env bash
# A hot standby of the test server of scripts/age-server.sh: streaming replication, in the same
# Debian trixie root, on a second port. Needs root (chroot), like age-server.sh.
#
# Usage: scripts/standby.sh [start|stop|status|dsn|rebuild]
#   start   (default) start the primary if needed (age-server.sh start), make the standby with
#           pg_basebackup if it is missing or no longer a copy of this primary (another initdb, its
#           replication slot lost), start it if not running, wait until it streams; prints exactly
#           one line on stdout: the standby's DSN.
#   stop    stop the standby (fast shutdown); the primary keeps running.
#   status  prints "running <pid> <port>" (exit 0), "stopped" (exit 3) or "absent" (exit 4).
#   dsn     prints the standby's DSN.
#   rebuild stop the standby, remove its data directory and start it again from a new base backup.
#
# Environment: MEMORIA_AGE_ROOT, MEMORIA_AGE_PORT (the primary, as for age-server.sh) and
#   MEMORIA_STANDBY_PORT  TCP port of the standby on 127.0.0.1 (default 55433)
#
# The primary keeps WAL for the standby in the physical replication slot `memoria_standby`, at most
# max_slot_wal_keep_size (2GB, set with ALTER SYSTEM): a standby stopped for long loses its slot and is
# rebuilt by the next start. Idempotent: a second `start` reuses the running standby (about 0.1 s).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="${MEMORIA_AGE_ROOT:-/var/tmp/memoria-age-root}"
ROOT="${ROOT%/}"
PRIMARY_PORT="${MEMORIA_AGE_PORT:-55432}"
PORT="${MEMORIA_STANDBY_PORT:-55433}"
DB=memoria
SLOT=memoria_standby
PGBIN=/usr/lib/postgresql/17/bin
BASE=/var/lib/memoria            # paths below are inside the root
PRIMARY_DATA="$BASE/data"
DATA="$BASE/standby"
RUNDIR="$BASE/run"
LOG="$BASE/standby.log"

log() { printf 'standby: %s\n' "$*" >&2; }
die() { printf 'standby: error: %s\n' "$*" >&2; exit 1; }

[[ "$PORT" =~ ^[0-9]+$ ]] || die "MEMORIA_STANDBY_PORT must be a number, got '$PORT'"
[[ "$PORT" != "$PRIMARY_PORT" ]] || die "MEMORIA_STANDBY_PORT must differ from the primary's port $PRIMARY_PORT"

dsn() { printf 'postgresql://postgres@127.0.0.1:%s/%s\n' "$1" "$DB"; }

pg_ids() {
    PG_UID=$(awk -F: '$1 == "postgres" { print $3 }' "$ROOT/etc/passwd")
    PG_GID=$(awk -F: '$1 == "postgres" { print $4 }' "$ROOT/etc/passwd")
    [[ -n "$PG_UID" && -n "$PG_GID" ]] || die "no postgres user in $ROOT/etc/passwd"
}

as_pg() {  # as_pg PORT command...: inside the root as postgres
    chroot --userspec="$PG_UID:$PG_GID" "$ROOT" /usr/bin/env -i \
        HOME=/var/lib/postgresql USER=postgres LOGNAME=postgres LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        PATH="$PGBIN:/usr/bin:/bin" PGHOST="$RUNDIR" PGPORT="$1" PGUSER=postgres \
        "${@:2}"
}

psql_at() { as_pg "$1" psql -X -v ON_ERROR_STOP=1 -d postgres -tAc "$2" </dev/null; }

running() {  # pid and port of the running standby postmaster, or fails
    local pidfile="$ROOT$DATA/postmaster.pid" pid port
    [[ -f "$pidfile" ]] || return 1
    pid=$(sed -n 1p "$pidfile")
    port=$(sed -n 4p "$pidfile")
    [[ "$pid" =~ ^[0-9]+$ && -d "/proc/$pid" ]] || return 1
    [[ "$(readlink -f "/proc/$pid/root" 2>/dev/null)" == "$(readlink -f "$ROOT")" ]] || return 1
    printf '%s %s\n' "$pid" "$port"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

system_id() { as_pg "$PRIMARY_PORT" pg_controldata "$1" 2>/dev/null | awk -F: '/Database system identifier/ { gsub(/ /, "", $2); print $2 }'; }

# The standby's data directory is usable: a base backup of this primary whose slot still holds its WAL.
usable() {
    [[ -f "$ROOT$DATA/PG_VERSION" && -f "$ROOT$DATA/standby.signal" ]] || return 1
    [[ "$(system_id "$DATA")" == "$(system_id "$PRIMARY_DATA")" ]] || { log "the standby is a copy of another primary"; return 1; }
    local status
    status=$(psql_at "$PRIMARY_PORT" "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = '$SLOT'")
    [[ -n "$status" && "$status" != lost ]] || { log "replication slot $SLOT is missing or lost"; return 1; }
}

base_backup() {
    log "pg_basebackup of 127.0.0.1:$PRIMARY_PORT into $ROOT$DATA"
    rm -rf --one-file-system "$ROOT$DATA"
    psql_at "$PRIMARY_PORT" "SELECT pg_drop_replication_slot('$SLOT') FROM pg_replication_slots WHERE slot_name = '$SLOT' AND NOT active" >/dev/null
    psql_at "$PRIMARY_PORT" "ALTER SYSTEM SET max_slot_wal_keep_size = '2GB'" >/dev/null
    psql_at "$PRIMARY_PORT" "SELECT pg_reload_conf()" >/dev/null
    local t0=$SECONDS
    as_pg "$PRIMARY_PORT" pg_basebackup -h "$RUNDIR" -p "$PRIMARY_PORT" -U postgres -D "$DATA" \
        -X stream -c fast -R -C -S "$SLOT" >&2 9>&- || die "pg_basebackup failed"
    log "base backup made in $((SECONDS - t0)) s"
}

# The primary's settings (memoria.conf, rewritten by age-server.sh) with the standby's port and log.
write_conf() {
    local conf="$ROOT$DATA/memoria.conf"
    sed -e "s/^port = .*/port = $PORT/" "$ROOT$PRIMARY_DATA/memoria.conf" >"$conf.new"
    cat >>"$conf.new" <<EOF
# the standby (scripts/standby.sh)
hot_standby = on
# Off: with feedback the slot holds the primary's xmin horizon for every database of the cluster (and
# a status interval behind), so VACUUM could not mark a just-written test database's pages all-visible
# and the covering-index tests saw heap fetches. A standby query that a vacuum conflicts with is
# cancelled and the router re-runs it elsewhere (tests/test_replicas.py).
hot_standby_feedback = off
wal_receiver_status_interval = 1s
EOF
    chown "$PG_UID:$PG_GID" "$conf.new"
    mv "$conf.new" "$conf"
}

wait_streaming() {
    local i
    for i in $(seq 1 300); do
        if [[ "$(psql_at "$PORT" "SELECT status FROM pg_stat_wal_receiver" 2>/dev/null)" == streaming ]]; then
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$ROOT$LOG" >&2 || true
    die "the standby on port $PORT does not stream from the primary after 30 s"
}

cmd_start() {
    [[ $EUID -eq 0 ]] || die "must run as root (chroot)"
    bash "$HERE/age-server.sh" start >/dev/null
    exec 9>"$ROOT.standby.lock"
    flock 9
    pg_ids
    local state pid port
    if state=$(running); then
        read -r pid port <<<"$state"
        [[ "$port" == "$PORT" ]] || die "the standby already runs on port $port (pid $pid); use MEMORIA_STANDBY_PORT=$port"
        log "standby already running (pid $pid, port $port)"
    else
        port_busy "$PORT" && die "port $PORT on 127.0.0.1 is in use by another program; set MEMORIA_STANDBY_PORT"
        usable || base_backup
        write_conf
        touch "$ROOT$LOG" && chown "$PG_UID:$PG_GID" "$ROOT$LOG"
        log "starting the standby on 127.0.0.1:$PORT (log: $ROOT$LOG)"
        if ! setsid -w chroot --userspec="$PG_UID:$PG_GID" "$ROOT" /usr/bin/env -i \
            HOME=/var/lib/postgresql LANG=C.UTF-8 LC_ALL=C.UTF-8 PATH="$PGBIN:/usr/bin:/bin" \
            pg_ctl start -w -t 120 -D "$DATA" -l "$LOG" </dev/null >&2 9>&-; then
            tail -n 30 "$ROOT$LOG" >&2 || true
            die "the standby did not start"
        fi
    fi
    wait_streaming
    dsn "$PORT"
}

cmd_stop() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    [[ -d "$ROOT" ]] || { log "no root at $ROOT"; return 0; }
    exec 9>"$ROOT.standby.lock"
    flock 9
    if running >/dev/null; then
        pg_ids
        log "stopping the standby"
        as_pg "$PORT" pg_ctl stop -w -m fast -D "$DATA" </dev/null >&2 9>&-
    else
        log "standby not running"
    fi
}

cmd_status() {
    local state pid port
    [[ -f "$ROOT$DATA/PG_VERSION" ]] || { echo absent; return 4; }
    if state=$(running); then
        read -r pid port <<<"$state"
        echo "running $pid $port"
        return 0
    fi
    echo stopped
    return 3
}

case "${1:-start}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    dsn) dsn "$PORT" ;;
    rebuild) cmd_stop && rm -rf --one-file-system "${ROOT:?}$DATA" && cmd_start ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (start|stop|status|dsn|rebuild)" ;;
esac
