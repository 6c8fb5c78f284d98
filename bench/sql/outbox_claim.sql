-- The outbox worker's claim: one statement (claim_deliveries; the worker runs it in a
-- transaction that also decides delayed deliveries, deliveries::fallback).
-- Parameters: $1 lease in ms, $2 channels; the batch (100, the workers'
-- default) is in the text. The harness's store-only drain runs it with the
-- workers' defaults (lease 60 s, {webhook}).
-- source-fn: tidings_server::store::outbox::claim_sql(100)
WITH RECURSIVE open_tenants AS (
            -- The tenants with open work, one index probe each (a skip scan:
            -- the first tenant, then the first one after it, ...).
            (SELECT d.tenant_id FROM deliveries d
             WHERE d.status IN ('pending', 'retrying', 'sending')
             ORDER BY d.tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT d.tenant_id FROM deliveries d
                    WHERE d.status IN ('pending', 'retrying', 'sending')
                      AND d.tenant_id > o.tenant_id
                    ORDER BY d.tenant_id LIMIT 1)
            FROM open_tenants o
            WHERE o.tenant_id IS NOT NULL
        ),
        active AS MATERIALIZED (
            -- One ordered index probe per such tenant (LIMIT 1 with ORDER BY
            -- keeps the planner on deliveries_claimable whatever its
            -- statistics say): its oldest due delivery, if it has one.
            SELECT o.tenant_id, oldest.next_attempt_at AS oldest_due
            FROM open_tenants o
            CROSS JOIN LATERAL (
                SELECT d.next_attempt_at
                FROM deliveries d
                WHERE d.tenant_id = o.tenant_id
                  AND d.status IN ('pending', 'retrying', 'sending')
                  AND d.next_attempt_at <= now()
                  AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                  AND d.channel = ANY($2)
                ORDER BY d.next_attempt_at
                LIMIT 1
            ) oldest
        ),
        share AS (
            SELECT GREATEST(1, CEIL(100::float8 / GREATEST(count(*), 1)))::int AS per_tenant FROM active
        ),
        picked AS (
            -- ctid: the version this statement locked, so that the UPDATE
            -- below reaches it by a TID scan instead of a second descent of
            -- the primary key. A row updated after this statement's snapshot
            -- and locked in its newer version (EvalPlanQual) is not visible
            -- to that scan: it stays unclaimed until the next claim.
            SELECT due.ctid, due.tenant_id, due.id, due.alert_id, due.endpoint_id, due.recipient_id, due.channel
            FROM (SELECT tenant_id FROM active ORDER BY oldest_due LIMIT 100) served
            CROSS JOIN share
            CROSS JOIN LATERAL (
                SELECT d.ctid, d.tenant_id, d.id, d.alert_id, d.endpoint_id, d.recipient_id, d.channel
                FROM deliveries d
                WHERE d.tenant_id = served.tenant_id
                  AND d.status IN ('pending', 'retrying', 'sending')
                  AND d.next_attempt_at <= now()
                  AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                  AND d.channel = ANY($2)
                ORDER BY d.next_attempt_at
                LIMIT share.per_tenant
                FOR UPDATE SKIP LOCKED
            ) due
            LIMIT 100
        )
        UPDATE deliveries d
        SET attempts = d.attempts + 1,
            claimed_until = now() + $1 * interval '1 millisecond'
        FROM picked p
        LEFT JOIN alerts a
               ON a.tenant_id = p.tenant_id AND a.id = p.alert_id
        -- OFFSET 0 keeps each lookup a subquery of its own, so that its
        -- channel test runs before the index probe (a one-time filter) and a
        -- webhook costs no probe of users, an email none of the endpoints.
        LEFT JOIN LATERAL (
            SELECT e.id, e.url, e.secret,
                   CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END AS previous_secret
            FROM webhook_endpoints e
            WHERE p.channel = 'webhook' AND e.tenant_id = p.tenant_id AND e.id = p.endpoint_id
            OFFSET 0
        ) e ON true
        LEFT JOIN LATERAL (
            SELECT u.email FROM users u
            WHERE p.channel = 'email' AND u.tenant_id = p.tenant_id AND u.user_id = p.recipient_id
            OFFSET 0
        ) u ON true
        WHERE d.ctid = p.ctid AND d.tenant_id = p.tenant_id AND d.id = p.id
        RETURNING d.tenant_id, d.id, d.attempts, d.channel, d.notification_key, d.recipient_id, d.alert_id,
                  a.event_type, a.entity_id, a.subject, a.payload, a.created_at AS alert_created_at,
                  e.id AS endpoint_id, e.url AS endpoint_url, e.secret AS endpoint_secret,
                  e.previous_secret AS endpoint_previous_secret,
                  u.email AS recipient_email, d.ctid::text AS version, d.unless_mark, d.item_tx, d.item_id;
