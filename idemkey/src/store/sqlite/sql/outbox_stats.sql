-- Messages not delivered yet, the age of the oldest (ms) and the dead letters.
SELECT (SELECT count(*) FROM outbox WHERE status = 'pending'),
       (SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - min(created_at)
        FROM outbox WHERE status = 'pending'),
       (SELECT count(*) FROM outbox WHERE status = 'dead')
