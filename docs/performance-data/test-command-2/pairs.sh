#!/usr/bin/env bash
# The README's test command, timed in alternating runs: old new old new.
# old = a worktree at 3fc873c (/work/old, cache ~/.cache/idemkey-old), new = this
# clone (cache ~/.cache/idemkey); each side ran once, untimed, before (its build).
# Writes times.tsv and one log per run; steps.tsv and tests-*.tsv come from the logs
# (each step's "ok (Ns)" in the summary, each nextest "PASS [ Ns ]" line).
set -u
OUTD=/tmp/pairs; mkdir -p $OUTD
echo -e "run\tgit\tstart_utc\tseconds\tresult" > $OUTD/times.tsv
i=0
for side in old new old new; do
  i=$((i+1))
  if [ $side = old ]; then dir=/work/old; cache=$HOME/.cache/idemkey-old; else dir=/work/main; cache=$HOME/.cache/idemkey; fi
  git=$(git -C $dir rev-parse --short HEAD)
  start=$(date -u +%H:%M:%S); t0=$(date +%s)
  (cd $dir && env -u CARGO_TARGET_DIR IDEMKEY_CACHE=$cache ./scripts/test.sh > $OUTD/$side$i.log 2>&1); rc=$?
  t=$(( $(date +%s) - t0 ))
  res=passed; [ $rc = 0 ] || res="failed($rc)"
  echo -e "$side$i\t$git\t$start\t$t\t$res" >> $OUTD/times.tsv
done
