-- Quiet hours: a user's daily window, in the user's time zone
-- (`users.timezone`, UTC when unset), in which non-critical email and webhook
-- deliveries do not go out. A delivery written due inside the window is due
-- at its end instead (store::deliveries::hold_for_quiet_hours, run in the
-- fan-out's transaction); in-app items are never held. `quiet_start >
-- quiet_end` is a window across midnight (22:00 to 07:00).
--
-- Expand-only: nullable columns an older binary neither reads nor writes,
-- and a partial index that holds only users with quiet hours, so a tenant
-- without any pays one probe of an empty index per alert.
ALTER TABLE users
    ADD COLUMN IF NOT EXISTS quiet_start time,
    ADD COLUMN IF NOT EXISTS quiet_end   time;

ALTER TABLE users DROP CONSTRAINT IF EXISTS users_quiet_hours_window;
ALTER TABLE users ADD CONSTRAINT users_quiet_hours_window
    CHECK ((quiet_start IS NULL AND quiet_end IS NULL) OR quiet_start <> quiet_end);

CREATE INDEX IF NOT EXISTS users_with_quiet_hours ON users (tenant_id, user_id)
    WHERE quiet_start IS NOT NULL;
