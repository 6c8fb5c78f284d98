-- The outbox worker's last group of a batch recorded and the next batch
-- claimed in one statement, autocommit (record_and_claim_deliveries): results
-- only for rows it can lock at once (SKIP LOCKED), the rest left to
-- outbox_complete.sql. Parameters: $1 batch, $2 lease in ms, $3 channels,
-- $4 tenants, $5 ids, $6 attempts, $7 outcomes, $8 delays (ms), $9 errors.
-- source-fn: tidings_server::store::outbox::record_and_claim_sql()
WITH RECURSIVE lockable AS (
            SELECT r.* FROM UNNEST($4::uuid[], $5::int8[], $6::int4[], $7::text[], $8::int8[], $9::text[])
                 AS r(tenant_id, id, attempts, outcome, delay_ms, error)
            JOIN deliveries d ON d.tenant_id = r.tenant_id AND d.id = r.id
            FOR UPDATE OF d SKIP LOCKED
        ),
        recorded AS (
        UPDATE deliveries d
        SET status = CASE WHEN r.outcome <> 'release' THEN r.outcome
                          WHEN d.status <> 'sending' THEN d.status
                          WHEN d.attempts > 1 THEN 'retrying'
                          ELSE 'pending'
                     END,
            attempts = CASE WHEN r.outcome = 'release' THEN d.attempts - 1 ELSE d.attempts END,
            sent_at = CASE WHEN r.outcome = 'sent' THEN now() ELSE d.sent_at END,
            next_attempt_at = CASE WHEN r.outcome = 'retrying'
                                   THEN now() + r.delay_ms * interval '1 millisecond'
                                   WHEN d.status = 'sending' THEN now()
                                   ELSE d.next_attempt_at END,
            last_error = COALESCE(r.error, d.last_error),
            claimed_until = NULL
        FROM lockable
             AS r(tenant_id, id, attempts, outcome, delay_ms, error)
        WHERE d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN ('pending', 'retrying', 'sending')
        RETURNING d.tenant_id, d.id
        ),
        open_tenants AS (
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
                  AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                  AND d.channel = ANY($3)
                ORDER BY d.next_attempt_at
                LIMIT share.per_tenant
                FOR UPDATE SKIP LOCKED
            ) due
            LIMIT $1
        ),
        taken AS (
        UPDATE deliveries d
        SET attempts = d.attempts + 1,
            claimed_until = now() + $2 * interval '1 millisecond'
        FROM picked p
        LEFT JOIN alerts a
               ON a.tenant_id = p.tenant_id AND a.id = p.alert_id
        -- OFFSET 0 keeps each lookup a subquery of its own, so that its
        -- channel test runs before the index probe (a one-time filter) and a
        -- webhook costs no probe of users, an email none of the endpoints.
        LEFT JOIN LATERAL (
            SELECT e.url, e.secret,
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
        WHERE d.tenant_id = p.tenant_id AND d.id = p.id
        RETURNING d.tenant_id, d.id, d.attempts, d.channel, d.notification_key, d.recipient_id, d.alert_id,
                  a.event_type, a.entity_id, a.subject, a.payload, a.created_at AS alert_created_at,
                  e.url AS endpoint_url, e.secret AS endpoint_secret,
                  e.previous_secret AS endpoint_previous_secret,
                  u.email AS recipient_email
        )
        SELECT taken.*, rec.recorded_tenants, rec.recorded_ids
        FROM (SELECT array_agg(tenant_id) AS recorded_tenants, array_agg(id) AS recorded_ids
              FROM recorded) rec
        LEFT JOIN taken ON true;
