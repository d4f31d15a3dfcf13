#!/usr/bin/env bash
# Make sure a PostgreSQL answers on 127.0.0.1:5432 for the test suite (database "test").
# Usage: infra/postgres.sh ensure
# On machines that already run PostgreSQL (the dev/CI machines do) this only checks it.
# Otherwise it starts a local Debian cluster if one is installed, or says what to install.
set -euo pipefail

host=127.0.0.1
port=${AMBER_PG_PORT:-5432}

ready() { pg_isready -q -h "$host" -p "$port" 2>/dev/null; }

case "${1:-ensure}" in
  ensure)
    if ! command -v pg_isready >/dev/null; then
      echo "postgres.sh: PostgreSQL client tools not found (apt-get install postgresql)" >&2
      exit 1
    fi
    if ready; then
      echo "postgres.sh: PostgreSQL is up on $host:$port"
    elif command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
      version=$(ls /etc/postgresql | sort -V | tail -n 1)
      pg_ctlcluster --skip-systemctl-redirect "$version" main start
      for _ in $(seq 1 30); do ready && break; sleep 1; done
      ready || { echo "postgres.sh: PostgreSQL did not come up" >&2; exit 1; }
      echo "postgres.sh: started PostgreSQL $version on $host:$port"
    else
      echo "postgres.sh: no PostgreSQL on $host:$port and no local cluster to start" >&2
      exit 1
    fi
    # The suite uses database "test"; create it when missing (trust auth on loopback).
    if ! psql -h "$host" -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1; then
      psql -h "$host" -p "$port" -U postgres -c "CREATE DATABASE test" >/dev/null
      echo "postgres.sh: created database test"
    fi
    ;;
  *)
    echo "usage: $0 ensure" >&2
    exit 2
    ;;
esac
