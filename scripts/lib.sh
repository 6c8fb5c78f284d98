# Shared by scripts/run, scripts/test and scripts/bench: make sure what Tidings
# needs on this machine is installed and running. Sourced, not executed.
# Every function is idempotent: it does nothing when the thing is already there.

TIDINGS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
apt_install() {
  # Installs Debian packages that are missing; `apt-get update` once per run.
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    as_root apt-get update -qq >&2
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

# A port of this checkout's own for a private server, from a path in it: the
# same FNV-1a as tests/src/checkout_port.rs (a test holds the two equal), so
# two checkouts on one machine never share a cluster. 20000-31999 in steps of 8.
checkout_port() { # path
  python3 -c '
import sys
h = 0xcbf29ce484222325
for b in sys.argv[1].encode():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
print(20000 + (h % 1500) * 8)' "$1"
}

pg_bin_dir() {
  # Directory with initdb and postgres: PATH first, then Debian's layout.
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return
  fi
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

ensure_postgres_binaries() {
  if [ -z "$(pg_bin_dir)" ] || ! command -v psql >/dev/null 2>&1; then
    apt_install postgresql postgresql-client
  fi
}

# The account private PostgreSQL clusters run as: PostgreSQL refuses to run as
# root, so root hands them to `postgres` (or `nobody`); anyone else runs them
# as themselves (prints nothing).
pg_run_user() {
  [ "$(id -u)" = 0 ] || return 0
  if id -u postgres >/dev/null 2>&1; then echo postgres; else echo nobody; fi
}

# Runs a command as pg_run_user; from / when that is another account, which may
# not be allowed into the working directory (paths given must be absolute).
as_pg_user() {
  local user
  user=$(pg_run_user)
  if [ -n "$user" ]; then (cd / && runuser -u "$user" -- "$@"); else "$@"; fi
}

# private_pg_dir NAME: prints the directory of the private cluster NAME (it holds
# data/ and postgres.log), made and owned by the account the cluster runs as.
# That is target/NAME when that account can reach target/, as in any ordinary
# checkout. A checkout others cannot search (root's /root/tidings, a `mktemp -d`
# directory) gets /var/lib/tidings/<checkout>-NAME-<hash>, or the same under
# $TMPDIR when /var/lib is read-only: the hash is of target/NAME's real path, so
# every run of one checkout finds its cluster again and two checkouts never share
# one. `tidings serve` falls back the same way (server/src/embedded_pg.rs).
private_pg_dir() {
  local name=$1 user dir real base candidate
  user=$(pg_run_user)
  mkdir -p "$TIDINGS_ROOT/target"
  dir="$TIDINGS_ROOT/target/$name"
  if [ -n "$user" ] && ! runuser -u "$user" -- test -x "$TIDINGS_ROOT/target"; then
    real="$(cd "$TIDINGS_ROOT/target" && pwd -P)/$name"
    dir=""
    for base in /var/lib/tidings "${TMPDIR:-/tmp}/tidings"; do
      candidate="$base/$(basename "$TIDINGS_ROOT")-$name-$(printf '%s' "$real" | sha256sum | cut -c1-16)"
      # In a shared temp dir someone else may have made the path first: use only
      # real directories owned by root.
      mkdir -p "$candidate" 2>/dev/null || continue
      [ ! -L "$base" ] && [ ! -L "$candidate" ] && [ "$(stat -c %u "$base")" = 0 ] || continue
      chmod 0755 "$base" || continue
      runuser -u "$user" -- test -x "$base" || continue
      dir=$candidate
      break
    done
    if [ -z "$dir" ]; then
      echo "no directory $user can reach for the private PostgreSQL $name" >&2
      return 1
    fi
    [ -f "$dir/origin" ] || printf '%s\n' "$real" >"$dir/origin"
    log "$TIDINGS_ROOT/target is not reachable by $user; the private PostgreSQL $name lives in $dir"
  fi
  mkdir -p "$dir"
  [ -n "$user" ] && chown "$user" "$dir"
  echo "$dir"
}

# A PostgreSQL server for tests and benchmarks. Uses TIDINGS_TEST_DATABASE_URL
# when set, the machine's server on 127.0.0.1:5432 when it answers, and otherwise
# starts a private one in private_pg_dir test-pg (port 25432).
# Private servers listen below 32768, outside Linux's ephemeral port range
# (32768-60999), which outgoing connections draw from under load.
ensure_test_postgres() {
  ensure_postgres_binaries
  if [ -n "${TIDINGS_TEST_DATABASE_URL:-}" ]; then return 0; fi
  if pg_isready -q -h 127.0.0.1 -p 5432 && psql -X -q -h 127.0.0.1 -U postgres -d postgres -c 'select 1' >/dev/null 2>&1; then
    export TIDINGS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
    return 0
  fi
  # The machine's cluster may just be stopped.
  if command -v pg_ctlcluster >/dev/null 2>&1 && ls /etc/postgresql/*/main >/dev/null 2>&1; then
    local version
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
    if psql -X -q -h 127.0.0.1 -U postgres -d postgres -c 'select 1' >/dev/null 2>&1; then
      export TIDINGS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
      return 0
    fi
  fi
  local dir bin
  bin=$(pg_bin_dir)
  if ! pg_isready -q -h 127.0.0.1 -p 25432; then
    dir=$(private_pg_dir test-pg) || return 1
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      log "initialising a private PostgreSQL in $dir"
      as_pg_user "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
    fi
    log "starting the private PostgreSQL on 127.0.0.1:25432"
    as_pg_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
      -o "-p 25432 -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=300" start >/dev/null
  fi
  export TIDINGS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:25432/postgres
}

# NATS with JetStream on 127.0.0.1:4222 (or TIDINGS_TEST_NATS_URL).
ensure_nats() {
  if [ -n "${TIDINGS_TEST_NATS_URL:-}" ]; then return 0; fi
  export TIDINGS_TEST_NATS_URL=nats://127.0.0.1:4222
  if (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then return 0; fi
  command -v nats-server >/dev/null 2>&1 || apt_install nats-server
  local dir="$TIDINGS_ROOT/target/test-nats"
  mkdir -p "$dir"
  log "starting nats-server with JetStream on 127.0.0.1:4222"
  nohup nats-server -a 127.0.0.1 -p 4222 -js -sd "$dir" >"$dir/nats.log" 2>&1 &
  for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && return 0; sleep 0.1; done
  echo "nats-server did not start; see $dir/nats.log" >&2
  return 1
}

# Python packages for the test receivers (reference Standard Webhooks, aiosmtpd).
ensure_python_test_deps() {
  local req="$TIDINGS_ROOT/tests/receivers/requirements.txt"
  [ -f "$req" ] || return 0
  command -v python3 >/dev/null 2>&1 || apt_install python3 python3-pip
  if ! python3 - "$req" <<'PY' 2>/dev/null
import sys, importlib.metadata as md
for line in open(sys.argv[1]):
    name = line.split('#')[0].strip().split('==')[0].split('>=')[0]
    if name:
        md.version(name)
PY
  then
    log "installing Python test receivers' packages"
    python3 -m pip install -q -r "$req" >&2 || python3 -m pip install -q --break-system-packages -r "$req" >&2
  fi
}

ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    apt_install cargo rustc
  fi
}

# The builds the scripts share, one command per binary. Cargo unifies features
# over the packages a command names (and, once any test or example is built,
# their dev-dependencies), so two commands naming different packages can build
# one binary twice with different dependency features, each build replacing
# the other at the same path (target/*/tidings). Hence one command here per
# binary, for every script that builds one.

# target/release/tidings, without test hooks: scripts/run, and scripts/bench
# --tier M before it builds the harness on its own (`-p tidings-bench` builds
# the server's library, not its binary).
build_release_server() {
  cargo build --release --locked -p tidings-server "$@"
}

# target/debug/tidings (with the test hooks the tests crate turns on),
# target/debug/tidings-bench and core's crosscheck example, exactly as
# scripts/test's `cargo build --workspace --all-targets` builds them: the
# same packages, and --examples resolves the dev-dependencies' features as
# --all-targets does, without compiling the test targets. (Checked: the
# three units are the same in both commands' `--unit-graph`, and a build with
# --all-targets right after this one finds them fresh.)
build_dev_binaries() {
  cargo build --locked --workspace --bins --examples "$@"
}

ensure_node() {
  command -v node >/dev/null 2>&1 || apt_install nodejs npm
}

# clients/typescript's npm packages (its build, its linters, the type
# generator) from its lock file: installed when missing or older than the
# lock (npm writes node_modules/.package-lock.json at each install); offline
# after that.
ensure_client_packages() {
  local client=$TIDINGS_ROOT/clients/typescript
  if [[ ! $client/node_modules/.package-lock.json -nt $client/package-lock.json ]]; then
    npm --prefix "$client" ci --no-audit --no-fund --silent
  fi
}
