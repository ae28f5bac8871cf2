-- A purged message keeps the epoch of its purged send too (issue 27,
-- simulator seeds 7789 and 5769): of a send's copies the latest owner
-- term's wins, so a later term's copy outranks the purged one and is judged
-- again. (The mark and the copies are now compared by (epoch, hlc, origin,
-- seq), the owners' order of decisions; msg_purge and messages hold those
-- columns already.) Rows purged before this migration read as epoch 0.
ALTER TABLE msg_purged ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
