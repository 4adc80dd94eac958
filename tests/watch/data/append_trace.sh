#!/bin/sh
# Appends a small trace to $1 over ~2 s, the way a trainer logs: one line at
# a time, one of them in two writes with a pause between (a half-written line
# that the watcher must wait for, not report as damage). The file does not
# exist before the first line.
set -e
out=$1
line() { printf '%s\n' "$1" >> "$out"; sleep 0.25; }
sleep 0.3
line '{"step": 1, "time": 1001, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 10}}'
line '{"step": 2, "time": 1002, "values": {"loss": 6, "grad_norm{layer=\"conv1\"}": 2e5}}'
printf '%s' '{"step": 3, "time": 1003, "values": {"loss": 7, ' >> "$out"
sleep 0.5
printf '%s\n' '"grad_norm{layer=\"conv1\"}": 3e5}}' >> "$out"
sleep 0.25
line '{"step": 4, "time": 1004.5, "values": {"loss": 8, "grad_norm{layer=\"conv1\"}": 4e5}}'
line '{"step": 5, "time": 1005, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 1}}'
line '{"step": 6, "values": {"loss": 9}}'
line '{"step": 7, "values": {"loss": 9.5}}'
