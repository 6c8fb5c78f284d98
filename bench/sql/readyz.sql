-- The readiness probe's query (GET /readyz): the cheapest endpoint that touches
-- the database, the floor every other service/pgbench ratio sits on.
-- source: server/src/db/mod.rs
SELECT count(*) FILTER (WHERE success), pg_is_in_recovery() FROM _sqlx_migrations;
