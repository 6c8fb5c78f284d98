-- The readiness probe's query (GET /readyz): the cheapest endpoint that touches
-- the database, the floor every other service/pgbench ratio sits on.
-- source: server/src/db.rs
SELECT count(*) FROM _sqlx_migrations WHERE success;
