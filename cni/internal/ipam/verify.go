package ipam

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
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
	Pool    string // ipscheduler.io/pool ("" when absent)
	IP      string // ipscheduler.io/ip, trimmed ("" when absent or empty: no address)
	Network string // ipscheduler.io/network ("" when absent)
}

func annotationsOf(m map[string]string) Annotations {
	return Annotations{
		Pool:    strings.TrimSpace(m[AnnotationPool]),
		IP:      strings.TrimSpace(m[AnnotationIP]),
		Network: strings.TrimSpace(m[AnnotationNetwork]),
	}
}

// Network is a parsed ipscheduler.io/network annotation.
type Network struct {
	Address net.IPNet // the pod's address with the subnet's prefix length
	Gateway net.IP    // nil: none
	Routes  []*types.Route
	DNS     types.DNS
}

// Verified is the outcome of a successful verification.
type Verified struct {
	Pod     PodRef
	PodUID  string
	Pool    string
	IP      netip.Addr
	Network *Network // nil: no ipscheduler.io/network, the address is a host route
	Source  AnnotationSource
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
	if !sameJSON(rtAnn.Network, liveAnn.Network) {
		diffs = append(diffs, fmt.Sprintf("%s %q (runtime) vs %q (pod)", AnnotationNetwork, rtAnn.Network, liveAnn.Network))
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

// sameJSON compares two JSON texts ignoring insignificant whitespace.
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	var ca, cb bytes.Buffer
	return json.Compact(&ca, []byte(a)) == nil && json.Compact(&cb, []byte(b)) == nil && ca.String() == cb.String()
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

type networkAnnotation struct {
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway,omitempty"`
	} `json:"ips"`
	Routes []struct {
		Dst      string `json:"dst"`
		GW       string `json:"gw,omitempty"`
		MTU      int    `json:"mtu,omitempty"`
		AdvMSS   int    `json:"advmss,omitempty"`
		Priority int    `json:"priority,omitempty"`
		Table    *int   `json:"table,omitempty"`
		Scope    *int   `json:"scope,omitempty"`
	} `json:"routes"`
	DNS types.DNS `json:"dns"`
}

// ParseNetwork parses an ipscheduler.io/network value and checks it carries
// exactly one address, equal to ip. Errors are *types.Error:
// ErrMalformedAnnotation or ErrNetworkMismatch.
func ParseNetwork(text string, ip netip.Addr) (*Network, error) {
	malformed := func(format string, args ...any) error {
		return newErr(ErrMalformedAnnotation, MsgMalformedNetwork, format, args...)
	}
	var raw networkAnnotation
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, malformed("%v", err)
	}
	if dec.More() {
		return nil, malformed("trailing data after the JSON object")
	}
	if len(raw.IPs) != 1 {
		return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatch,
			"%s must carry exactly one address (%s), it has %d", AnnotationNetwork, ip, len(raw.IPs))
	}
	prefix, err := netip.ParsePrefix(strings.TrimSpace(raw.IPs[0].Address))
	if err != nil {
		return nil, malformed("ips[0].address: %v", err)
	}
	if prefix.Addr().Zone() != "" || prefix.Addr().Is4In6() {
		return nil, malformed("ips[0].address %q: zones and IPv4-mapped IPv6 are not supported", raw.IPs[0].Address)
	}
	if prefix.Addr() != ip {
		return nil, newErr(ErrNetworkMismatch, MsgNetworkMismatch,
			"%s carries %s, %s is %s", AnnotationNetwork, prefix.Addr(), AnnotationIP, ip)
	}
	out := &Network{Address: ipNet(prefix), DNS: raw.DNS}
	if gw := strings.TrimSpace(raw.IPs[0].Gateway); gw != "" {
		g, err := ParseIP(gw)
		if err != nil {
			return nil, malformed("ips[0].gateway: %v", err)
		}
		if g.Is4() != ip.Is4() {
			return nil, malformed("ips[0].gateway %s is not of the address's family", g)
		}
		out.Gateway = net.IP(g.AsSlice())
	}
	for i, r := range raw.Routes {
		dst, err := netip.ParsePrefix(strings.TrimSpace(r.Dst))
		if err != nil {
			return nil, malformed("routes[%d].dst: %v", i, err)
		}
		route := &types.Route{
			Dst: ipNet(dst.Masked()), MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority, Table: r.Table, Scope: r.Scope,
		}
		if gw := strings.TrimSpace(r.GW); gw != "" {
			g, err := ParseIP(gw)
			if err != nil {
				return nil, malformed("routes[%d].gw: %v", i, err)
			}
			if g.Is4() != dst.Addr().Is4() {
				return nil, malformed("routes[%d]: gw %s and dst %s are of different families", i, g, dst)
			}
			route.GW = net.IP(g.AsSlice())
		}
		out.Routes = append(out.Routes, route)
	}
	return out, nil
}

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Verify checks, against the API, that the pod named by req holds the
// address its annotations name: the live pod's UID is K8S_POD_UID, its pool
// serves this node, the pod may use that pool (the scheduler's tenancy rules:
// checkTenancy), and the pool's allocation for that UID is that address.
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
	allocIP, err := ParseIP(alloc.IP)
	if err != nil || allocIP != ip {
		return nil, newErr(ErrAllocationMismatch, MsgAllocationMismatch,
			"pod %s is annotated %s, NodeIPPool %s allocates %q to UID %s", ref, ip, ann.Pool, alloc.IP, uid)
	}

	v := &Verified{Pod: ref, PodUID: uid, Pool: ann.Pool, IP: ip, Source: source}
	if ann.Network != "" {
		if v.Network, err = ParseNetwork(ann.Network, ip); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func apiFailure(err error, what string) error {
	if kube.IsTransient(err) {
		return newErr(types.ErrTryAgainLater, MsgTryAgain, "%s: %v", what, err)
	}
	return newErr(ErrAPI, MsgAPI, "%s: %v", what, err)
}
