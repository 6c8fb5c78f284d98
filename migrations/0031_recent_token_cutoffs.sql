-- A tenant's recent user-token revocations, read as one list per tenant
-- (http::auth, "revocations"): the cutoffs later than a given instant, newest
-- first, at most a bounded number. Without this index that read would walk
-- every cutoff the tenant ever set.
--
-- Expand-only: an index an older binary does not use.
CREATE INDEX IF NOT EXISTS user_token_cutoffs_recent ON user_token_cutoffs (tenant_id, not_before);
