#!/bin/sh
# Appends a small trace to $1 the way a trainer logs: one line at a time, step
# 3's line in two writes (a half-written line that the watcher must wait for,
# not report as damage). After step 3 it waits until the file $2 exists: the
# test creates it once it has seen step 3's firing, so that firing provably
# came out while this writer still had lines to write, however loaded the
# machine is. The wait is bounded (120 s) only as a deadlock guard.
set -e
out=$1
gate=$2
line() { printf '%s\n' "$1" >> "$out"; }
line '{"step": 1, "time": 1001, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 10}}'
line '{"step": 2, "time": 1002, "values": {"loss": 6, "grad_norm{layer=\"conv1\"}": 2e5}}'
printf '%s' '{"step": 3, "time": 1003, "values": {"loss": 7, ' >> "$out"
# Whether the watcher polls in this gap or not, the result must be the same.
sleep 0.3
printf '%s\n' '"grad_norm{layer=\"conv1\"}": 3e5}}' >> "$out"
i=0
while [ ! -e "$gate" ]; do
  i=$((i + 1))
  [ "$i" -le 6000 ] || { echo "append_trace.sh: no go-ahead after 120 s" >&2; exit 3; }
  sleep 0.02
done
line '{"step": 4, "time": 1004.5, "values": {"loss": 8, "grad_norm{layer=\"conv1\"}": 4e5}}'
line '{"step": 5, "time": 1005, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 1}}'
line '{"step": 6, "values": {"loss": 9}}'
line '{"step": 7, "values": {"loss": 9.5}}'
