#!/bin/sh
# First start of the postgres volume only (the image runs /docker-entrypoint-initdb.d
# once, on an empty data directory): one role and one database for n8n, one for
# the sidecar, so neither can connect to the other's database. Each role owns
# its database, so n8n and the sidecar can run their own migrations in it.
set -e

: "${N8N_DB_PASSWORD:?N8N_DB_PASSWORD is empty}"
: "${DURABLE_DB_PASSWORD:?DURABLE_DB_PASSWORD is empty}"

# psql quotes the passwords itself (:'var'), so no character can break the SQL.
psql --no-psqlrc -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
  -v n8n_password="$N8N_DB_PASSWORD" -v durable_password="$DURABLE_DB_PASSWORD" <<'SQL'
CREATE ROLE n8n LOGIN PASSWORD :'n8n_password';
CREATE DATABASE n8n OWNER n8n;
REVOKE ALL ON DATABASE n8n FROM PUBLIC;
CREATE ROLE durable LOGIN PASSWORD :'durable_password';
CREATE DATABASE durable OWNER durable;
REVOKE ALL ON DATABASE durable FROM PUBLIC;
SQL
echo "postgres-init: databases n8n and durable created, each owned by its own role"
