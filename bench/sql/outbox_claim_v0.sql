-- The outbox worker's claim as the server ran it before the lean outbox
-- (migration 0015; main at b00dfa1, migrations 0001–0013): the claim sets status 'sending' and moves next_attempt_at
-- to the lease end, so neither update can be HOT. Kept as the same-run
-- baseline of drain-peer's 'before' arm, on a table with the indexes of then.
-- reference: the statement before the lean outbox (b00dfa1)
-- One change from the reference: it also returns the endpoint's id, which the
-- current worker reads a delivery's row with (secrets are bound to their row).
        WITH active AS MATERIALIZED (
            -- One ordered index probe per tenant (LIMIT 1 with ORDER BY keeps
            -- the planner on deliveries_claimable whatever its statistics say).
            SELECT t.id AS tenant_id, oldest.next_attempt_at AS oldest_due
            FROM tenants t
            CROSS JOIN LATERAL (
                SELECT d.next_attempt_at
                FROM deliveries d
                WHERE d.tenant_id = t.id
                  AND d.status IN ('pending', 'retrying', 'sending')
                  AND d.next_attempt_at <= now()
                  AND d.channel = ANY($3)
                ORDER BY d.next_attempt_at
                LIMIT 1
            ) oldest
        ),
        share AS (
            SELECT GREATEST(1, CEIL($1::float8 / GREATEST(count(*), 1)))::int AS per_tenant FROM active
        ),
        picked AS (
            SELECT due.tenant_id, due.id, due.alert_id, due.endpoint_id, due.recipient_id, due.channel
            FROM (SELECT tenant_id FROM active ORDER BY oldest_due LIMIT $1) served
            CROSS JOIN share
            CROSS JOIN LATERAL (
                SELECT d.tenant_id, d.id, d.alert_id, d.endpoint_id, d.recipient_id, d.channel
                FROM deliveries d
                WHERE d.tenant_id = served.tenant_id
                  AND d.status IN ('pending', 'retrying', 'sending')
                  AND d.next_attempt_at <= now()
                  AND d.channel = ANY($3)
                ORDER BY d.next_attempt_at
                LIMIT share.per_tenant
                FOR UPDATE SKIP LOCKED
            ) due
            LIMIT $1
        )
        UPDATE deliveries d
        SET status = 'sending',
            attempts = d.attempts + 1,
            claimed_until = now() + $2 * interval '1 millisecond',
            next_attempt_at = now() + $2 * interval '1 millisecond'
        FROM picked p
        LEFT JOIN alerts a
               ON a.tenant_id = p.tenant_id AND a.id = p.alert_id
        LEFT JOIN webhook_endpoints e
               ON p.channel = 'webhook' AND e.tenant_id = p.tenant_id AND e.id = p.endpoint_id
        LEFT JOIN users u
               ON p.channel = 'email' AND u.tenant_id = p.tenant_id AND u.user_id = p.recipient_id
        WHERE d.tenant_id = p.tenant_id AND d.id = p.id
        RETURNING d.tenant_id, d.id, d.attempts, d.channel, d.notification_key, d.recipient_id, d.alert_id,
                  a.event_type, a.entity_id, a.subject, a.payload, a.created_at AS alert_created_at,
                  e.id AS endpoint_id, e.url AS endpoint_url, e.secret AS endpoint_secret,
                  CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END
                      AS endpoint_previous_secret,
                  u.email AS recipient_email;
