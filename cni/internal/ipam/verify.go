package ipam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

// API is what verification reads from the Kubernetes API (*kube.Client in
// production, fakes in tests).
type API interface {
	GetPod(ctx context.Context, namespace, name string) (*kube.Pod, error)
	GetNodeIPPool(ctx context.Context, name string) (*kube.NodeIPPool, error)
	// GetNamespace is read for its ipscheduler.io/default-pools, only when
	// the pod has no ipscheduler.io/pools.
	GetNamespace(ctx context.Context, name string) (*kube.Namespace, error)
}

// Request is what one ADD/CHECK asks to verify.
type Request struct {
	Pod           PodRef
	NodeName      string
	SchedulerName string
	// RuntimeAnnotations are the pod annotations the runtime passed in
	// runtimeConfig["io.kubernetes.cri.pod-annotations"]; nil when absent.
	RuntimeAnnotations map[string]string
	// IfName is CNI_IFNAME: the pod's interface being configured. When the
	// pod's ipscheduler.io/interfaces has an entry for it, that entry is
	// verified (a further interface); else the first interface's
	// annotations, whatever the name.
	IfName string
}

// AnnotationSource tells where the annotations used came from.
type AnnotationSource string

// Annotation sources.
const (
	SourceRuntime AnnotationSource = "runtimeConfig"
	SourceAPI     AnnotationSource = "api"
)

// Annotations are the scheduler's annotations of one pod.
type Annotations struct {
	Pool string // ipscheduler.io/pool ("" when absent)
	IP   string // ipscheduler.io/ip, trimmed ("" when absent or empty: no address)
	// IPs is ipscheduler.io/ips, trimmed ("" when absent or empty): every
	// address of a dual-stack pod, comma-separated, IP first. Single-stack
	// pods have none.
	IPs     string
	Network string // ipscheduler.io/network ("" when absent)
	// Interfaces is ipscheduler.io/interfaces, trimmed ("" when absent or
	// empty): the pod's further interfaces (ParseInterfaces).
	Interfaces string
}

func annotationsOf(m map[string]string) Annotations {
	return Annotations{
		Pool:       strings.TrimSpace(m[AnnotationPool]),
		IP:         strings.TrimSpace(m[AnnotationIP]),
		IPs:        strings.TrimSpace(m[AnnotationIPs]),
		Network:    strings.TrimSpace(m[AnnotationNetwork]),
		Interfaces: strings.TrimSpace(m[AnnotationInterfaces]),
	}
}

// Network is a parsed ipscheduler.io/network annotation.
type Network struct {
	// IPs holds one entry per address of the pod, in the order of the
	// pod's addresses (ipscheduler.io/ips, else ipscheduler.io/ip alone).
	IPs    []NetworkIP
	Routes []*types.Route
	DNS    types.DNS
}

// NetworkIP is one address of ipscheduler.io/network.
type NetworkIP struct {
	Address net.IPNet // the pod's address with its subnet's prefix length
	Gateway net.IP    // nil: none
}

// Verified is the outcome of a successful verification.
type Verified struct {
	Pod    PodRef
	PodUID string
	// Interface is the further interface (ipscheduler.io/interfaces' key,
	// CNI_IFNAME) whose entry was verified; "" for the first interface.
	Interface string
	Pool      string
	IP        netip.Addr // the primary address (ipscheduler.io/ip)
	// IPs is every address of the pod, IP first: ipscheduler.io/ips for a
	// dual-stack pod, else IP alone (nil is read as IP alone).
	IPs     []netip.Addr
	Network *Network // nil: no ipscheduler.io/network, each address is a host route
	Source  AnnotationSource
}

// Addresses is every address of the pod, primary first.
func (v *Verified) Addresses() []netip.Addr {
	if len(v.IPs) == 0 {
		return []netip.Addr{v.IP}
	}
	return v.IPs
}

// SelectAnnotations picks the annotations to use: the runtime's capability
// when it was passed (which must then agree with the live pod's, else
// ErrRuntimeAnnotations), else the live pod's.
func SelectAnnotations(runtime, live map[string]string) (Annotations, AnnotationSource, error) {
	liveAnn := annotationsOf(live)
	if runtime == nil {
		return liveAnn, SourceAPI, nil
	}
	rtAnn := annotationsOf(runtime)
	var diffs []string
	if rtAnn.Pool != liveAnn.Pool {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationPool, rtAnn.Pool, liveAnn.Pool))
	}
	if !sameAddress(rtAnn.IP, liveAnn.IP) {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationIP, rtAnn.IP, liveAnn.IP))
	}
	if !sameAddressList(rtAnn.IPs, liveAnn.IPs) {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationIPs, rtAnn.IPs, liveAnn.IPs))
	}
	if !sameJSON(rtAnn.Network, liveAnn.Network) {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationNetwork, rtAnn.Network, liveAnn.Network))
	}
	if !sameJSONValue(rtAnn.Interfaces, liveAnn.Interfaces) {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationInterfaces, rtAnn.Interfaces, liveAnn.Interfaces))
	}
	if len(diffs) > 0 {
		return Annotations{}, SourceRuntime, newErr(ErrRuntimeAnnotations, MsgRuntimeAnnotations, "%s", strings.Join(diffs, "; "))
	}
	return rtAnn, SourceRuntime, nil
}

// sameAddress compares two addresses canonically; texts that do not parse
// are compared as they are.
func sameAddress(a, b string) bool {
	if a == b {
		return true
	}
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	return errA == nil && errB == nil && pa == pb
}

// sameAddressList compares two comma-separated address lists entry by
// entry, each canonically (sameAddress), in order.
func sameAddressList(a, b string) bool {
	if a == b {
		return true
	}
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if !sameAddress(strings.TrimSpace(as[i]), strings.TrimSpace(bs[i])) {
			return false
		}
	}
	return true
}

// sameJSON compares two JSON texts ignoring insignificant whitespace.
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	var ca, cb bytes.Buffer
	return json.Compact(&ca, []byte(a)) == nil && json.Compact(&cb, []byte(b)) == nil && ca.String() == cb.String()
}

// sameJSONValue compares two JSON texts as the values they encode: the
// order of an object's keys and insignificant whitespace do not matter,
// numbers are compared as written. Texts that do not parse are compared as
// they are.
func sameJSONValue(a, b string) bool {
	if a == b {
		return true
	}
	va, errA := decodeJSONValue(a)
	vb, errB := decodeJSONValue(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func decodeJSONValue(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

// ParseIP parses an ipscheduler.io/ip value as the scheduler writes it (one
// IPv4 or IPv6 address, no zone, no IPv4-mapped IPv6).
func ParseIP(text string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(text))
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q: zones are not supported", text)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q: IPv4-mapped IPv6 addresses are not supported", text)
	}
	return a, nil
}

// ParseIPs parses an ipscheduler.io/ips value as the scheduler writes it:
// one or two comma-separated addresses (each as ParseIP, spaces around
// entries ignored), no empty entry, at most one per family. Whether the
// first is ipscheduler.io/ip is the caller's check.
func ParseIPs(text string) ([]netip.Addr, error) {
	out, err := parseAddrList(strings.Split(text, ","))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", text, err)
	}
	return out, nil
}

// parseAddrList parses the addresses of one interface, primary first: one
// or two entries (each as ParseIP, spaces around it ignored), none empty,
// at most one per family.
func parseAddrList(entries []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(entries))
	for i, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
		a, err := ParseIP(entry)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		out = append(out, a)
	}
	if len(out) > 2 {
		return nil, fmt.Errorf("%d addresses: at most two, one per family", len(out))
	}
	if len(out) == 2 && out[0].Is4() == out[1].Is4() {
		return nil, fmt.Errorf("two %s addresses: at most one per family", family(out[0]))
	}
	return out, nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// joinAddrs is addrs as ipscheduler.io/ips writes them (canonical, comma-separated).
func joinAddrs(addrs []netip.Addr) string {
	texts := make([]string, len(addrs))
	for i, a := range addrs {
		texts[i] = a.String()
	}
	return strings.Join(texts, ",")
}

// networkAnnotation is ipscheduler.io/network as written (also the network
// of an ipscheduler.io/interfaces entry): a CNI IPAM result without
// interfaces.
type networkAnnotation struct {
	IPs    []networkIPJSON `json:"ips"`
	Routes []routeJSON     `json:"routes"`
	DNS    types.DNS       `json:"dns"`
}

type networkIPJSON struct {
	Address string `json:"address"`
	Gateway string `json:"gateway,omitempty"`
}

type routeJSON struct {
	Dst      string `json:"dst"`
	GW       string `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    *int   `json:"table,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
}

// decodeNetworkJSON decodes a network strictly: unknown keys and trailing
// data are errors.
func decodeNetworkJSON(text string) (*networkAnnotation, error) {
	var raw networkAnnotation
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return &raw, nil
}

// parseNetworkAddress parses ips[i].address: an address with its prefix.
func parseNetworkAddress(i int, entry networkIPJSON) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(strings.TrimSpace(entry.Address))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("ips[%d].address: %v", i, err)
	}
	if prefix.Addr().Zone() != "" || prefix.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("ips[%d].address %q: zones and IPv4-mapped IPv6 are not supported", i, entry.Address)
	}
	return prefix, nil
}

// parseNetworkGateway parses ips[i].gateway (nil when absent), of prefix's family.
func parseNetworkGateway(i int, entry networkIPJSON, prefix netip.Prefix) (net.IP, error) {
	gw := strings.TrimSpace(entry.Gateway)
	if gw == "" {
		return nil, nil
	}
	g, err := ParseIP(gw)
	if err != nil {
		return nil, fmt.Errorf("ips[%d].gateway: %v", i, err)
	}
	if g.Is4() != prefix.Addr().Is4() {
		return nil, fmt.Errorf("ips[%d].gateway %s is not of the address's family", i, g)
	}
	return net.IP(g.AsSlice()), nil
}

// parseRoute parses routes[i]: dst masked, gw of dst's family.
func parseRoute(i int, r routeJSON) (*types.Route, error) {
	dst, err := netip.ParsePrefix(strings.TrimSpace(r.Dst))
	if err != nil {
		return nil, fmt.Errorf("routes[%d].dst: %v", i, err)
	}
	route := &types.Route{
		Dst: ipNet(dst.Masked()), MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority, Table: r.Table, Scope: r.Scope,
	}
	if gw := strings.TrimSpace(r.GW); gw != "" {
		g, err := ParseIP(gw)
		if err != nil {
			return nil, fmt.Errorf("routes[%d].gw: %v", i, err)
		}
		if g.Is4() != dst.Addr().Is4() {
			return nil, fmt.Errorf("routes[%d]: gw %s and dst %s are of different families", i, g, dst)
		}
		route.GW = net.IP(g.AsSlice())
	}
	return route, nil
}

// decodeNetwork parses a network without comparing its addresses with
// anything: its addresses are returned in order. Errors are plain (the
// caller says which annotation is malformed).
func decodeNetwork(text string) (*Network, []netip.Addr, error) {
	raw, err := decodeNetworkJSON(text)
	if err != nil {
		return nil, nil, err
	}
	out := &Network{DNS: raw.DNS}
	var addrs []netip.Addr
	for i, entry := range raw.IPs {
		prefix, err := parseNetworkAddress(i, entry)
		if err != nil {
			return nil, nil, err
		}
		gw, err := parseNetworkGateway(i, entry, prefix)
		if err != nil {
			return nil, nil, err
		}
		out.IPs = append(out.IPs, NetworkIP{Address: ipNet(prefix), Gateway: gw})
		addrs = append(addrs, prefix.Addr())
	}
	for i, r := range raw.Routes {
		route, err := parseRoute(i, r)
		if err != nil {
			return nil, nil, err
		}
		out.Routes = append(out.Routes, route)
	}
	return out, addrs, nil
}

// ParseNetwork parses an ipscheduler.io/network value and checks it carries
// exactly the pod's addresses, in that order: ip (ipscheduler.io/ip), then
// more (the rest of ipscheduler.io/ips, for a dual-stack pod), each gateway of its address's
// family. Errors are *types.Error: ErrMalformedAnnotation or
// ErrNetworkMismatch (msg naming ipscheduler.io/ip for one address,
// ipscheduler.io/ips for more).
func ParseNetwork(text string, ip netip.Addr, more ...netip.Addr) (*Network, error) {
	ips := append([]netip.Addr{ip}, more...)
	malformed := func(format string, args ...any) error {
		return newErr(ErrMalformedAnnotation, MsgMalformedNetwork, format, args...)
	}
	raw, err := decodeNetworkJSON(text)
	if err != nil {
		return nil, malformed("%v", err)
	}
	if len(ips) == 1 && len(raw.IPs) != 1 {
		return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatch,
			"%s must carry exactly one address (%s), it has %d", AnnotationNetwork, ips[0], len(raw.IPs))
	}
	if len(ips) != 1 && len(raw.IPs) != len(ips) {
		return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatchIPs,
			"%s must carry exactly the addresses of %s (%s), in that order; it has %d", AnnotationNetwork, AnnotationIPs, joinAddrs(ips), len(raw.IPs))
	}
	out := &Network{DNS: raw.DNS}
	for i, entry := range raw.IPs {
		prefix, err := parseNetworkAddress(i, entry)
		if err != nil {
			return nil, malformed("%v", err)
		}
		if want := ips[i]; prefix.Addr() != want {
			if len(ips) == 1 {
				return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatch,
					"%s carries %s, %s is %s", AnnotationNetwork, prefix.Addr(), AnnotationIP, want)
			}
			return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatchIPs,
				"%s ips[%d] carries %s, address %d of %s (%s) is %s", AnnotationNetwork, i, prefix.Addr(), i+1, AnnotationIPs, joinAddrs(ips), want)
		}
		gw, err := parseNetworkGateway(i, entry, prefix)
		if err != nil {
			return nil, malformed("%v", err)
		}
		out.IPs = append(out.IPs, NetworkIP{Address: ipNet(prefix), Gateway: gw})
	}
	for i, r := range raw.Routes {
		route, err := parseRoute(i, r)
		if err != nil {
			return nil, malformed("%v", err)
		}
		out.Routes = append(out.Routes, route)
	}
	return out, nil
}

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Verify checks, against the API, that the pod named by req holds the
// addresses its annotations name (ipscheduler.io/ip, and every address of
// ipscheduler.io/ips for a dual-stack pod): the live pod's UID is
// K8S_POD_UID, its pool serves this node, the pod may use that pool (the
// scheduler's tenancy rules: checkTenancy), and the pool's allocation for
// that UID is those addresses, in that order.
//
// A pod with further interfaces has ipscheduler.io/interfaces: when present
// it must parse (ParseInterfaces; else ErrMalformedAnnotation, whatever
// req.IfName), and when it has an entry for req.IfName that entry is
// verified instead (verifyInterface); any other interface name is the first
// interface's, as above.
//
// A dual-stack pod whose two families come from two pools (no pool of the
// node gives both) has, for its first interface, an entry whose addresses
// are among ipscheduler.io/ips (a further interface's never are): its second
// family (secondFamily). The pool of ipscheduler.io/pool then holds the
// other addresses of ipscheduler.io/ips, the entry's pool holds the entry's
// (an allocation for that interface), and the result is
// ipscheduler.io/network, which carries them all.
// Errors are *types.Error (11, or the plugin's codes >= 100).
func Verify(ctx context.Context, api API, req Request) (*Verified, error) {
	ref := req.Pod
	pod, err := api.GetPod(ctx, ref.Namespace, ref.Name)
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, newErr(ErrPodNotFound, MsgPodNotFound, "pod %s does not exist", ref)
		}
		return nil, apiFailure(err, "reading pod "+ref.String())
	}
	uid := pod.Metadata.UID
	if ref.UID != "" && ref.UID != uid {
		return nil, newErr(ErrPodUIDMismatch, MsgPodUIDMismatch,
			"CNI_ARGS K8S_POD_UID %s, the live pod %s has UID %s (deleted and re-created?)", ref.UID, ref, uid)
	}
	if uid == "" {
		return nil, newErr(ErrAPI, MsgAPI, "pod %s has no metadata.uid", ref)
	}

	ann, source, err := SelectAnnotations(req.RuntimeAnnotations, pod.Metadata.Annotations)
	if err != nil {
		return nil, err
	}
	var second *InterfaceEntry // the first interface's second family, from a second pool
	if ann.Interfaces != "" {
		ifaces, err := ParseInterfaces(ann.Interfaces)
		if err != nil {
			return nil, newErr(ErrMalformedAnnotation, MsgMalformedInterfaces, "pod %s: %v", ref, err)
		}
		if entry, ok := ifaces[req.IfName]; ok {
			if !secondFamily(ann, entry) {
				return verifyInterface(ctx, api, req, uid, req.IfName, entry, source)
			}
			second = &entry
		}
	}
	if ann.Pool == "" {
		if pod.Spec.SchedulerName == req.SchedulerName {
			if pod.Spec.NodeName != "" {
				// The Binding writes the annotations with nodeName, and a count-only
				// pool writes none: a bound pod of ours without them has no address.
				return nil, newErr(ErrCountOnly, MsgCountOnly,
					"pod %s is bound to %s without an address (a count-only NodeIPPool, or nodeName set at creation); use another IPAM for it",
					ref, pod.Spec.NodeName)
			}
			return nil, newErr(types.ErrTryAgainLater, MsgTryAgain,
				"pod %s (schedulerName %s) has no %s annotation yet", ref, pod.Spec.SchedulerName, AnnotationPool)
		}
		return nil, newErr(ErrNotOurs, MsgNotOurs,
			"pod %s (schedulerName %q) was not placed by ipscheduler; use another IPAM for it", ref, pod.Spec.SchedulerName)
	}
	var ip netip.Addr
	if ann.IP != "" {
		if ip, err = ParseIP(ann.IP); err != nil {
			return nil, newErr(ErrMalformedAnnotation, MsgMalformedIP, "pod %s: %v", ref, err)
		}
	}
	// addrs: every address of the pod, primary first (nil until ip is set).
	var addrs []netip.Addr
	if ip.IsValid() {
		addrs = []netip.Addr{ip}
	}
	if ann.IPs != "" {
		if addrs, err = ParseIPs(ann.IPs); err != nil {
			return nil, newErr(ErrMalformedAnnotation, MsgMalformedIPs, "pod %s: %v", ref, err)
		}
		if addrs[0] != ip {
			return nil, newErr(ErrMalformedAnnotation, MsgMalformedIPs,
				"pod %s: the first address of %s %q is not %s %q", ref, AnnotationIPs, ann.IPs, AnnotationIP, ann.IP)
		}
	}

	pool, err := api.GetNodeIPPool(ctx, ann.Pool)
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, newErr(ErrPoolNotFound, MsgPoolNotFound, "NodeIPPool %s (annotated on pod %s) does not exist", ann.Pool, ref)
		}
		return nil, apiFailure(err, "reading NodeIPPool "+ann.Pool)
	}
	if pool.Spec.NodeName != req.NodeName {
		return nil, newErr(ErrPoolOtherNode, MsgPoolOtherNode,
			"NodeIPPool %s serves node %q, this is node %q", ann.Pool, pool.Spec.NodeName, req.NodeName)
	}
	// ipscheduler.io/pools is the live pod's: the runtime's capability is
	// only trusted for what SelectAnnotations compared.
	if err := checkTenancy(ctx, api, ref.Namespace, pod.Metadata.Annotations, pool, ann.Pool); err != nil {
		return nil, err
	}
	alloc, held := pool.Status.Allocations[uid]
	if !ip.IsValid() {
		if (held && strings.TrimSpace(alloc.IP) == "") || len(pool.Spec.Addresses) == 0 {
			return nil, newErr(ErrCountOnly, MsgCountOnly,
				"NodeIPPool %s gives pod %s a slot, not an address; use another IPAM for this network", ann.Pool, ref)
		}
		return nil, newErr(types.ErrTryAgainLater, MsgTryAgain,
			"pod %s has no %s annotation yet (NodeIPPool %s has addresses)", ref, AnnotationIP, ann.Pool)
	}
	if !held {
		return nil, newErr(ErrNoAllocation, MsgNoAllocation,
			"NodeIPPool %s has no allocation for pod %s UID %s", ann.Pool, ref, uid)
	}
	if alloc.Interface != "" {
		// The first interface's allocation names no interface: this one is a
		// further interface's (ipscheduler.io/interfaces), not the pod's first.
		return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
			"NodeIPPool %s allocates %s to UID %s for its interface %s, not for the pod's first interface (%s is %s)",
			ann.Pool, describeAllocation(alloc), uid, alloc.Interface, AnnotationPool, ann.Pool)
	}
	all := addrs // every address of the interface, primary first
	if second != nil {
		// The first pool holds the addresses the second pool's entry does not.
		addrs = slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return slices.Contains(second.IPs, a) })
		if len(addrs) == 0 || addrs[0] != ip {
			return nil, newErr(ErrMalformedAnnotation, MsgMalformedIPs,
				"pod %s: %s entry %s holds %s %q, the pod's primary address", ref, AnnotationInterfaces, req.IfName, AnnotationIP, ann.IP)
		}
		if _, err := verifyInterface(ctx, api, req, uid, req.IfName, *second, source); err != nil {
			return nil, err
		}
	}
	if ann.IPs == "" {
		allocIP, err := ParseIP(alloc.IP)
		if err != nil || allocIP != ip {
			return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
				"pod %s is annotated %s, NodeIPPool %s allocates %q to UID %s", ref, ip, ann.Pool, alloc.IP, uid)
		}
	} else if allocated, ok := allocationAddrs(alloc); !ok || !slices.Equal(allocated, addrs) {
		return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
			"pod %s is annotated %s %s, NodeIPPool %s allocates %s to UID %s",
			ref, AnnotationIPs, joinAddrs(addrs), ann.Pool, describeAllocation(alloc), uid)
	}

	addrs = all
	v := &Verified{Pod: ref, PodUID: uid, Pool: ann.Pool, IP: ip, IPs: addrs, Source: source}
	if ann.Network != "" {
		if v.Network, err = ParseNetwork(ann.Network, addrs[0], addrs[1:]...); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// secondFamily reports whether entry (the pod's ipscheduler.io/interfaces
// entry for CNI_IFNAME) is its first interface's second family from a second
// pool: the pod has ipscheduler.io/pool and ipscheduler.io/ips, and every
// address of the entry is among ipscheduler.io/ips (a further interface's
// addresses never are). An unparsable ipscheduler.io/ips is the first
// interface's check to report.
func secondFamily(ann Annotations, entry InterfaceEntry) bool {
	if ann.Pool == "" || ann.IPs == "" {
		return false
	}
	addrs, err := ParseIPs(ann.IPs)
	if err != nil {
		return false
	}
	for _, a := range entry.IPs {
		if !slices.Contains(addrs, a) {
			return false
		}
	}
	return true
}

// allocationAddrs is every address an allocation holds, in order: its ips,
// or its ip alone when it has no ips. ok is false when one does not parse,
// or ips does not start with ip.
func allocationAddrs(a kube.Allocation) ([]netip.Addr, bool) {
	texts := a.IPs
	if len(texts) == 0 {
		texts = []string{a.IP}
	}
	out := make([]netip.Addr, 0, len(texts))
	for _, t := range texts {
		addr, err := ParseIP(t)
		if err != nil {
			return nil, false
		}
		out = append(out, addr)
	}
	if primary, err := ParseIP(a.IP); err != nil || primary != out[0] {
		return nil, false
	}
	return out, true
}

// describeAllocation names an allocation's addresses as it holds them.
func describeAllocation(a kube.Allocation) string {
	if len(a.IPs) == 0 {
		return fmt.Sprintf("ip %q (no ips)", a.IP)
	}
	return fmt.Sprintf("ips %q (ip %q)", a.IPs, a.IP)
}

func apiFailure(err error, what string) error {
	if kube.IsTransient(err) {
		return newErr(types.ErrTryAgainLater, MsgTryAgain, "%s: %v", what, err)
	}
	return newErr(ErrAPI, MsgAPI, "%s: %v", what, err)
}
