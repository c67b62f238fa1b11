#!/bin/bash
cd /work/main
for r in 1 2; do for v in base tid; do
  o=/tmp/tp/ab/$v-$r
  [ $((r % 2)) -eq 0 ] && [ $v = base ] && true
  TRIM_SQL=/tmp/tp/v/trim_$v.sql SERVER=/tmp/tp/srv ROWS=2000000 BACKLOG=250000 ROUNDS=1 TRIM_BATCHES=500 TRIM_SECS=10 \
    NICE=-20 OUT=$o bench/large-table.sh >/tmp/tp/ab/$v-$r.log 2>&1
  echo "$v-$r rc=$?"; tail -n +2 $o/trim.tsv
done; done
