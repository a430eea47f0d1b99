// Command ipscheduler-ipam is the node-side CNI IPAM plugin of ipscheduler:
// it hands a pod the underlay address the scheduler reserved for it (pod
// annotations ipscheduler.io/ip and ipscheduler.io/pool; a dual-stack pod's
// IPv4 and IPv6 addresses, ipscheduler.io/ips; a multi-homed pod's further
// interface, picked by CNI_IFNAME in ipscheduler.io/interfaces, from its own
// pool), after checking the reservation against the NodeIPPool status in the
// Kubernetes API.
package main

import (
	"os"

	"github.com/ipscheduler/ipscheduler/cni/internal/ipam"
)

func main() {
	os.Exit(ipam.Main())
}
