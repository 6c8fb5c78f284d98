-- The outbox worker's completion of a group of results (complete_deliveries):
-- a `sent` delivery moves from `deliveries` to `deliveries_sent` (migration
-- 0022), every other outcome updates in place; answers the count written.
-- Parameters: $1 tenants, $2 ids, $3 attempts, $4 outcomes, $5 delays (ms), $6 errors.
-- source-fn: tidings_server::store::outbox::complete_sql()
WITH r AS MATERIALIZED (
            SELECT r.*,
                   COALESCE(
                       (SELECT d.ctid FROM deliveries d
                        WHERE d.ctid = r.version AND d.tenant_id = r.tenant_id AND d.id = r.id),
                       (SELECT d.ctid FROM deliveries d WHERE d.tenant_id = r.tenant_id AND d.id = r.id)
                   ) AS at
            FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::text[],
                        $7::text[]::tid[])
                AS r(tenant_id, id, attempts, outcome, delay_ms, error, version)
        ),
        sent AS (
            DELETE FROM deliveries d USING r
            WHERE r.outcome = 'sent'
              AND d.ctid = r.at AND d.tenant_id = r.tenant_id AND d.id = r.id
              AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
              AND d.status IN ('pending', 'retrying', 'sending')
            RETURNING d.*
        ),
        moved AS (
            INSERT INTO deliveries_sent (tenant_id, id, notification_key, alert_id, recipient_id, channel,
                                         endpoint_id, status, attempts, next_attempt_at, claimed_until,
                                         last_error, sent_at, created_at, template_version_id,
                                         unless_mark, item_tx, item_id, decided_mark_tx, decided_mark_id,
                                         decided_at)
            SELECT tenant_id, id, notification_key, alert_id, recipient_id, channel, endpoint_id, 'sent',
                   attempts, next_attempt_at, NULL, last_error, now(), created_at, template_version_id,
                   unless_mark, item_tx, item_id, decided_mark_tx, decided_mark_id, decided_at
            FROM sent
            RETURNING 1
        ),
        other AS (
        UPDATE deliveries d
        SET status = CASE WHEN r.outcome <> 'release' THEN r.outcome
                          WHEN d.status <> 'sending' THEN d.status
                          WHEN d.attempts > 1 THEN 'retrying'
                          ELSE 'pending'
                     END,
            attempts = CASE WHEN r.outcome = 'release' THEN d.attempts - 1 ELSE d.attempts END,
            next_attempt_at = CASE WHEN r.outcome = 'retrying'
                                   THEN now() + r.delay_ms * interval '1 millisecond'
                                   WHEN d.status = 'sending' THEN now()
                                   ELSE d.next_attempt_at END,
            last_error = COALESCE(r.error, d.last_error),
            claimed_until = NULL
        FROM r
        WHERE r.outcome <> 'sent'
          AND d.ctid = r.at AND d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN ('pending', 'retrying', 'sending')
        RETURNING 1
        )
        SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM other);
