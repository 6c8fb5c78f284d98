-- The outbox worker's complete as the server ran it before the lean outbox
-- (migration 0015; main at b00dfa1, migrations 0001–0013): the claim sets status 'sending' and moves next_attempt_at
-- to the lease end, so neither update can be HOT. Kept as the same-run
-- baseline of drain-peer's 'before' arm, on a table with the indexes of then.
-- reference: the statement before the lean outbox (b00dfa1)
        UPDATE deliveries d
        SET status = CASE r.outcome
                         WHEN 'release' THEN CASE WHEN d.attempts > 1 THEN 'retrying' ELSE 'pending' END
                         ELSE r.outcome
                     END,
            attempts = CASE WHEN r.outcome = 'release' THEN d.attempts - 1 ELSE d.attempts END,
            sent_at = CASE WHEN r.outcome = 'sent' THEN now() ELSE d.sent_at END,
            next_attempt_at = CASE WHEN r.outcome = 'retrying'
                                   THEN now() + r.delay_ms * interval '1 millisecond'
                                   ELSE now() END,
            last_error = COALESCE(r.error, d.last_error),
            claimed_until = NULL
        FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::text[])
             AS r(tenant_id, id, attempts, outcome, delay_ms, error)
        WHERE d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.status = 'sending';
