-- POST /v1/alerts for named recipients on in_app + webhook, every key new: the
-- statements create_alert/fan_out run inside the request's transaction, in the
-- order they run them (server/src/alerts/submit.rs). The harness wraps them in
-- BEGIN/COMMIT and precedes them with one generator SELECT (\gset) that makes
-- unique keys, ids and the column arrays for each transaction: the baseline pays
-- that one extra round trip, the service pays key derivation in Rust instead.
-- source: server/src/store/alerts.rs
-- source-fn: tidings_server::store::deliveries::insert_deliveries_sql()
-- source: server/src/store/webhook_endpoints.rs
-- source: server/src/store/notify.rs
SELECT pg_try_advisory_xact_lock($1);
INSERT INTO notifications
             (tenant_id, key, readable_key, alert_id, event_type, entity_id, recipient_id, channel)
         SELECT $1, k, rk, $2, $3, $4, r, c
           FROM unnest($5::text[], $6::text[], $7::text[], $8::text[]) AS t(k, rk, r, c)
         ON CONFLICT DO NOTHING
         RETURNING key;
SELECT id FROM webhook_endpoints
         WHERE tenant_id = $1 AND (event_types IS NULL OR $2 = ANY(event_types))
         ORDER BY id;
INSERT INTO deliveries
             (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status,
              last_error, sent_at)
         SELECT $1, k, $2, r, c, e, s, err, CASE WHEN s = 'sent' THEN now() END
           FROM unnest($3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[])
                AS t(k, r, c, e, s, err);
INSERT INTO inbox_items
             (tenant_id, recipient_id, notification_key, alert_id, type, entity_id, subject, payload)
         SELECT $1, r, k, $2, $3, $4, $5, $6
           FROM unnest($7::text[], $8::text[]) AS t(r, k);
SELECT pg_notify($1, $2);
INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, team_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8);
