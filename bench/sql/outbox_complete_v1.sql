-- The completion as migration 0015 left it (the lean outbox, before the
-- claim probed only tenants with open work). The same-run "before" of drain-peer.
-- reference: the outbox statements of commit 3823262 (run 85dc95aac5 measured them: "0015 statements")
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
        FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::text[])
             AS r(tenant_id, id, attempts, outcome, delay_ms, error)
        WHERE d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN ('pending', 'retrying', 'sending');
