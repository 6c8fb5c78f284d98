-- The live feed (ARCHITECTURE.md, "The live stream").
--
-- Each instance tails new feed rows of every tenant with a connected stream in
-- position order, one statement per tick: a range over tx, whatever the
-- tenant, team or recipient. Positions grow with time, so these indexes are
-- appended to at their right edge.
CREATE INDEX events_position ON events (tx, id);
CREATE INDEX inbox_items_position ON inbox_items (tx, id);

-- Stream tickets: `EventSource` cannot send an Authorization header, so a
-- front end trades its user token for a ticket passed as `?ticket=`. Single
-- use (taking one deletes it), valid for a minute, stored only as a SHA-256
-- hash. Looked up by that hash alone: the tenant is what the ticket tells, so
-- this table's key cannot lead with tenant_id.
CREATE TABLE stream_tickets (
    ticket_hash bytea PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id     text NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX stream_tickets_expiry ON stream_tickets (expires_at);
