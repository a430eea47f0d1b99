package ipam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

// Several underlay interfaces per pod. The scheduler gives a multi-homed pod
// (storage, RoCE: Multus attaches each further network as net1, net2, ...
// and runs each one's IPAM with CNI_IFNAME=net1, ...) further interfaces,
// each with addresses of its own NodeIPPool, and writes them in the pod's
// ipscheduler.io/interfaces, a compact JSON object, interface name → entry:
//
//	{"net1":{"pool":"rdma-a","ips":["10.1.0.5"],
//	         "network":{"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}],
//	                    "routes":[{"dst":"10.2.0.0/16","gw":"10.1.0.1"}]}}}
//
// pool holds the interface's allocation (status.allocations[<UID>] with
// "interface": "net1", ip = ips[0], and ips when two); ips are its addresses
// (one, or one per family, primary first); network is a CNI IPAM result
// without interfaces carrying those addresses in that order, never a default
// route (the pod's first interface carries it).

// InterfaceEntry is one entry of ipscheduler.io/interfaces, as parsed.
type InterfaceEntry struct {
	Pool string       // the NodeIPPool holding the interface's allocation
	IPs  []netip.Addr // its addresses, primary first (one or two, one per family)
	// Network is the entry's network, its form checked; whether it carries
	// exactly IPs, and no default route, is verifyInterface's check.
	Network *Network
	// NetworkAddrs are Network's addresses, in order.
	NetworkAddrs []netip.Addr
}

// ParseInterfaces parses an ipscheduler.io/interfaces value: a JSON object
// (no duplicate key, nothing after it) whose keys are interface names (as
// CNI_IFNAME: 1 to 15 characters, not "." or "..", no "/", ":" or white
// space) and whose values are objects with exactly the keys pool (a
// NodeIPPool name), ips (one or two addresses, at most one per family) and
// network (an object: a CNI IPAM result without interfaces, each address
// with its prefix, gateways and routes of the right family). Errors are
// plain: the caller makes them ErrMalformedAnnotation.
func ParseInterfaces(text string) (map[string]InterfaceEntry, error) {
	keys, values, err := decodeObject([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s is not a JSON object of interface name to entry: %v", AnnotationInterfaces, err)
	}
	out := make(map[string]InterfaceEntry, len(keys))
	for _, name := range keys {
		if e := utils.ValidateInterfaceName(name); e != nil {
			return nil, fmt.Errorf("%s: key %q is not an interface name: %s", AnnotationInterfaces, name, strings.TrimSuffix(e.Msg+"; "+e.Details, "; "))
		}
		entry, err := parseInterfaceEntry(values[name])
		if err != nil {
			return nil, fmt.Errorf("%s entry %s: %v", AnnotationInterfaces, name, err)
		}
		out[name] = entry
	}
	return out, nil
}

func parseInterfaceEntry(raw json.RawMessage) (InterfaceEntry, error) {
	keys, fields, err := decodeObject(raw)
	if err != nil {
		return InterfaceEntry{}, fmt.Errorf("not a JSON object: %v", err)
	}
	for _, k := range keys {
		if k != "pool" && k != "ips" && k != "network" {
			return InterfaceEntry{}, fmt.Errorf("unknown key %q (an entry has pool, ips and network)", k)
		}
	}
	var entry InterfaceEntry

	rawPool, ok := fields["pool"]
	if !ok {
		return InterfaceEntry{}, errors.New("no pool")
	}
	if jsonKind(rawPool) != '"' {
		return InterfaceEntry{}, fmt.Errorf("pool %s is not a string", rawPool)
	}
	if err := json.Unmarshal(rawPool, &entry.Pool); err != nil {
		return InterfaceEntry{}, fmt.Errorf("pool: %v", err)
	}
	entry.Pool = strings.TrimSpace(entry.Pool)
	if len(entry.Pool) > 253 || !poolNameRE.MatchString(entry.Pool) {
		return InterfaceEntry{}, fmt.Errorf("pool %q is not a NodeIPPool name", entry.Pool)
	}

	rawIPs, ok := fields["ips"]
	if !ok {
		return InterfaceEntry{}, errors.New("no ips")
	}
	var ips []*string // nil entries: JSON null, refused below
	if jsonKind(rawIPs) != '[' || json.Unmarshal(rawIPs, &ips) != nil {
		return InterfaceEntry{}, fmt.Errorf("ips %s is not a list of addresses", rawIPs)
	}
	if len(ips) == 0 {
		return InterfaceEntry{}, errors.New("ips is empty: an interface has one address, or one per family")
	}
	texts := make([]string, len(ips))
	for i, ip := range ips {
		if ip == nil {
			return InterfaceEntry{}, fmt.Errorf("ips: entry %d is null", i+1)
		}
		texts[i] = *ip
	}
	if entry.IPs, err = parseAddrList(texts); err != nil {
		return InterfaceEntry{}, fmt.Errorf("ips %s: %v", rawIPs, err)
	}

	rawNetwork, ok := fields["network"]
	if !ok {
		return InterfaceEntry{}, errors.New("no network")
	}
	if jsonKind(rawNetwork) != '{' {
		return InterfaceEntry{}, fmt.Errorf("network %s is not a JSON object", rawNetwork)
	}
	if entry.Network, entry.NetworkAddrs, err = decodeNetwork(string(rawNetwork)); err != nil {
		return InterfaceEntry{}, fmt.Errorf("network: %v", err)
	}
	return entry, nil
}

// jsonKind is the first byte of a JSON value ('{', '[', '"', 'n', 't', 'f',
// or a number's first character); 0 when it is empty.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// decodeObject decodes one JSON object into its keys, in document order,
// and their values. A duplicate key, anything but an object, and anything
// after it are errors.
func decodeObject(data []byte) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("%s is not an object", bytes.TrimSpace(data))
	}
	var keys []string
	values := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key := tok.(string) // inside an object, the decoder yields a key or an error
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, nil, err
		}
		if _, dup := values[key]; dup {
			return nil, nil, fmt.Errorf("key %q twice", key)
		}
		keys = append(keys, key)
		values[key] = value
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("trailing data after the JSON object")
	}
	return keys, values, nil
}

// verifyInterface verifies the further interface ifName of the pod (UID
// uid) against its ipscheduler.io/interfaces entry: the entry's pool exists
// and serves this node, its spec.namespaces lets the pod's namespace use it
// (the pod's ipscheduler.io/pools and the namespace's
// ipscheduler.io/default-pools choose the first interface's pool, not
// this one), its allocation for the UID is for ifName and holds exactly the
// entry's ips in that order, and the entry's network carries exactly those
// addresses and no default route.
func verifyInterface(ctx context.Context, api API, req Request, uid, ifName string, entry InterfaceEntry, source AnnotationSource) (*Verified, error) {
	ref := req.Pod
	pool, err := api.GetNodeIPPool(ctx, entry.Pool)
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, newErr(ErrPoolNotFound, MsgPoolNotFound,
				"NodeIPPool %s (%s entry %s of pod %s) does not exist", entry.Pool, AnnotationInterfaces, ifName, ref)
		}
		return nil, apiFailure(err, "reading NodeIPPool "+entry.Pool)
	}
	if pool.Spec.NodeName != req.NodeName {
		return nil, newErr(ErrPoolOtherNode, MsgPoolOtherNode,
			"NodeIPPool %s (interface %s) serves node %q, this is node %q", entry.Pool, ifName, pool.Spec.NodeName, req.NodeName)
	}
	if err := checkPoolNamespaces(ref.Namespace, pool, entry.Pool); err != nil {
		return nil, err
	}
	alloc, held := pool.Status.Allocations[uid]
	if !held {
		return nil, newErr(ErrNoAllocation, MsgNoAllocation,
			"NodeIPPool %s has no allocation for pod %s UID %s (interface %s)", entry.Pool, ref, uid, ifName)
	}
	if alloc.Interface != ifName {
		owner := "the pod's first interface (no interface)"
		if alloc.Interface != "" {
			owner = "interface " + alloc.Interface
		}
		return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
			"pod %s: %s entry %s names NodeIPPool %s, whose allocation to UID %s is for %s, not %s",
			ref, AnnotationInterfaces, ifName, entry.Pool, uid, owner, ifName)
	}
	if allocated, ok := allocationAddrs(alloc); !ok || !slices.Equal(allocated, entry.IPs) {
		return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
			"pod %s interface %s is annotated ips %s (%s), NodeIPPool %s allocates %s to UID %s",
			ref, ifName, joinAddrs(entry.IPs), AnnotationInterfaces, entry.Pool, describeAllocation(alloc), uid)
	}
	if !slices.Equal(entry.NetworkAddrs, entry.IPs) {
		return nil, newErr(ErrNetworkMismatch, MsgInterfaceNetworkMismatch,
			"pod %s: the network of %s entry %s carries %s, its ips are %s (exactly those, in that order)",
			ref, AnnotationInterfaces, ifName, describeAddrs(entry.NetworkAddrs), joinAddrs(entry.IPs))
	}
	for i, r := range entry.Network.Routes {
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			return nil, newErr(ErrNetworkMismatch, MsgInterfaceDefaultRoute,
				"pod %s: the network of %s entry %s has routes[%d] dst %s, a default route: only the pod's first interface carries it",
				ref, AnnotationInterfaces, ifName, i, r.Dst.String())
		}
	}
	return &Verified{
		Pod: ref, PodUID: uid, Interface: ifName, Pool: entry.Pool,
		IP: entry.IPs[0], IPs: entry.IPs, Network: entry.Network, Source: source,
	}, nil
}

// describeAddrs is joinAddrs, or "no address".
func describeAddrs(addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return "no address"
	}
	return joinAddrs(addrs)
}
