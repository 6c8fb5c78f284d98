-- Every delivery is updated at least twice (claim, result), so the table makes
-- two dead tuples per delivery. With the default trigger (20 % of live rows) the
-- dead tuples grew with the table in the benchmark's soak
-- (bench/findings/soak.md: 50k → 560k saw-tooth). Vacuum this hot table after
-- 1 % plus 1,000 changes, and let it run at full speed, so dead tuples stay
-- bounded by recent traffic rather than by history. (Purging old final
-- deliveries, the retention worker, is the other half.)
ALTER TABLE deliveries SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);
