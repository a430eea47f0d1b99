package ipam

import (
	"bytes"
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

// net1Network is net1's network: its subnet, gateway and a route that is
// not the default one.
const net1Network = `{"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}],"routes":[{"dst":"10.2.0.0/16","gw":"10.1.0.1"}]}`

// interfacesNet1 is ipscheduler.io/interfaces for one further interface,
// net1, with 10.1.0.5 of NodeIPPool rdma-a.
const interfacesNet1 = `{"net1":{"pool":"rdma-a","ips":["10.1.0.5"],"network":` + net1Network + `}}`

// interfacesNet1Dual is net1 dual-stack: 10.1.0.5 and fd01::5 of rdma-a.
const interfacesNet1Dual = `{"net1":{"pool":"rdma-a","ips":["10.1.0.5","fd01::5"],"network":{"ips":[` +
	`{"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"address":"fd01::5/64","gateway":"fd01::1"}],` +
	`"routes":[{"dst":"10.2.0.0/16","gw":"10.1.0.1"},{"dst":"fd02::/64","gw":"fd01::1"}]}}}`

// interfacesWith is ipscheduler.io/interfaces with net1's entry (pool rdma-a)
// carrying ips and network as given (JSON texts).
func interfacesWith(ips, network string) string {
	return `{"net1":{"pool":"rdma-a","ips":` + ips + `,"network":` + network + `}}`
}

// mkNamedPool is mkPool named name.
func mkNamedPool(name, node string, addresses []string, allocs map[string]kube.Allocation) *kube.NodeIPPool {
	p := mkPool(node, addresses, allocs)
	p.Metadata.Name = name
	return p
}

// allocIface is an allocation of a further interface.
func allocIface(iface string, ips ...string) kube.Allocation {
	a := alloc(ips[0], "Bound")
	if len(ips) > 1 {
		a.IPs = ips
	}
	a.Interface = iface
	return a
}

func TestParseInterfaces(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    string // name: pool ips -> network addresses, routes; sorted by name
		wantErr string
	}{
		{name: "one interface", text: interfacesNet1, want: "net1: rdma-a 10.1.0.5 -> 10.1.0.5/24 gw 10.1.0.1 routes [10.2.0.0/16 via 10.1.0.1]"},
		{name: "dual-stack interface", text: interfacesNet1Dual,
			want: "net1: rdma-a 10.1.0.5,fd01::5 -> 10.1.0.5/24 gw 10.1.0.1, fd01::5/64 gw fd01::1 routes [10.2.0.0/16 via 10.1.0.1, fd02::/64 via fd01::1]"},
		{name: "two interfaces, pretty-printed, pool and addresses trimmed",
			text: "{\n \"net2\": {\"network\": {\"ips\": [{\"address\": \"fd01::9/64\"}]}, \"ips\": [\" FD01:0::9 \"], \"pool\": \" roce-b \"},\n" +
				" \"net1\": " + `{"pool":"rdma-a","ips":["10.1.0.5"],"network":{"ips":[{"address":"10.1.0.5/24"}]}}` + "\n}",
			want: "net1: rdma-a 10.1.0.5 -> 10.1.0.5/24 gw <nil> routes []; net2: roce-b fd01::9 -> fd01::9/64 gw <nil> routes []"},
		{name: "no interface", text: `{}`, want: ""},
		{name: "network addresses are not compared here",
			text: interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.6/24"},{"address":"fd01::6/64"}]}`),
			want: "net1: rdma-a 10.1.0.5 -> 10.1.0.6/24 gw <nil>, fd01::6/64 gw <nil> routes []"},
		{name: "default routes are not refused here",
			text: interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5/24"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}`),
			want: "net1: rdma-a 10.1.0.5 -> 10.1.0.5/24 gw <nil> routes [0.0.0.0/0 via 10.1.0.1]"},

		{name: "not JSON", text: `net1=rdma-a`, wantErr: "is not a JSON object of interface name to entry"},
		{name: "truncated", text: `{"net1":{"pool":"rdma-a"`, wantErr: "is not a JSON object"},
		{name: "a list", text: `[{"pool":"rdma-a"}]`, wantErr: `[{"pool":"rdma-a"}] is not an object`},
		{name: "null", text: `null`, wantErr: "null is not an object"},
		{name: "a string", text: `"net1"`, wantErr: "is not an object"},
		{name: "trailing data", text: interfacesNet1 + ` {}`, wantErr: "trailing data"},
		{name: "an interface twice", text: `{"net1":{},"net1":{}}`, wantErr: `key "net1" twice`},
		{name: "an entry that is not an object", text: `{"net1":"rdma-a"}`, wantErr: "entry net1: not a JSON object"},
		{name: "an entry that is null", text: `{"net1":null}`, wantErr: "entry net1: not a JSON object"},
		{name: "an entry with an unknown key",
			text: `{"net1":{"pool":"rdma-a","ips":["10.1.0.5"],"network":{"ips":[]},"mac":"x"}}`, wantErr: `unknown key "mac"`},
		{name: "an entry with a key twice",
			text: `{"net1":{"pool":"rdma-a","pool":"rdma-b","ips":["10.1.0.5"],"network":{}}}`, wantErr: `key "pool" twice`},
		{name: "no pool", text: `{"net1":{"ips":["10.1.0.5"],"network":` + net1Network + `}}`, wantErr: "entry net1: no pool"},
		{name: "pool not a string", text: `{"net1":{"pool":7,"ips":["10.1.0.5"],"network":` + net1Network + `}}`, wantErr: "pool 7 is not a string"},
		{name: "pool null", text: `{"net1":{"pool":null,"ips":["10.1.0.5"],"network":` + net1Network + `}}`, wantErr: "pool null is not a string"},
		{name: "pool empty", text: `{"net1":{"pool":" ","ips":["10.1.0.5"],"network":` + net1Network + `}}`, wantErr: `pool "" is not a NodeIPPool name`},
		{name: "pool not a name", text: `{"net1":{"pool":"../pods","ips":["10.1.0.5"],"network":` + net1Network + `}}`,
			wantErr: `pool "../pods" is not a NodeIPPool name`},
		{name: "no ips", text: `{"net1":{"pool":"rdma-a","network":` + net1Network + `}}`, wantErr: "entry net1: no ips"},
		{name: "ips a string", text: interfacesWith(`"10.1.0.5"`, net1Network), wantErr: `ips "10.1.0.5" is not a list of addresses`},
		{name: "ips null", text: interfacesWith(`null`, net1Network), wantErr: "ips null is not a list of addresses"},
		{name: "ips empty", text: interfacesWith(`[]`, net1Network), wantErr: "ips is empty"},
		{name: "ips with a number", text: interfacesWith(`["10.1.0.5",6]`, net1Network), wantErr: "is not a list of addresses"},
		{name: "ips with null", text: interfacesWith(`["10.1.0.5",null]`, net1Network), wantErr: "ips: entry 2 is null"},
		{name: "ips with an empty entry", text: interfacesWith(`["10.1.0.5",""]`, net1Network), wantErr: "entry 2 is empty"},
		{name: "ips with a prefix", text: interfacesWith(`["10.1.0.5/24"]`, net1Network), wantErr: "entry 1"},
		{name: "ips with a zone", text: interfacesWith(`["fe80::5%net1"]`, net1Network), wantErr: "zones"},
		{name: "ips, two IPv4 addresses", text: interfacesWith(`["10.1.0.5","10.1.0.6"]`, net1Network), wantErr: "two IPv4 addresses"},
		{name: "ips, three addresses", text: interfacesWith(`["10.1.0.5","fd01::5","fd01::6"]`, net1Network), wantErr: "3 addresses: at most two"},
		{name: "ips, one address with a comma", text: interfacesWith(`["10.1.0.5,fd01::5"]`, net1Network), wantErr: "entry 1"},
		{name: "no network", text: `{"net1":{"pool":"rdma-a","ips":["10.1.0.5"]}}`, wantErr: "entry net1: no network"},
		{name: "network as a string", text: interfacesWith(`["10.1.0.5"]`, `"{\"ips\":[]}"`), wantErr: "is not a JSON object"},
		{name: "network null", text: interfacesWith(`["10.1.0.5"]`, `null`), wantErr: "network null is not a JSON object"},
		{name: "network with interfaces", text: interfacesWith(`["10.1.0.5"]`, `{"interfaces":[],"ips":[{"address":"10.1.0.5/24"}]}`),
			wantErr: `network: json: unknown field "interfaces"`},
		{name: "network address without prefix", text: interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5"}]}`),
			wantErr: "network: ips[0].address"},
		{name: "network gateway of the other family", text: interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5/24","gateway":"fd01::1"}]}`),
			wantErr: "ips[0].gateway fd01::1 is not of the address's family"},
		{name: "network route gw of the other family",
			text:    interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5/24"}],"routes":[{"dst":"10.2.0.0/16","gw":"fd01::1"}]}`),
			wantErr: "different families"},
		{name: "network route without dst", text: interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5/24"}],"routes":[{"gw":"10.1.0.1"}]}`),
			wantErr: "routes[0].dst"},
		{name: "interface name empty", text: `{"":{}}`, wantErr: `key "" is not an interface name: interface name is empty`},
		{name: "interface name too long", text: `{"net1234567890123":{}}`, wantErr: "interface name is too long"},
		{name: "interface name with a slash", text: `{"net/1":{}}`, wantErr: "contains / or : or whitespace"},
		{name: "interface name with a colon", text: `{"net1:0":{}}`, wantErr: "contains / or : or whitespace"},
		{name: "interface name with a space", text: `{"net 1":{}}`, wantErr: "contains / or : or whitespace"},
		{name: "interface name ..", text: `{"..":{}}`, wantErr: "interface name is . or .."},
		{name: "a bad entry after a good one", text: `{"net1":` + interfacesNet1[8:len(interfacesNet1)-1] + `,"net2":{"pool":"x"}}`,
			wantErr: "entry net2: no ips"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseInterfaces(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := describeInterfaces(got); s != tt.want {
				t.Fatalf("got  %s\nwant %s", s, tt.want)
			}
		})
	}
}

func describeInterfaces(m map[string]InterfaceEntry) string {
	var out []string
	for _, name := range []string{"net1", "net2"} {
		if e, ok := m[name]; ok {
			out = append(out, name+": "+e.Pool+" "+joinAddrs(e.IPs)+" -> "+describe(e.Network))
		}
	}
	if len(out) != len(m) {
		return "unexpected interfaces"
	}
	return strings.Join(out, "; ")
}

// TestVerifyInterfaces: CNI_IFNAME picks the entry of ipscheduler.io/interfaces,
// else the first interface's annotations.
func TestVerifyInterfaces(t *testing.T) {
	ref := PodRef{Namespace: "default", Name: "web-0", UID: "u-1"}
	first := ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)
	with := func(extra ...string) map[string]string {
		m := ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	pods := func(a map[string]string) map[string]*kube.Pod {
		return map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", a)}
	}
	poolA := mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})
	pools := func(rdma ...*kube.NodeIPPool) map[string]*kube.NodeIPPool {
		m := map[string]*kube.NodeIPPool{"pool-a": poolA}
		for _, p := range rdma {
			m[p.Metadata.Name] = p
		}
		return m
	}
	rdma := func(allocs map[string]kube.Allocation) *kube.NodeIPPool {
		return mkNamedPool("rdma-a", "node-a", []string{"10.1.0.0/24", "fd01::/120"}, allocs)
	}
	net1 := rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "10.1.0.5")})
	net1Dual := rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "10.1.0.5", "fd01::5")})
	reserved := rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "10.1.0.5")})
	reserved.Spec.Namespaces = []string{"storage", "team-a"}
	defaultRoute := func(dst, gw string) string {
		return interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}],"routes":[`+
			`{"dst":"10.2.0.0/16","gw":"10.1.0.1"},{"dst":"`+dst+`","gw":"`+gw+`"}]}`)
	}
	dualNoDefault := `{"net1":{"pool":"rdma-a","ips":["10.1.0.5","fd01::5"],"network":{"ips":[{"address":"10.1.0.5/24"},{"address":"fd01::5/64"}],` +
		`"routes":[{"dst":"::/0","gw":"fd01::1"}]}}}`

	tests := []struct {
		name      string
		api       *fakeAPI
		ifName    string
		runtime   map[string]string
		wantCode  uint
		wantMsg   string // substring of msg + details
		wantIface string
		wantPool  string
		wantIPs   string
		wantCalls []string // when set, the API calls made
	}{
		{name: "net1 from its entry", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5",
			wantCalls: []string{"pod default/web-0", "pool rdma-a"}},
		{name: "net1 from the runtime capability (keys in another order, spaces)", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			runtime: with(AnnotationInterfaces, ` { "net1" : {"network":`+net1Network+`, "ips":["10.1.0.5"], "pool":"rdma-a"} } `,
				"kubernetes.io/config.source", "api"),
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5"},
		{name: "net1 dual-stack", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1Dual)), pools: pools(net1Dual)},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5,fd01::5"},
		{name: "net1 without the first interface's annotations", ifName: "net1",
			api:       &fakeAPI{pods: pods(map[string]string{AnnotationInterfaces: interfacesNet1}), pools: pools(net1)},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5"},
		{name: "eth0 of a pod with net1: the first interface's annotations", ifName: "eth0",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			wantIface: "", wantPool: "pool-a", wantIPs: "10.0.1.12"},
		{name: "net2, not in the map: the first interface's annotations", ifName: "net2",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			wantIface: "", wantPool: "pool-a", wantIPs: "10.0.1.12"},
		{name: "net1 of a pod without ipscheduler.io/interfaces: the first interface's annotations", ifName: "net1",
			api:       &fakeAPI{pods: pods(first), pools: pools()},
			wantIface: "", wantPool: "pool-a", wantIPs: "10.0.1.12"},
		{name: "an empty ipscheduler.io/interfaces is absent", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, " ")), pools: pools()},
			wantIface: "", wantPool: "pool-a", wantIPs: "10.0.1.12"},
		{name: "ipscheduler.io/interfaces {}: the first interface's annotations", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, "{}")), pools: pools()},
			wantIface: "", wantPool: "pool-a", wantIPs: "10.0.1.12"},
		{name: "net2 not in the map of a pod without a first-interface pool: as without the map", ifName: "net2",
			api:      &fakeAPI{pods: map[string]*kube.Pod{"default/web-0": mkPod("u-1", "default-scheduler", map[string]string{AnnotationInterfaces: interfacesNet1})}},
			wantCode: ErrNotOurs, wantMsg: "was not placed by ipscheduler"},

		// Tenancy: only the pool's spec.namespaces applies to a further interface.
		{name: "the pod's ipscheduler.io/pools names only the first interface's pool", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1, AnnotationPools, "pool-a")), pools: pools(net1)},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5"},
		{name: "the pod's malformed ipscheduler.io/pools is the first interface's business", ifName: "net1",
			api:       &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1, AnnotationPools, "pool-a,,")), pools: pools(net1)},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5"},
		{name: "the namespace's default-pools are not read for a further interface", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1),
				namespaces: map[string]*kube.Namespace{"default": mkNamespace("default", map[string]string{AnnotationDefaultPools: "pool-a"})}},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "10.1.0.5",
			wantCalls: []string{"pod default/web-0", "pool rdma-a"}},
		{name: "the pool is reserved for other namespaces", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(reserved)},
			wantCode: ErrTenancy, wantMsg: "the pod may not use this NodeIPPool; NodeIPPool rdma-a is reserved for namespaces storage, team-a (spec.namespaces), not default"},

		// The pool and the allocation.
		{name: "pool not found", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools()},
			wantCode: ErrPoolNotFound, wantMsg: "NodeIPPool rdma-a (ipscheduler.io/interfaces entry net1 of pod default/web-0) does not exist"},
		{name: "pool read: 503 is transient", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), poolErr: &kube.APIError{StatusCode: 503}},
			wantCode: types.ErrTryAgainLater, wantMsg: "reading NodeIPPool rdma-a"},
		{name: "pool of another node", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)),
				pools: pools(mkNamedPool("rdma-a", "node-b", []string{"10.1.0.0/24"}, map[string]kube.Allocation{"u-1": allocIface("net1", "10.1.0.5")}))},
			wantCode: ErrPoolOtherNode, wantMsg: `NodeIPPool rdma-a (interface net1) serves node "node-b", this is node "node-a"`},
		{name: "no allocation", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(rdma(nil))},
			wantCode: ErrNoAllocation, wantMsg: "NodeIPPool rdma-a has no allocation for pod default/web-0 UID u-1 (interface net1)"},
		{name: "allocation without interface: the first interface's", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)),
				pools: pools(rdma(map[string]kube.Allocation{"u-1": alloc("10.1.0.5", "Bound")}))},
			wantCode: ErrAllocationMismatch,
			wantMsg:  "ipscheduler.io/interfaces entry net1 names NodeIPPool rdma-a, whose allocation to UID u-1 is for the pod's first interface (no interface), not net1"},
		{name: "allocation for net2", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)),
				pools: pools(rdma(map[string]kube.Allocation{"u-1": allocIface("net2", "10.1.0.5")}))},
			wantCode: ErrAllocationMismatch, wantMsg: "is for interface net2, not net1"},
		{name: "allocation holds another address", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)),
				pools: pools(rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "10.1.0.6")}))},
			wantCode: ErrAllocationMismatch,
			wantMsg:  `pod default/web-0 interface net1 is annotated ips 10.1.0.5 (ipscheduler.io/interfaces), NodeIPPool rdma-a allocates ip "10.1.0.6" (no ips) to UID u-1`},
		{name: "dual-stack entry, allocation holds one address", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1Dual)), pools: pools(net1)},
			wantCode: ErrAllocationMismatch, wantMsg: "annotated ips 10.1.0.5,fd01::5"},
		{name: "dual-stack entry, allocation in the other order", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1Dual)),
				pools: pools(rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "fd01::5", "10.1.0.5")}))},
			wantCode: ErrAllocationMismatch, wantMsg: `allocates ips ["fd01::5" "10.1.0.5"]`},
		{name: "allocation compared canonically", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesWith(`["FD01:0::5"]`, `{"ips":[{"address":"fd01::5/64"}]}`))),
				pools: pools(rdma(map[string]kube.Allocation{"u-1": allocIface("net1", "fd01:0:0::5")}))},
			wantIface: "net1", wantPool: "rdma-a", wantIPs: "fd01::5"},

		// The entry's network.
		{name: "network carries another address", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesWith(`["10.1.0.5"]`, `{"ips":[{"address":"10.1.0.6/24"}]}`))),
				pools: pools(net1)},
			wantCode: ErrNetworkMismatch,
			wantMsg:  "the network of an ipscheduler.io/interfaces entry does not match its ips; pod default/web-0: the network of ipscheduler.io/interfaces entry net1 carries 10.1.0.6, its ips are 10.1.0.5"},
		{name: "network carries no address", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesWith(`["10.1.0.5"]`, `{"routes":[]}`))), pools: pools(net1)},
			wantCode: ErrNetworkMismatch, wantMsg: "carries no address"},
		{name: "dual-stack network in the other order", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces,
				interfacesWith(`["10.1.0.5","fd01::5"]`, `{"ips":[{"address":"fd01::5/64"},{"address":"10.1.0.5/24"}]}`))), pools: pools(net1Dual)},
			wantCode: ErrNetworkMismatch, wantMsg: "carries fd01::5,10.1.0.5, its ips are 10.1.0.5,fd01::5"},
		{name: "dual-stack network with one address", ifName: "net1",
			api: &fakeAPI{pods: pods(with(AnnotationInterfaces,
				interfacesWith(`["10.1.0.5","fd01::5"]`, `{"ips":[{"address":"10.1.0.5/24"}]}`))), pools: pools(net1Dual)},
			wantCode: ErrNetworkMismatch, wantMsg: MsgInterfaceNetworkMismatch},
		{name: "IPv4 default route", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, defaultRoute("0.0.0.0/0", "10.1.0.1"))), pools: pools(net1)},
			wantCode: ErrNetworkMismatch,
			wantMsg:  "a further interface never carries the default route; pod default/web-0: the network of ipscheduler.io/interfaces entry net1 has routes[1] dst 0.0.0.0/0, a default route"},
		{name: "default route written with host bits", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, defaultRoute("10.9.9.9/0", "10.1.0.1"))), pools: pools(net1)},
			wantCode: ErrNetworkMismatch, wantMsg: "routes[1] dst 0.0.0.0/0"},
		{name: "IPv6 default route of a dual-stack interface", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, dualNoDefault)), pools: pools(net1Dual)},
			wantCode: ErrNetworkMismatch, wantMsg: "routes[0] dst ::/0"},

		// A malformed ipscheduler.io/interfaces fails every interface.
		{name: "malformed: net1", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, `{"net1":{"pool":"rdma-a"}}`)), pools: pools(net1)},
			wantCode: ErrMalformedAnnotation, wantMsg: "malformed ipscheduler.io/interfaces annotation; pod default/web-0: ipscheduler.io/interfaces entry net1: no ips"},
		{name: "malformed: eth0 too", ifName: "eth0",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, `{"net1":{"pool":"rdma-a"}}`)), pools: pools(net1)},
			wantCode: ErrMalformedAnnotation, wantMsg: MsgMalformedInterfaces},
		{name: "malformed: net2, not in it", ifName: "net2",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, `{"net1":{"pool":"rdma-a"}}`)), pools: pools(net1)},
			wantCode: ErrMalformedAnnotation, wantMsg: MsgMalformedInterfaces},
		{name: "malformed: not JSON", ifName: "eth0",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, `net1=rdma-a`)), pools: pools(net1)},
			wantCode: ErrMalformedAnnotation, wantMsg: "is not a JSON object"},

		// The runtime capability.
		{name: "runtime capability with other interfaces", ifName: "net1",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			runtime:  with(AnnotationInterfaces, strings.Replace(interfacesNet1, "rdma-a", "rdma-b", 1)),
			wantCode: ErrRuntimeAnnotations, wantMsg: `ipscheduler.io/interfaces "{\"net1\":{\"pool\":\"rdma-b\"`},
		{name: "runtime capability without the pod's interfaces (eth0 too)", ifName: "eth0",
			api:      &fakeAPI{pods: pods(with(AnnotationInterfaces, interfacesNet1)), pools: pools(net1)},
			runtime:  first,
			wantCode: ErrRuntimeAnnotations, wantMsg: `ipscheduler.io/interfaces "" (runtime)`},
		{name: "runtime capability adds interfaces the pod lacks", ifName: "net1",
			api:      &fakeAPI{pods: pods(first), pools: pools(net1)},
			runtime:  with(AnnotationInterfaces, interfacesNet1),
			wantCode: ErrRuntimeAnnotations, wantMsg: "ipscheduler.io/interfaces"},

		// The first interface's allocation names no interface.
		{name: "the first interface's pool holds a further interface's allocation", ifName: "eth0",
			api: &fakeAPI{pods: pods(first), pools: map[string]*kube.NodeIPPool{
				"pool-a": mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": allocIface("net1", "10.0.1.12")})}},
			wantCode: ErrAllocationMismatch, wantMsg: "for its interface net1, not for the pod's first interface"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Verify(context.Background(), tt.api, Request{
				Pod: ref, NodeName: "node-a", SchedulerName: "ip-scheduler", RuntimeAnnotations: tt.runtime, IfName: tt.ifName,
			})
			if tt.wantCode != 0 && err == nil {
				t.Fatalf("want code %d, got %+v", tt.wantCode, v)
			}
			if failedAsWanted(t, err, tt.wantCode, tt.wantMsg) {
				return
			}
			if v.Interface != tt.wantIface || v.Pool != tt.wantPool || joinAddrs(v.Addresses()) != tt.wantIPs || v.IP != v.Addresses()[0] ||
				v.PodUID != "u-1" || v.Network == nil || len(v.Network.IPs) != len(v.IPs) {
				t.Fatalf("got %+v", v)
			}
			if tt.wantCalls != nil && !reflect.DeepEqual(tt.api.calls, tt.wantCalls) {
				t.Fatalf("calls %v, want %v", tt.api.calls, tt.wantCalls)
			}
		})
	}
}

func TestSelectAnnotationsInterfaces(t *testing.T) {
	live := map[string]string{AnnotationPool: "pool-a", AnnotationIP: "10.0.1.12", AnnotationInterfaces: interfacesNet1}
	tests := []struct {
		name     string
		runtime  string // the capability's ipscheduler.io/interfaces ("-": absent)
		wantCode uint
	}{
		{name: "the same text", runtime: interfacesNet1},
		{name: "whitespace", runtime: "\n" + strings.ReplaceAll(interfacesNet1, ",", ", ") + " "},
		{name: "keys in another order", runtime: `{"net1":{"network":` + net1Network + `,"ips":["10.1.0.5"],"pool":"rdma-a"}}`},
		{name: "absent", runtime: "-", wantCode: ErrRuntimeAnnotations},
		{name: "empty", runtime: "", wantCode: ErrRuntimeAnnotations},
		{name: "another pool", runtime: strings.Replace(interfacesNet1, "rdma-a", "rdma-b", 1), wantCode: ErrRuntimeAnnotations},
		{name: "another address", runtime: strings.Replace(interfacesNet1, `["10.1.0.5"]`, `["10.1.0.6"]`, 1), wantCode: ErrRuntimeAnnotations},
		{name: "another interface name", runtime: strings.Replace(interfacesNet1, "net1", "net2", 1), wantCode: ErrRuntimeAnnotations},
		{name: "a further interface more",
			runtime:  interfacesNet1[:len(interfacesNet1)-1] + `,"net2":{"pool":"x","ips":["10.3.0.1"],"network":{}}}`,
			wantCode: ErrRuntimeAnnotations},
		{name: "not JSON", runtime: "{net1}", wantCode: ErrRuntimeAnnotations},
		{name: "trailing data", runtime: interfacesNet1 + "{}", wantCode: ErrRuntimeAnnotations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime := map[string]string{AnnotationPool: "pool-a", AnnotationIP: "10.0.1.12"}
			if tt.runtime != "-" {
				runtime[AnnotationInterfaces] = tt.runtime
			}
			got, src, err := SelectAnnotations(runtime, live)
			if failedAsWanted(t, err, tt.wantCode, AnnotationInterfaces) {
				return
			}
			if src != SourceRuntime || got.Interfaces != strings.TrimSpace(tt.runtime) {
				t.Fatalf("got %+v from %s", got, src)
			}
		})
	}
}

func setupInterfaces(t *testing.T, interfaces string, net1Alloc kube.Allocation) (*fakeServer, string) {
	srv := newFakeServer(t, "tok")
	srv.setPod(mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationNetwork, network4, AnnotationInterfaces, interfaces)))
	srv.setPool(mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")}))
	srv.setPool(mkNamedPool("rdma-a", "node-a", []string{"10.1.0.0/24", "fd01::/120"}, map[string]kube.Allocation{"u-1": net1Alloc}))
	return srv, srv.writeKubeconfig(t, "tok")
}

// One sandbox, two interfaces: ADD eth0 and net1 each get their own
// addresses, recorded under their own CNI_IFNAME; CHECK of each passes; DEL
// of net1 frees net1's addresses only.
func TestAddCheckDelSeveralInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name       string
		interfaces string
		alloc      kube.Allocation
		want       string
		addrs      []string
	}{
		{name: "net1", interfaces: interfacesNet1, alloc: allocIface("net1", "10.1.0.5"),
			want:  `{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}],"routes":[{"dst":"10.2.0.0/16","gw":"10.1.0.1"}]}`,
			addrs: []string{"10.1.0.5"}},
		{name: "net1 dual-stack", interfaces: interfacesNet1Dual, alloc: allocIface("net1", "10.1.0.5", "fd01::5"),
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"address":"fd01::5/64","gateway":"fd01::1"}],` +
				`"routes":[{"dst":"10.2.0.0/16","gw":"10.1.0.1"},{"dst":"fd02::/64","gw":"fd01::1"}]}`,
			addrs: []string{"10.1.0.5", "fd01::5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, kc := setupInterfaces(t, tc.interfaces, tc.alloc)
			var out bytes.Buffer
			p := newPlugin(t, &out)
			args := func(ifName, extra string) *skel.CmdArgs {
				return &skel.CmdArgs{ContainerID: "abc", Netns: "/proc/self/ns/net", IfName: ifName, Args: cniArgs, StdinData: netconf("1.1.0", kc, extra)}
			}
			if err := p.Add(args("eth0", "")); err != nil {
				t.Fatalf("ADD eth0: %v", err)
			}
			assertJSON(t, out.Bytes(), `{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}`)
			out.Reset()
			if err := p.Add(args("net1", "")); err != nil {
				t.Fatalf("ADD net1: %v", err)
			}
			assertJSON(t, out.Bytes(), tc.want)

			l, _ := p.OpenLedger("")
			entries, err := l.Entries()
			if err != nil || len(entries) != 1+len(tc.addrs) || entries[netip.MustParseAddr("10.0.1.12")].IfName != "eth0" {
				t.Fatalf("ledger after both ADDs: %+v %v", entries, err)
			}
			for _, a := range tc.addrs {
				if e := entries[netip.MustParseAddr(a)]; e.ContainerID != "abc" || e.IfName != "net1" {
					t.Fatalf("ledger entry of %s: %+v", a, e)
				}
			}

			if err := p.Check(args("net1", `,"prevResult":`+tc.want)); err != nil {
				t.Fatalf("CHECK net1: %v", err)
			}
			if err := p.Check(args("eth0", `,"prevResult":`+tc.want)); !failedAsWanted(t, err, ErrPrevResultMismatch, "lacks 10.0.1.12") {
				t.Fatalf("CHECK eth0 with net1's result: %v", err)
			}

			for range 2 { // idempotent
				if err := p.Del(args("net1", "")); err != nil {
					t.Fatal(err)
				}
			}
			entries, err = l.Entries()
			if err != nil || len(entries) != 1 || entries[netip.MustParseAddr("10.0.1.12")].IfName != "eth0" {
				t.Fatalf("ledger after DEL net1: %+v %v", entries, err)
			}
			if err := p.Del(args("eth0", "")); err != nil {
				t.Fatal(err)
			}
			if entries, err := l.Entries(); err != nil || len(entries) != 0 {
				t.Fatalf("ledger after DEL eth0: %+v %v", entries, err)
			}
		})
	}
}

// net1's addresses are claimed all or none, and refused while another live
// sandbox (or another interface of the same sandbox) holds one of them.
func TestAFurtherInterfaceIsRefusedWhileOneAddressIsHeld(t *testing.T) {
	_, kc := setupInterfaces(t, interfacesNet1Dual, allocIface("net1", "10.1.0.5", "fd01::5"))
	var out bytes.Buffer
	p := newPlugin(t, &out)
	l, _ := p.OpenLedger("")
	for _, holder := range []ledger.Entry{
		{ContainerID: "old", IfName: "net1", Network: "underlay", Netns: "/proc/self/ns/net", PodUID: "u-0", Pod: "default/old"},
		{ContainerID: "abc", IfName: "net2", Network: "underlay", Netns: "/proc/self/ns/net", PodUID: "u-1", Pod: "default/web-0"},
	} {
		if err := l.Claim(netip.MustParseAddr("fd01::5"), holder); err != nil {
			t.Fatal(err)
		}
		args := &skel.CmdArgs{ContainerID: "abc", Netns: "/proc/self/ns/net", IfName: "net1", Args: cniArgs, StdinData: netconf("1.1.0", kc, "")}
		err := p.Add(args)
		if !failedAsWanted(t, err, types.ErrTryAgainLater, "address fd01::5 is still configured in sandbox "+holder.ContainerID+" (interface "+holder.IfName) ||
			out.Len() != 0 {
			t.Fatalf("ADD: %v (printed %q)", err, out.String())
		}
		if e, err := l.Holder(netip.MustParseAddr("10.1.0.5")); err != nil || e != nil {
			t.Fatalf("the IPv4 address was claimed anyway: %+v %v", e, err)
		}
		if err := p.Check(args); !failedAsWanted(t, err, types.ErrTryAgainLater, "fd01::5") {
			t.Fatalf("CHECK: %v", err)
		}
		if err := p.Del(&skel.CmdArgs{ContainerID: holder.ContainerID, IfName: holder.IfName, StdinData: args.StdinData}); err != nil {
			t.Fatal(err)
		}
		if err := p.Add(args); err != nil {
			t.Fatalf("ADD after the holder's DEL: %v", err)
		}
		if err := p.Del(args); err != nil {
			t.Fatal(err)
		}
		out.Reset()
	}
}

// TestVerifySecondFamilyFromASecondPool: a dual-stack pod whose families come
// from two pools has, for eth0, an ipscheduler.io/interfaces entry holding
// its second family: both pools are checked, and the result carries both
// addresses with ipscheduler.io/network.
func TestVerifySecondFamilyFromASecondPool(t *testing.T) {
	ref := PodRef{Namespace: "default", Name: "web-0", UID: "u-1"}
	const entry = `{"eth0":{"pool":"v6-a","ips":["fd00::c"],"network":{"ips":[{"address":"fd00::c/64","gateway":"fd00::1"}]}}}`
	podAnn := func(ips, interfaces string) map[string]string {
		return ann("pool-a", "10.0.1.12", AnnotationIPs, ips, AnnotationNetwork, networkDual, AnnotationInterfaces, interfaces)
	}
	first := func(a kube.Allocation) *kube.NodeIPPool {
		return mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": a})
	}
	second := func(allocs map[string]kube.Allocation) *kube.NodeIPPool {
		return mkNamedPool("v6-a", "node-a", []string{"fd00::/120"}, allocs)
	}
	ok4 := first(alloc("10.0.1.12", "Bound"))
	ok6 := second(map[string]kube.Allocation{"u-1": allocIface("eth0", "fd00::c")})
	tests := []struct {
		name     string
		ann      map[string]string
		pools    []*kube.NodeIPPool
		wantCode uint
		wantMsg  string
	}{
		{name: "both families, each from its pool", ann: podAnn("10.0.1.12,fd00::c", entry), pools: []*kube.NodeIPPool{ok4, ok6}},
		{name: "the first pool's allocation holds both", ann: podAnn("10.0.1.12,fd00::c", entry),
			pools:    []*kube.NodeIPPool{first(allocDual("Bound", "10.0.1.12", "fd00::c")), ok6},
			wantCode: ErrAllocationMismatch, wantMsg: "allocates"},
		{name: "the second pool's allocation is not eth0's", ann: podAnn("10.0.1.12,fd00::c", entry),
			pools:    []*kube.NodeIPPool{ok4, second(map[string]kube.Allocation{"u-1": allocDual("Bound", "fd00::c")})},
			wantCode: ErrAllocationMismatch, wantMsg: "is for the pod's first interface (no interface), not eth0"},
		{name: "the second pool holds nothing for the pod", ann: podAnn("10.0.1.12,fd00::c", entry),
			pools:    []*kube.NodeIPPool{ok4, second(nil)},
			wantCode: ErrNoAllocation, wantMsg: "interface eth0"},
		{name: "the entry holds the primary address", ann: podAnn("10.0.1.12,fd00::c",
			`{"eth0":{"pool":"v6-a","ips":["10.0.1.12"],"network":{"ips":[{"address":"10.0.1.12/24"}]}}}`),
			pools:    []*kube.NodeIPPool{ok4, ok6},
			wantCode: ErrMalformedAnnotation, wantMsg: "the pod's primary address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools := map[string]*kube.NodeIPPool{}
			for _, p := range tt.pools {
				name := p.Metadata.Name
				if name == "" {
					name = "pool-a"
				}
				pools[name] = p
			}
			api := &fakeAPI{pods: map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", tt.ann)}, pools: pools}
			v, err := Verify(context.Background(), api, Request{Pod: ref, NodeName: "node-a", SchedulerName: "ip-scheduler", IfName: "eth0"})
			if tt.wantCode != 0 && err == nil {
				t.Fatalf("want code %d, got %+v", tt.wantCode, v)
			}
			if failedAsWanted(t, err, tt.wantCode, tt.wantMsg) {
				return
			}
			if v.Interface != "" || v.Pool != "pool-a" || joinAddrs(v.Addresses()) != "10.0.1.12,fd00::c" || len(v.Network.IPs) != 2 {
				t.Fatalf("got %+v", v)
			}
		})
	}
}
