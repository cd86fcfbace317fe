#!/bin/sh
# Runs one rank of a test job: rank $PT_SLOW_RANK inside network namespace $PT_NETNS (reached
# through veth $PT_IF_NS), every other rank in the host namespace (veth $PT_IF_HOST). gloo binds
# to the named interface, so every connection to the slow rank crosses the veth pair.
if [ "$RANK" = "$PT_SLOW_RANK" ]; then
  export GLOO_SOCKET_IFNAME="$PT_IF_NS"
  exec ip netns exec "$PT_NETNS" "$@"
fi
export GLOO_SOCKET_IFNAME="$PT_IF_HOST"
exec "$@"
