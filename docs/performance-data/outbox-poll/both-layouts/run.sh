#!/usr/bin/env bash
# bench/run.sh's two outbox-pace parts, alone, as it runs them (PACE_MIX 60, SUB_DUR 8)
cd /work/main
export CARGO_TARGET_DIR=$HOME/.cache/idemkey/target
SERVER=$CARGO_TARGET_DIR/release/idemkey-server
NICE=-20 BIN=$SERVER BEFORE_BIN='' W=/tmp/pace11/w MIX_TARGETS="sink sim" DRAIN_MAX=30 \
  bench/outbox-pace.sh 8 60 > /tmp/pace11/outbox-pace.txt 2> /tmp/pace11/outbox-pace.log
NICE=-20 SPLIT=1 BIN=$SERVER BEFORE_BIN='' W=/tmp/pace11/w MIX_TARGETS=sim DRAIN_MAX=30 \
  bench/outbox-pace.sh 8 60 > /tmp/pace11/outbox-pace-split.txt 2> /tmp/pace11/outbox-pace-split.log
