#!/usr/bin/env bash
# bench/outbox-pace.sh with its worker rounds' old poll (every 50 ms, end at the shell's clock)
# against the new (every 0.5 s, end at the last settlement), alternating, shared cores.
cd /work/main
export CARGO_TARGET_DIR=$HOME/.cache/idemkey/target
for i in 1 2 3; do
  for side in old new; do
    s=bench/outbox-pace.sh; [ $side = old ] && s=bench/outbox-pace-old.sh
    NICE=-20 BEFORE_BIN='' SKIP_MIX=1 $s 8 > /tmp/poll/$side-$i.txt 2>/tmp/poll/$side-$i.err
  done
done
