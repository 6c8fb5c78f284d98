-- Foundation. Every table of later migrations leads its keys with tenant_id so the
-- schema can be distributed by tenant without redesign (ARCHITECTURE.md).

-- Feed positions (ARCHITECTURE.md, invariant 2): every feed item (activity events and
-- in-app alerts alike) takes its id from this one sequence, so (tx, id) is unique
-- across all sources of a feed.
CREATE SEQUENCE feed_item_id_seq AS bigint;
