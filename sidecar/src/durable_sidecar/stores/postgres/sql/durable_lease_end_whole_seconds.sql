-- durable_lease_end_whole_seconds(): the function of the trigger
-- durable_instances_lease_end_whole_seconds, which migration 0011 creates (issue
-- 18): instance updates that renew a lease become HOT updates.
--
-- Every save renews its instance's lease (lease_expires_at = now() + the lease
-- length). lease_expires_at is a column of the durable_instances_stalled index,
-- so each renewal changed an indexed value: PostgreSQL could not update the row
-- in place on its page (a HOT update) and inserted a new entry into every index of
-- the table (four) for every save, which also left the indexes to grow until
-- vacuum.
--
-- A lease's end five seconds or more ahead is now rounded up to the next whole
-- second, by this trigger, on every statement that writes one (the save functions,
-- start, resume, claims of the scanner). Renewals within the same second store the
-- same value, so most saves change no indexed column and are HOT. Such a lease lasts
-- at least its length after the last renewal, as before, and less than one second
-- more (a fifth of it at most). A shorter lease, and an end that is not in the future
-- (a lease ended on purpose), are stored as given. The embedded SQLite database has
-- no HOT updates and does not round.
CREATE OR REPLACE FUNCTION durable_lease_end_whole_seconds() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Timestamps have microsecond resolution: adding 999 999 µs and truncating rounds up.
    NEW.lease_expires_at := date_trunc('second', NEW.lease_expires_at + interval '999999 microseconds');
    RETURN NEW;
END
$$;
