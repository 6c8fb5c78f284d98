-- POST /v1/alerts' statements as the server ran them before the lean outbox
-- (migration 0015; main at b00dfa1): the deliveries insert with ON CONFLICT DO NOTHING, against a
-- deliveries table with the indexes of migrations 0005–0013, and notifications
-- and inbox items keyed by the digest (as before migration 0019: these
-- statements name those keys). The ingest workload runs it beside
-- alert_ingest.sql, each on fresh copies of its tables, for the same-run
-- before/after of the write path's SQL.
-- reference: the statements before the lean outbox (b00dfa1)
SELECT pg_try_advisory_xact_lock($1);
INSERT INTO notifications
             (tenant_id, key, readable_key, alert_id, event_type, entity_id, recipient_id, channel)
         SELECT $1, k, rk, $2, $3, $4, r, c
           FROM unnest($5::text[], $6::text[], $7::text[], $8::text[]) AS t(k, rk, r, c)
         ON CONFLICT (tenant_id, key) DO NOTHING
         RETURNING key;
SELECT id FROM webhook_endpoints
         WHERE tenant_id = $1 AND (event_types IS NULL OR $2 = ANY(event_types))
         ORDER BY id;
INSERT INTO deliveries
             (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status,
              last_error, sent_at)
         SELECT $1, k, $2, r, c, e, s, err, CASE WHEN s = 'sent' THEN now() END
           FROM unnest($3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[])
                AS t(k, r, c, e, s, err)
         ON CONFLICT DO NOTHING;
INSERT INTO inbox_items
             (tenant_id, recipient_id, notification_key, alert_id, type, entity_id, subject, payload)
         SELECT $1, r, k, $2, $3, $4, $5, $6
           FROM unnest($7::text[], $8::text[]) AS t(r, k)
         ON CONFLICT (tenant_id, notification_key) DO NOTHING;
SELECT pg_notify($1, $2);
INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, team_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8);
