-- Outbox workers (ARCHITECTURE.md, invariant 6): one index for everything a worker claims.
--
-- A claim sets status 'sending' and claimed_until = next_attempt_at = the end of
-- the lease. So for a row in 'sending', next_attempt_at is when it becomes due
-- again if its worker never records a result (crashed, stuck): fresh work,
-- retries and expired leases are all "status IN (pending, retrying, sending)
-- AND next_attempt_at <= now()", one ordered range scan per tenant.
-- Led by tenant_id so the claim can take a fair share from each tenant with
-- due work without scanning another tenant's backlog.
CREATE INDEX deliveries_claimable ON deliveries (tenant_id, next_attempt_at)
    WHERE status IN ('pending', 'retrying', 'sending');

-- Superseded by deliveries_claimable; each index costs every claim and completion a write.
DROP INDEX deliveries_due;
DROP INDEX deliveries_leased;
