#!/usr/bin/env bash
# EVALSHA throughput and server CPU per op: fallow vs redis-server 7.0.15, side by side, alternating rounds.
set -u
FALLOW=${FALLOW_BIN:-target/release/fallow}
redis-server --port 7811 --save '' --appendonly no --daemonize yes >/dev/null
$FALLOW --port 7812 --memcache-port 0 --unixsocket '' --dir $(mktemp -d) --log-level warn >/dev/null 2>&1 &
sleep 1
DECL="return redis.call('incr', KEYS[1])"
UNDECL="return redis.call('incr', ARGV[1] .. 'x')"
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for port in 7811 7812; do
  redis-cli -p $port script load "$DECL" >/dev/null; redis-cli -p $port script load "$UNDECL" >/dev/null
done
SD=$(redis-cli -p 7811 script load "$DECL"); SU=$(redis-cli -p 7811 script load "$UNDECL")
RP=$(pgrep -f "redis-server \*:7811"); FP=$(pgrep -f "fallow --port 7812")
N=200000
for round in 1 2 3; do
  for which in declared undeclared; do
    if [ $which = declared ]; then args="EVALSHA $SD 1 k"; else args="EVALSHA $SU 0 k"; fi
    for port in 7811 7812; do
      pid=$([ $port = 7811 ] && echo $RP || echo $FP)
      c0=$(cpu $pid)
      ops=$(redis-benchmark -p $port -n $N -c 20 -q $args 2>/dev/null | grep -oE '[0-9.]+ requests per second' | awk '{print $1}')
      c1=$(cpu $pid)
      ticks=$((c1-c0)); us_per_op=$(python3 -c "print(round($ticks*10000/$N,2))")
      echo "round=$round script=$which server=$([ $port = 7811 ] && echo redis || echo fallow) ops_per_s=$ops cpu_us_per_op=$us_per_op"
    done
  done
done
redis-cli -p 7811 shutdown nosave >/dev/null 2>&1; redis-cli -p 7812 shutdown nosave >/dev/null 2>&1
