-- A digest's email template, per category (ARCHITECTURE.md, "Digests";
-- server/src/alerts/templates/digest.rs): the subject, HTML and text of the
-- email that lists a digest's items, over `items`, `total`, `more`,
-- `category` and `recipient`. A digest of an event type whose category has
-- none uses the built-in layout.
--
-- Expand-only: a new table, which an older binary ignores.
CREATE TABLE IF NOT EXISTS digest_templates (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    category   text NOT NULL,
    -- {"subject": …, "html": …, "text": … | null, "format": "html" | "mjml"}
    content    jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, category)
);
