#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A throwaway PostgreSQL server for the run history's tests (tests/system/test_history_db.py), as .ci/run uses it:
#     eval "$(bash scripts/postgres.sh start)"   # prints the exports: EVALKIT_TEST_POSTGRES_URL, EVALKIT_TEST_POSTGRES_DIR
#     bash scripts/postgres.sh stop "$EVALKIT_TEST_POSTGRES_DIR"
# start: installs Debian's `postgresql` package when no initdb is found (as root: apt-get; no cluster of the
# package's own is created), makes a cluster in a new temp dir (password auth, a random password, fsync off),
# and starts it on a free loopback port; run as root, the server runs as the package's `postgres` user (initdb
# refuses root). Idempotent: each start makes a new cluster; nothing outside its temp dir is changed but the
# package install. Progress goes to stderr, the exports alone to stdout.
set -euo pipefail

say() { echo "[postgres] $*" >&2; }

find_bin() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
    done
    return 1
}

start() {
    local bin dir port user password url
    if ! bin=$(find_bin); then
        [[ $(id -u) -eq 0 ]] || { say "no PostgreSQL found; install Debian's postgresql package (as root)"; exit 1; }
        say "installing Debian's postgresql package"
        export DEBIAN_FRONTEND=noninteractive
        # postgresql-common first, told to make no cluster of its own (as the official postgres image does)
        (apt-get update -qq && apt-get install -y -qq postgresql-common >/dev/null) >&2
        sed -ri 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*$/create_main_cluster = false/' \
            /etc/postgresql-common/createcluster.conf
        apt-get install -y -qq postgresql >/dev/null
        bin=$(find_bin) || { say "the postgresql package installed no initdb"; exit 1; }
    fi
    dir=$(mktemp -d /tmp/evalkit-postgres.XXXXXX)
    user=$(id -un)
    if [[ $(id -u) -eq 0 ]]; then
        user=postgres
        id -u "$user" >/dev/null 2>&1 || user=nobody
        chown "$user" "$dir"
    fi
    as() { if [[ $(id -un) == "$user" ]]; then "$@"; else runuser -u "$user" -- "$@"; fi; }
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    as bash -c "umask 077; printf '%s\n' '$password' >'$dir/pwfile'"
    as "$bin/initdb" -D "$dir/data" -U evalkit --pwfile="$dir/pwfile" -A scram-sha-256 -E UTF8 --no-sync >/dev/null
    rm -f "$dir/pwfile"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off" start >/dev/null \
        || { say "the server did not start; its log:"; tail -20 "$dir/server.log" >&2 || true; exit 1; }
    url="postgresql://evalkit:$password@127.0.0.1:$port/postgres"
    say "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (cluster in $dir)"
    echo "export EVALKIT_TEST_POSTGRES_URL='$url' EVALKIT_TEST_POSTGRES_DIR='$dir'"
}

stop() {
    local dir=${1:?usage: postgres.sh stop DIR} bin owner
    [[ -d "$dir/data" ]] || return 0
    bin=$(find_bin) || return 0
    owner=$(stat -c %U "$dir/data")
    if [[ $(id -un) == "$owner" ]]; then "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    else runuser -u "$owner" -- "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true; fi
    rm -rf "$dir"
}

case "${1:-}" in
    start) start ;;
    stop) shift; stop "$@" ;;
    *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
