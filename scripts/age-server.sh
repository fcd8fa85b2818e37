#!/usr/bin/env bash
# PostgreSQL 17 + pgvector + Apache AGE for tests and development, without Docker.
#
# Debian bookworm packages neither pgvector nor AGE; Debian trixie does. This script builds a
# trixie root with debootstrap (mirror taken from this machine's apt sources), runs initdb in it
# and starts the server on 127.0.0.1 as the chroot's `postgres` user. Needs root.
#
# Usage: scripts/age-server.sh [start|stop|status|dsn]
#   start   (default) build the root if missing, initdb if missing, start the server if not
#           running, create database `memoria`; prints exactly one line on stdout: the DSN.
#   stop    stop the server (fast shutdown), and its standby (scripts/standby.sh) if one runs, and
#           unmount /proc and /dev/shm in the root.
#   status  prints "running <pid> <port>" (exit 0), "stopped" (exit 3) or "absent" (exit 4).
#   dsn     prints the DSN (of the running server, else of the configured port).
#
# Environment:
#   MEMORIA_AGE_ROOT    root directory (default /var/tmp/memoria-age-root)
#   MEMORIA_AGE_PORT    TCP port on 127.0.0.1 (default 55432)
#   MEMORIA_AGE_MIRROR  Debian mirror URL (default: parsed from /etc/apt sources)
#   MEMORIA_AGE_SHARED_BUFFERS  shared_buffers (default 1GB; the 1M benchmark's HNSW indexes, 1.5 GB,
#                       need more to stay in PostgreSQL's cache: docs/measurements.md, "Scale and latency")
#
# Everything except the DSN / status line goes to stderr, so `MEMORIA_DSN=$(scripts/age-server.sh)`
# works. Idempotent: a second `start` reuses the root, the data dir and a running server.
set -euo pipefail

ROOT="${MEMORIA_AGE_ROOT:-/var/tmp/memoria-age-root}"
ROOT="${ROOT%/}"
PORT="${MEMORIA_AGE_PORT:-55432}"
DB=memoria
PGBIN=/usr/lib/postgresql/17/bin
BASE=/var/lib/memoria            # paths below are inside the root
DATA="$BASE/data"
RUNDIR="$BASE/run"                # unix socket directory
LOG="$BASE/postgresql.log"
PACKAGES=postgresql-17,postgresql-17-pgvector,postgresql-17-age

log() { printf 'age-server: %s\n' "$*" >&2; }
die() { printf 'age-server: error: %s\n' "$*" >&2; exit 1; }

[[ "$PORT" =~ ^[0-9]+$ ]] || die "MEMORIA_AGE_PORT must be a number, got '$PORT'"

dsn() { printf 'postgresql://postgres@127.0.0.1:%s/%s\n' "$1" "$DB"; }

# --- the Debian mirror -------------------------------------------------------------------------
# First URI of a deb822 stanza (/etc/apt/sources.list.d/*.sources) of Types deb with component
# main that is not the security archive; else the same from one-line `deb` entries.
find_mirror() {
    if [[ -n "${MEMORIA_AGE_MIRROR:-}" ]]; then
        printf '%s\n' "$MEMORIA_AGE_MIRROR"
        return
    fi
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r "$f" ]] || continue
        uri=$(awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && comps ~ /(^| )main( |$)/ && enabled != "no" \
                    && uris != "" && suites !~ /security/ && uris !~ /security/) {
                    split(uris, u, " "); print u[1]; found = 1; exit
                }
                types = uris = suites = comps = enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            {
                key = tolower($1); sub(/:$/, "", key)
                val = $0; sub(/^[^:]*:[ \t]*/, "", val); gsub(/[ \t]+/, " ", val)
                if (key == "types") types = val
                else if (key == "uris") uris = val
                else if (key == "suites") suites = val
                else if (key == "components") comps = val
                else if (key == "enabled") enabled = tolower(val)
            }
            END { if (!found) flush() }
        ' "$f")
        if [[ -n "$uri" ]]; then printf '%s\n' "$uri"; return; fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r "$f" ]] || continue
        uri=$(awk '
            $1 != "deb" { next }
            {
                line = $0; sub(/^deb[ \t]+/, "", line)
                if (line ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "", line)   # [arch=... signed-by=...]
                n = split(line, w, /[ \t]+/)
                if (n < 3 || w[2] ~ /security/ || w[1] ~ /security/) next
                for (i = 3; i <= n; i++) if (w[i] == "main") { print w[1]; exit }
            }
        ' "$f")
        if [[ -n "$uri" ]]; then printf '%s\n' "$uri"; return; fi
    done
    die "no Debian 'main' mirror found in /etc/apt/sources.list{,.d/*}; set MEMORIA_AGE_MIRROR"
}

# --- helpers -----------------------------------------------------------------------------------
built() { [[ -x "$ROOT$PGBIN/postgres" && -f "$ROOT/.memoria-age-complete" ]]; }

pg_ids() {
    PG_UID=$(awk -F: '$1 == "postgres" { print $3 }' "$ROOT/etc/passwd")
    PG_GID=$(awk -F: '$1 == "postgres" { print $4 }' "$ROOT/etc/passwd")
    [[ -n "$PG_UID" && -n "$PG_GID" ]] || die "no postgres user in $ROOT/etc/passwd"
}

# Run a command inside the root as postgres, with a clean environment.
as_pg() {
    chroot --userspec="$PG_UID:$PG_GID" "$ROOT" /usr/bin/env -i \
        HOME=/var/lib/postgresql USER=postgres LOGNAME=postgres LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        PATH="$PGBIN:/usr/bin:/bin" PGHOST="$RUNDIR" PGPORT="$1" PGUSER=postgres \
        "${@:2}"
}

# Unmount everything at or below a directory (deepest first).
umount_below() {
    local dir m
    dir=$(readlink -f "$1")
    awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do
            m=$(printf '%b' "$m")          # /proc/mounts escapes spaces as \040
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
        done
}

mount_fs() {
    mkdir -p "$ROOT/proc" "$ROOT/dev/shm"
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    # PostgreSQL needs POSIX shared memory (dynamic_shared_memory_type=posix); tmpfs pages are
    # only used as allocated, the size is a ceiling for parallel-query segments.
    mountpoint -q "$ROOT/dev/shm" || mount -t tmpfs -o mode=1777,size=4g,nosuid,nodev tmpfs "$ROOT/dev/shm"
    local n
    for n in null zero random urandom; do
        [[ -c "$ROOT/dev/$n" ]] || die "$ROOT/dev/$n is missing (debootstrap should have made it)"
    done
}

# Prints the pid and port of our running postmaster, or fails.
running() {
    local pidfile="$ROOT$DATA/postmaster.pid" pid port
    [[ -f "$pidfile" ]] || return 1
    pid=$(sed -n 1p "$pidfile")
    port=$(sed -n 4p "$pidfile")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -d "/proc/$pid" ]] || return 1
    # the pid must be a postgres whose root is our root (not a recycled pid)
    [[ "$(readlink -f "/proc/$pid/root" 2>/dev/null)" == "$(readlink -f "$ROOT")" ]] || return 1
    printf '%s %s\n' "$pid" "$port"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- build -------------------------------------------------------------------------------------
build_root() {
    [[ ! -e "$ROOT" ]] || die "$ROOT exists but is not a complete root made by this script; remove it or set MEMORIA_AGE_ROOT"
    if ! command -v debootstrap >/dev/null && command -v apt-get >/dev/null; then
        log "installing debootstrap with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } >&2 \
            || die "could not install debootstrap (apt-get install debootstrap)"
    fi
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    local mirror tmp partial t0
    mirror=$(find_mirror)
    # stale half-made roots of interrupted runs (we hold the lock, so nobody is building them)
    for partial in "$ROOT".partial.*; do
        [[ -e "$partial" ]] || continue
        log "removing unfinished build $partial"
        umount_below "$partial"
        rm -rf --one-file-system "$partial"
    done
    tmp="$ROOT.partial.$$"
    log "building Debian trixie root in $tmp from $mirror (about a minute)"
    t0=$SECONDS
    if ! debootstrap --variant=minbase --include="$PACKAGES" trixie "$tmp" "$mirror" >&2; then
        umount_below "$tmp"
        die "debootstrap failed; see $tmp/debootstrap/debootstrap.log (the partial root is removed on the next run)"
    fi
    umount_below "$tmp"
    [[ -x "$tmp$PGBIN/postgres" ]] || die "postgres binary missing in $tmp"
    [[ -f "$tmp/usr/share/postgresql/17/extension/vector.control" ]] || die "pgvector missing in $tmp"
    [[ -f "$tmp/usr/share/postgresql/17/extension/age.control" ]] || die "AGE missing in $tmp"
    # the package's default cluster and the downloaded .debs are not used
    rm -rf "$tmp/var/lib/postgresql/17/main" "$tmp/etc/postgresql/17/main"
    rm -f "$tmp"/var/cache/apt/archives/*.deb
    touch "$tmp/.memoria-age-complete"
    mv -T "$tmp" "$ROOT"
    log "root built in $((SECONDS - t0)) s"
}

init_data() {
    [[ -f "$ROOT$DATA/PG_VERSION" ]] && return
    log "initdb in $ROOT$DATA"
    rm -rf "$ROOT$DATA"
    install -d -o "$PG_UID" -g "$PG_GID" -m 0700 "$ROOT$BASE" "$ROOT$DATA"
    as_pg "$PORT" initdb -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=trust >&2
    printf "\ninclude 'memoria.conf'\n" >>"$ROOT$DATA/postgresql.conf"
}

write_conf() {
    [[ "${MEMORIA_AGE_SHARED_BUFFERS:-1GB}" =~ ^[0-9]+(kB|MB|GB|TB)?$ ]] ||
        die "MEMORIA_AGE_SHARED_BUFFERS must be a size such as 1GB or 4096MB, not '$MEMORIA_AGE_SHARED_BUFFERS'"
    install -d -o "$PG_UID" -g "$PG_GID" -m 0755 "$ROOT$RUNDIR"
    local conf="$ROOT$DATA/memoria.conf"
    # MEMORIA_AGE_STAT_STATEMENTS=1 also loads pg_stat_statements (benchmarks/overhead.py reads it);
    # off by default: it adds its own cost to every statement the other benchmarks time.
    local PRELOAD=age
    [[ "${MEMORIA_AGE_STAT_STATEMENTS:-0}" == 1 ]] && PRELOAD="age,pg_stat_statements"
    cat >"$conf.new" <<EOF
# written by scripts/age-server.sh on every start; edit the script, not this file
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$RUNDIR'
shared_preload_libraries = '$PRELOAD'
max_connections = 200
shared_buffers = ${MEMORIA_AGE_SHARED_BUFFERS:-1GB}
work_mem = 16MB
maintenance_work_mem = 512MB
effective_cache_size = 12GB
max_wal_size = 4GB
random_page_cost = 1.1
timezone = 'UTC'
log_timezone = 'UTC'
EOF
    chown "$PG_UID:$PG_GID" "$conf.new"
    mv "$conf.new" "$conf"
}

# --- subcommands -------------------------------------------------------------------------------
cmd_start() {
    [[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot, mount)"
    exec 9>"$ROOT.lock"
    flock 9
    built || build_root
    pg_ids
    mount_fs
    local state pid port
    if state=$(running); then
        read -r pid port <<<"$state"
        [[ "$port" == "$PORT" ]] ||
            die "our server is already running on port $port (pid $pid); use MEMORIA_AGE_PORT=$port or '$0 stop' first"
        log "server already running (pid $pid, port $port)"
    else
        port_busy "$PORT" && die "port $PORT on 127.0.0.1 is in use by another program; set MEMORIA_AGE_PORT"
        init_data
        write_conf
        log "starting PostgreSQL on 127.0.0.1:$PORT (log: $ROOT$LOG)"
        touch "$ROOT$LOG" && chown "$PG_UID:$PG_GID" "$ROOT$LOG"
        # new session so the server outlives this script and its process group; no inherited
        # stdout (callers capture it) and no lock fd (the next run would wait forever)
        if ! setsid -w chroot --userspec="$PG_UID:$PG_GID" "$ROOT" /usr/bin/env -i \
            HOME=/var/lib/postgresql LANG=C.UTF-8 LC_ALL=C.UTF-8 PATH="$PGBIN:/usr/bin:/bin" \
            pg_ctl start -w -t 120 -D "$DATA" -l "$LOG" </dev/null >&2 9>&-; then
            tail -n 30 "$ROOT$LOG" >&2 || true
            die "PostgreSQL did not start"
        fi
    fi
    if [[ -z "$(as_pg "$PORT" psql -X -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" </dev/null)" ]]; then
        log "creating database $DB"
        as_pg "$PORT" createdb "$DB" </dev/null >&2
    fi
    dsn "$PORT"
}

cmd_stop() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    [[ -d "$ROOT" ]] || { log "no root at $ROOT"; return 0; }
    exec 9>"$ROOT.lock"
    flock 9
    if running >/dev/null; then
        pg_ids
        log "stopping PostgreSQL"
        as_pg "$PORT" pg_ctl stop -w -m fast -D "$DATA" </dev/null >&2 9>&-
    else
        log "server not running"
    fi
    # a hot standby in the same root (scripts/standby.sh) needs the mounts below: stop it first
    if [[ -f "$(dirname "$0")/standby.sh" ]]; then bash "$(dirname "$0")/standby.sh" stop 9>&- || true; fi
    local m
    for m in "$ROOT/dev/shm" "$ROOT/proc"; do
        if mountpoint -q "$m"; then umount "$m" || log "could not unmount $m"; fi
    done
}

cmd_status() {
    local state pid port
    if ! built; then echo absent; return 4; fi
    if state=$(running); then
        read -r pid port <<<"$state"
        echo "running $pid $port"
        return 0
    fi
    echo stopped
    return 3
}

cmd_dsn() {
    local state pid port="$PORT"
    if state=$(running); then read -r pid port <<<"$state"; fi
    dsn "$port"
}

case "${1:-start}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    dsn) cmd_dsn ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (start|stop|status|dsn)" ;;
esac
