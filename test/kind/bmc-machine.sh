#!/usr/bin/env bash
# bmc-machine.sh NODE — "the machine" behind one simulated BMC: ipmi_sim runs
# this as its startcmd, and chassis power is on exactly while it lives.
#
#   BMC power on   ipmi_sim starts this script   -> docker start NODE
#   BMC power off  ipmi_sim sends it SIGTERM     -> docker kill NODE
#                  (a hard power-off: no shutdown, like a real BMC's "off")
#   plug pulled    someone runs docker kill NODE -> docker wait returns, this
#                  script exits, and the BMC reads "off" — it tells the truth,
#                  as a real one would.
set -euo pipefail

node="${1:?usage: bmc-machine.sh NODE}"

docker start "$node" >/dev/null
# On SIGTERM (power off), kill the container; the trap runs while bash
# waits for docker wait below.
trap 'docker kill "$node" >/dev/null 2>&1 || true; exit 0' TERM INT
# In the background with `wait`, so that the trap runs at once instead of
# after docker wait returns.
docker wait "$node" >/dev/null &
wait $!
