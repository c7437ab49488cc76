#!/bin/sh
# Patroni's post_bootstrap hook: runs once, on the first primary, with a
# connection string as $1. Creates the sidecar's and n8n's roles and databases.
set -eu
psql "$1" -v ON_ERROR_STOP=1 \
  -v durable_pw="$DURABLE_DB_PASSWORD" -v n8n_pw="$N8N_DB_PASSWORD" <<'SQL'
CREATE ROLE durable LOGIN PASSWORD :'durable_pw';
CREATE DATABASE durable OWNER durable;
CREATE ROLE n8n LOGIN PASSWORD :'n8n_pw';
CREATE DATABASE n8n OWNER n8n;
SQL
