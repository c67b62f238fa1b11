#!/usr/bin/env bash
# The README's test command, timed in alternating runs after one untimed run of each side (its
# build): old = a worktree at 3fc873c (/work/old, cache ~/.cache/idemkey-old, seeded with a copy of
# the new side's cache without its incremental directories), new = this clone (~/.cache/idemkey).
# Writes times.tsv and one log per run; steps.tsv and tests-*.tsv come from the logs (each step's
# "ok (Ns)" in the summary, each nextest "PASS [ Ns ]" line).
set -u
OUTD=${OUTD:-/tmp/pairs3}
echo -e "run\tgit\tstart_utc\tseconds\tresult" > $OUTD/times.tsv
i=0
for side in warmold warmnew old new old new; do
  i=$((i+1))
  case $side in *old) dir=/work/old; cache=$HOME/.cache/idemkey-old;; *) dir=/work/main; cache=$HOME/.cache/idemkey;; esac
  git=$(git -C $dir rev-parse --short HEAD)
  start=$(date -u +%H:%M:%S); t0=$(date +%s)
  (cd $dir && env -u CARGO_TARGET_DIR IDEMKEY_CACHE=$cache ./scripts/test.sh > $OUTD/$side$i.log 2>&1); rc=$?
  t=$(( $(date +%s) - t0 ))
  res=passed; [ $rc = 0 ] || res="failed($rc)"
  echo -e "$side$i\t$git\t$start\t$t\t$res" >> $OUTD/times.tsv
done
