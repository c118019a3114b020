-- The finished counts become a log of signed counts: a change that takes tasks
-- out of a finished state, or deletes them, appends rows (queue, state, n) and
-- never updates one, so two such changes in flight at once (a retention pass
-- and a bulk requeue, say) lock no shared row and cannot deadlock on the counts
-- of two queues taken in opposite orders. A count is the sum of its rows (the
-- readers already sum); the fold, holding the watermark, sums the log into one
-- row per (queue, state) and appends what it passes. Rows are appended at the
-- end of the primary key, where inserts do not wait for one another.
ALTER TABLE finished_counts DROP PRIMARY KEY,
    ADD COLUMN id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY FIRST;
