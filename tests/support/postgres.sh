# Sourced by ./test: a private, throw-away PostgreSQL server for the PostgreSQL half of the suite.
#
#   postgres_start   install Debian's postgresql if it is missing (as root), then initdb and start
#                    a server in a temp directory on a free port on 127.0.0.1, as an unprivileged
#                    user (PostgreSQL refuses to run as root; under root that is `nobody`), and
#                    export RUNNER_TEST_PG (a superuser URL on it: tests create their databases)
#                    and RUNNER_TEST_PG_PASSWORD_USER (a role that must log in with a password).
#                    `postgres_start durable` keeps PostgreSQL's durability (fsync, synchronous
#                    commit, full-page writes: its defaults), for ./bench's honest numbers; without
#                    it (./test) they are off.
#   postgres_stop    stop it and delete its directory (./test calls it from an EXIT trap).
#
# Local connections trust everyone (the server listens on 127.0.0.1 only and lives for one test
# run), except the role `runner_pw`, which must give its password: the tests of a wrong password.

postgres_bin_dir() {
    # Debian keeps the server's programs out of PATH, one directory per major version.
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    if [ -n "$dir" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/psql" ]; then
        echo "$dir"
    elif command -v pg_ctl >/dev/null 2>&1 && command -v psql >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
    fi
}

postgres_install() {
    [ -n "$(postgres_bin_dir)" ] && return 0
    [ "$(id -u)" = 0 ] || return 1
    echo "test: installing PostgreSQL (Debian's postgresql package)..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    [ -n "$(postgres_bin_dir)" ]
}

# Run a command as the server's user.
postgres_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --reset-env -- "$@"
    else
        "$@"
    fi
}

postgres_free_port() {
    local port
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 40000 ))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# A CA (in DIR) and a server certificate for `localhost` signed by it (in DATA, where the server
# looks for server.crt and server.key).
postgres_certificates() {
    local dir="$1" data="$2"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=runner-test-ca \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1 &&
        openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
            -keyout "$data/server.key" -out "$dir/server.csr" >/dev/null 2>&1 &&
        printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$dir/server.ext" &&
        openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$data/server.crt" >/dev/null 2>&1
}

postgres_start() {
    POSTGRES_BIN="$(postgres_bin_dir)" || return 1
    [ -n "$POSTGRES_BIN" ] || return 1
    POSTGRES_DIR="$(mktemp -d /tmp/runner-test-pg.XXXXXX)"
    chmod 0755 "$POSTGRES_DIR"
    [ "$(id -u)" = 0 ] && chown nobody "$POSTGRES_DIR"
    local port
    port="$(postgres_free_port)" || return 1
    postgres_as_owner "$POSTGRES_BIN/initdb" -D "$POSTGRES_DIR/data" -U postgres -A trust \
        --no-sync >"$POSTGRES_DIR/initdb.log" 2>&1 || { cat "$POSTGRES_DIR/initdb.log" >&2; return 1; }
    cat >"$POSTGRES_DIR/data/pg_hba.conf" <<HBA
local all all                 trust
host  all runner_pw 127.0.0.1/32 scram-sha-256
host  all all       127.0.0.1/32 trust
HBA
    # TLS with a certificate for `localhost` from a throw-away CA, so every `sslmode` can be
    # tested: `require` takes any certificate; `verify-ca` and `verify-full` refuse it unless the
    # CA is trusted (RUNNER_TEST_PG_CA, given as SSL_CERT_FILE); `verify-full` also wants the
    # host named. Without the openssl program the server runs without TLS.
    local ssl="-c ssl=off"
    if command -v openssl >/dev/null 2>&1 && postgres_certificates "$POSTGRES_DIR" "$POSTGRES_DIR/data"; then
        chmod 0600 "$POSTGRES_DIR/data/server.key"
        [ "$(id -u)" = 0 ] && chown nobody "$POSTGRES_DIR/data/server.key" "$POSTGRES_DIR/data/server.crt"
        ssl="-c ssl=on"
        export RUNNER_TEST_PG_TLS=1
        export RUNNER_TEST_PG_CA="$POSTGRES_DIR/ca.crt"
    fi
    # fsync off: a test server that is thrown away needs no durability, and the machine is slow.
    # A benchmark measures what users get: the defaults.
    local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    [ "${1:-}" = durable ] && durability=""
    postgres_as_owner "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/server.log" -w -t 120 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$POSTGRES_DIR $durability -c max_connections=300 $ssl" \
        start >/dev/null || { cat "$POSTGRES_DIR/server.log" >&2; return 1; }
    "$POSTGRES_BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE runner_pw LOGIN CREATEDB PASSWORD 'right-password'" >/dev/null || return 1
    export RUNNER_TEST_PG="postgres://postgres@127.0.0.1:$port/postgres"
    export RUNNER_TEST_PG_PASSWORD_USER="runner_pw"
    POSTGRES_PORT="$port"
}

postgres_stop() {
    [ -n "${POSTGRES_DIR:-}" ] || return 0
    postgres_as_owner "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$POSTGRES_DIR"
    POSTGRES_DIR=""
}
