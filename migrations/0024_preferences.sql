-- Notification preferences and categories (docs/design/preferences.md).
--
-- Expand-only: new tables and one nullable column, so the version before it
-- keeps running against this schema during a rolling upgrade.

-- A tenant's categories. `defaults` holds the category's own setting per
-- channel ({"email": "off"}), the last level of resolution before `on`.
-- A critical category ignores every setting and carries no unsubscribe
-- header.
CREATE TABLE IF NOT EXISTS notification_categories (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key        text NOT NULL,
    label      text NOT NULL,
    critical   boolean NOT NULL DEFAULT false,
    defaults   jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

-- Which category an event type belongs to: one at most, the primary key says
-- so (one category per event type, so resolution never has to combine two).
CREATE TABLE IF NOT EXISTS category_event_types (
    tenant_id    uuid NOT NULL,
    event_type   text NOT NULL,
    category_key text NOT NULL,
    PRIMARY KEY (tenant_id, event_type),
    FOREIGN KEY (tenant_id, category_key)
        REFERENCES notification_categories (tenant_id, key) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS category_event_types_category
    ON category_event_types (tenant_id, category_key);

-- Sparse settings rows. `user_id` NULL is a tenant default, which alone may
-- be locked. `scope_key` is '' for the global scope. `daily` and `weekly`
-- are accepted by the schema for digests; the API takes `on` and `off`.
-- `source` records who wrote the row (`one_click`: the unsubscribe link).
CREATE TABLE IF NOT EXISTS preference_settings (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id    text,
    scope      text NOT NULL CHECK (scope IN ('global', 'category', 'event_type')),
    scope_key  text NOT NULL DEFAULT '',
    channel    text NOT NULL CHECK (channel IN ('*', 'in_app', 'email', 'webhook')),
    setting    text NOT NULL CHECK (setting IN ('on', 'off', 'daily', 'weekly')),
    locked     boolean NOT NULL DEFAULT false,
    source     text NOT NULL CHECK (source IN ('api', 'user', 'one_click', 'admin')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((scope = 'global') = (scope_key = '')),
    CHECK (NOT locked OR user_id IS NULL),
    UNIQUE NULLS NOT DISTINCT (tenant_id, user_id, scope, scope_key, channel)
);

-- The category an alert was sent under (named by the alert, or its event
-- type's): what the email's List-Unsubscribe names and what GET
-- /v1/alerts/{id} shows. NULL: no category.
ALTER TABLE alerts ADD COLUMN IF NOT EXISTS category text;
