-- Templates of what a notification says (docs/design/templates.md).
--
-- A template is per tenant × event type × channel (`email`, `in_app`). Its
-- versions are immutable rows of `template_versions`, each holding every
-- locale variant of that version (a save of one locale writes a new version
-- with the other locales copied); `templates` is the published pointer. A
-- delivery records the version it is rendered with when it is enqueued
-- (`template_version_id`, NULL: no template, today's plain rendering), so an
-- edit never changes a delivery already in the outbox. The column is on both
-- `deliveries` and `deliveries_sent` (the completion moves sent rows across:
-- docs/design/outbox.md).
--
-- Nullable columns with no default: adding them rewrites no table.

ALTER TABLE users
    ADD COLUMN IF NOT EXISTS locale text,
    ADD COLUMN IF NOT EXISTS timezone text;

-- The tenant's fallback locale, between the user's language and `en`. A
-- table of its own, not a column of `tenants`: every request reads
-- `tenants`, and the lock of an ALTER there, held to the end of this
-- migration, would stall (or deadlock with) the previous version's requests
-- during a rolling upgrade.
CREATE TABLE IF NOT EXISTS template_settings (
    tenant_id      uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    default_locale text
);

CREATE TABLE IF NOT EXISTS template_versions (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    event_type text NOT NULL,
    channel    text NOT NULL CHECK (channel IN ('email', 'in_app')),
    version    integer NOT NULL,
    -- {"fr-BE": {...}, "en": {...}}: the locale variants of this version.
    variants   jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, event_type, channel, version)
);

CREATE TABLE IF NOT EXISTS templates (
    tenant_id            uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    event_type           text NOT NULL,
    channel              text NOT NULL CHECK (channel IN ('email', 'in_app')),
    -- NULL once deleted: new alerts use the plain rendering again, while the
    -- versions stay for the deliveries that recorded them.
    published_version_id bigint,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, event_type, channel)
);

ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS template_version_id bigint;
ALTER TABLE deliveries_sent ADD COLUMN IF NOT EXISTS template_version_id bigint;
