-- Bounded work per request (ARCHITECTURE.md, "Bounded work per
-- request"): an alert to named recipients whose plan writes more delivery rows
-- than one transaction may (TIDINGS_ALERT_BATCH_DELIVERIES) is written by the
-- background expansion, in batches, like a large team's. Its job carries the
-- recipients (at most 1,000, sorted) instead of a team.
--
-- Expand-only: a version before this one never writes such a job; if it
-- claims one, it fails to read the NULL team and leaves the job to this
-- version (its loop retries; nothing is written or lost).
ALTER TABLE alert_expansions
    ADD COLUMN recipients text[],
    ALTER COLUMN team_id DROP NOT NULL;
