package ipam

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

// fakeAPI serves pods by "namespace/name", pools and namespaces by name (a
// namespace it does not hold is a 404: no defaults).
type fakeAPI struct {
	pods       map[string]*kube.Pod
	pools      map[string]*kube.NodeIPPool
	namespaces map[string]*kube.Namespace
	podErr     error
	poolErr    error
	nsErr      error
	calls      []string
}

func (f *fakeAPI) GetPod(_ context.Context, ns, name string) (*kube.Pod, error) {
	f.calls = append(f.calls, "pod "+ns+"/"+name)
	if f.podErr != nil {
		return nil, f.podErr
	}
	if p, ok := f.pods[ns+"/"+name]; ok {
		return p, nil
	}
	return nil, &kube.APIError{StatusCode: http.StatusNotFound}
}

func (f *fakeAPI) GetNodeIPPool(_ context.Context, name string) (*kube.NodeIPPool, error) {
	f.calls = append(f.calls, "pool "+name)
	if f.poolErr != nil {
		return nil, f.poolErr
	}
	if p, ok := f.pools[name]; ok {
		return p, nil
	}
	return nil, &kube.APIError{StatusCode: http.StatusNotFound}
}

func (f *fakeAPI) GetNamespace(_ context.Context, name string) (*kube.Namespace, error) {
	f.calls = append(f.calls, "namespace "+name)
	if f.nsErr != nil {
		return nil, f.nsErr
	}
	if n, ok := f.namespaces[name]; ok {
		return n, nil
	}
	return nil, &kube.APIError{StatusCode: http.StatusNotFound}
}

func mkPod(uid, scheduler string, ann map[string]string) *kube.Pod {
	p := &kube.Pod{}
	p.Metadata.Name, p.Metadata.Namespace, p.Metadata.UID, p.Metadata.Annotations = "web-0", "default", uid, ann
	p.Spec.NodeName, p.Spec.SchedulerName = "node-a", scheduler
	return p
}

func unbound(p *kube.Pod) *kube.Pod {
	p.Spec.NodeName = ""
	return p
}

func mkPool(node string, addresses []string, allocs map[string]kube.Allocation) *kube.NodeIPPool {
	p := &kube.NodeIPPool{}
	p.Metadata.Name = "pool-a"
	p.Spec.NodeName, p.Spec.Addresses = node, addresses
	p.Status.Allocations = allocs
	return p
}

func ann(pool, ip string, extra ...string) map[string]string {
	m := map[string]string{}
	if pool != "-" {
		m[AnnotationPool] = pool
	}
	if ip != "-" {
		m[AnnotationIP] = ip
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func alloc(ip, phase string) kube.Allocation {
	return kube.Allocation{IP: ip, Pod: "default/web-0", Phase: phase, Since: "2024-01-01T00:00:00Z"}
}

const network4 = `{"ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}`

func TestVerify(t *testing.T) {
	ref := PodRef{Namespace: "default", Name: "web-0", UID: "u-1"}
	addrPool := func(allocs map[string]kube.Allocation) map[string]*kube.NodeIPPool {
		return map[string]*kube.NodeIPPool{"pool-a": mkPool("node-a", []string{"10.0.1.0/24", "fd00::/120"}, allocs)}
	}
	bound := addrPool(map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})
	livePod := func(a map[string]string) map[string]*kube.Pod {
		return map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", a)}
	}
	ok4 := livePod(ann("pool-a", "10.0.1.12"))

	tests := []struct {
		name       string
		api        *fakeAPI
		ref        PodRef
		runtime    map[string]string
		wantCode   uint
		wantMsg    string // substring of msg + details
		wantIP     string
		wantSource AnnotationSource
		wantNet    bool
	}{
		{name: "ok, annotations from the API", api: &fakeAPI{pods: ok4, pools: bound}, wantIP: "10.0.1.12", wantSource: SourceAPI},
		{name: "ok, annotations from the runtime capability",
			api: &fakeAPI{pods: ok4, pools: bound}, runtime: ann("pool-a", "10.0.1.12", "other", "x"),
			wantIP: "10.0.1.12", wantSource: SourceRuntime},
		{name: "ok, Reserved (PostBind not yet written)",
			api:    &fakeAPI{pods: ok4, pools: addrPool(map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Reserved")})},
			wantIP: "10.0.1.12", wantSource: SourceAPI},
		{name: "ok, IPv6 compared canonically",
			api: &fakeAPI{pods: livePod(ann("pool-a", "FD00:0:0::5")),
				pools: addrPool(map[string]kube.Allocation{"u-1": alloc("fd00::5", "Bound")})},
			wantIP: "fd00::5", wantSource: SourceAPI},
		{name: "ok, with ipscheduler.io/network",
			api:    &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)), pools: bound},
			wantIP: "10.0.1.12", wantSource: SourceAPI, wantNet: true},
		{name: "ok, no K8S_POD_UID: the live pod's UID is used",
			api: &fakeAPI{pods: ok4, pools: bound}, ref: PodRef{Namespace: "default", Name: "web-0"},
			wantIP: "10.0.1.12", wantSource: SourceAPI},

		{name: "pod not found", api: &fakeAPI{pools: bound}, wantCode: ErrPodNotFound, wantMsg: "pod not found"},
		{name: "pod read: 500 is transient", api: &fakeAPI{podErr: &kube.APIError{StatusCode: 500}},
			wantCode: types.ErrTryAgainLater, wantMsg: "reading pod default/web-0"},
		{name: "pod read: connection refused is transient", api: &fakeAPI{podErr: &net.OpError{Op: "dial", Err: errors.New("connection refused")}},
			wantCode: types.ErrTryAgainLater, wantMsg: "connection refused"},
		{name: "pod read: 403 is not", api: &fakeAPI{podErr: &kube.APIError{StatusCode: 403, Message: "forbidden"}},
			wantCode: ErrAPI, wantMsg: "forbidden"},
		{name: "UID mismatch (pod re-created under the same name)",
			api:      &fakeAPI{pods: map[string]*kube.Pod{"default/web-0": mkPod("u-2", "ip-scheduler", ann("pool-a", "10.0.1.12"))}, pools: bound},
			wantCode: ErrPodUIDMismatch, wantMsg: "K8S_POD_UID u-1"},
		{name: "runtime ip differs from the live pod",
			api: &fakeAPI{pods: ok4, pools: bound}, runtime: ann("pool-a", "10.0.1.13"),
			wantCode: ErrRuntimeAnnotations, wantMsg: `ipscheduler.io/ip "10.0.1.13" (runtime) vs "10.0.1.12" (pod)`},
		{name: "runtime pool differs from the live pod",
			api: &fakeAPI{pods: ok4, pools: bound}, runtime: ann("pool-b", "10.0.1.12"),
			wantCode: ErrRuntimeAnnotations, wantMsg: "ipscheduler.io/pool"},
		{name: "runtime network differs from the live pod",
			api: &fakeAPI{pods: ok4, pools: bound}, runtime: ann("pool-a", "10.0.1.12", AnnotationNetwork, network4),
			wantCode: ErrRuntimeAnnotations, wantMsg: "ipscheduler.io/network"},
		{name: "runtime passed no ipscheduler annotations",
			api: &fakeAPI{pods: ok4, pools: bound}, runtime: map[string]string{},
			wantCode: ErrRuntimeAnnotations, wantMsg: "ipscheduler.io/pool"},
		{name: "our pending pod without a pool annotation: try again",
			api:      &fakeAPI{pods: map[string]*kube.Pod{"default/web-0": unbound(mkPod("u-1", "ip-scheduler", nil))}, pools: bound},
			wantCode: types.ErrTryAgainLater, wantMsg: "has no ipscheduler.io/pool annotation yet"},
		{name: "our bound pod without a pool annotation: count-only",
			api:      &fakeAPI{pods: livePod(ann("-", "-")), pools: bound},
			wantCode: ErrCountOnly, wantMsg: "bound to node-a without an address"},
		{name: "another scheduler's pod without a pool annotation",
			api:      &fakeAPI{pods: map[string]*kube.Pod{"default/web-0": mkPod("u-1", "default-scheduler", nil)}},
			wantCode: ErrNotOurs, wantMsg: `schedulerName "default-scheduler"`},
		{name: "malformed ip annotation",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.0/24")), pools: bound},
			wantCode: ErrMalformedAnnotation, wantMsg: "malformed ipscheduler.io/ip"},
		{name: "ip annotation with a zone",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "fe80::1%eth0")), pools: bound},
			wantCode: ErrMalformedAnnotation, wantMsg: "zones"},
		{name: "pool not found", api: &fakeAPI{pods: ok4},
			wantCode: ErrPoolNotFound, wantMsg: "NodeIPPool pool-a"},
		{name: "pool read: timeout is transient", api: &fakeAPI{pods: ok4, poolErr: context.DeadlineExceeded},
			wantCode: types.ErrTryAgainLater, wantMsg: "reading NodeIPPool pool-a"},
		{name: "pool serves another node",
			api: &fakeAPI{pods: ok4, pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-b", []string{"10.0.1.0/24"},
				map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})}},
			wantCode: ErrPoolOtherNode, wantMsg: `serves node "node-b", this is node "node-a"`},
		{name: "count-only pool",
			api: &fakeAPI{pods: livePod(ann("pool-a", "")), pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-a", nil,
				map[string]kube.Allocation{"u-1": alloc("", "Bound")})}},
			wantCode: ErrCountOnly, wantMsg: "count-only"},
		{name: "count-only allocation in a pool that has addresses now",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "-")), pools: addrPool(map[string]kube.Allocation{"u-1": alloc("", "Bound")})},
			wantCode: ErrCountOnly, wantMsg: "count-only"},
		{name: "address pool, ip annotation empty: try again",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "")), pools: addrPool(nil)},
			wantCode: types.ErrTryAgainLater, wantMsg: "has no ipscheduler.io/ip annotation yet"},
		{name: "address pool, ip annotation absent: try again",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "-")), pools: addrPool(nil)},
			wantCode: types.ErrTryAgainLater, wantMsg: "has no ipscheduler.io/ip annotation yet"},
		{name: "no allocation (released)",
			api:      &fakeAPI{pods: ok4, pools: addrPool(map[string]kube.Allocation{"u-9": alloc("10.0.1.12", "Bound")})},
			wantCode: ErrNoAllocation, wantMsg: "no allocation for pod default/web-0 UID u-1"},
		{name: "allocation holds another address (forged annotation)",
			api:      &fakeAPI{pods: ok4, pools: addrPool(map[string]kube.Allocation{"u-1": alloc("10.0.1.13", "Bound")})},
			wantCode: ErrAllocationMismatch, wantMsg: `allocates "10.0.1.13"`},
		{name: "allocation has no address",
			api:      &fakeAPI{pods: ok4, pools: addrPool(map[string]kube.Allocation{"u-1": alloc("", "Bound")})},
			wantCode: ErrAllocationMismatch, wantMsg: `allocates ""`},
		{name: "network carries another address",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationNetwork,
				`{"ips":[{"address":"10.0.1.99/24"}]}`)), pools: bound},
			wantCode: ErrNetworkMismatch, wantMsg: "carries 10.0.1.99"},
		{name: "network is not JSON",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationNetwork, `{"ips":`)), pools: bound},
			wantCode: ErrMalformedAnnotation, wantMsg: "malformed ipscheduler.io/network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.ref
			if r == (PodRef{}) {
				r = ref
			}
			v, err := Verify(context.Background(), tt.api, Request{
				Pod: r, NodeName: "node-a", SchedulerName: "ip-scheduler", RuntimeAnnotations: tt.runtime,
			})
			if tt.wantCode != 0 && err == nil {
				t.Fatalf("want code %d, got %+v", tt.wantCode, v)
			}
			if failedAsWanted(t, err, tt.wantCode, tt.wantMsg) {
				return
			}
			if v.IP.String() != tt.wantIP || v.Source != tt.wantSource || v.PodUID != "u-1" || v.Pool != "pool-a" ||
				(v.Network != nil) != tt.wantNet {
				t.Fatalf("got %+v", v)
			}
		})
	}
}

// The API is the proof: even with the runtime capability the pod is read.
func TestVerifyReadsThePodEvenWithTheCapability(t *testing.T) {
	api := &fakeAPI{
		pods:  map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12"))},
		pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-a", []string{"10.0.1.12"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})},
	}
	_, err := Verify(context.Background(), api, Request{
		Pod: PodRef{Namespace: "default", Name: "web-0", UID: "u-1"}, NodeName: "node-a",
		RuntimeAnnotations: ann("pool-a", "10.0.1.12"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pod default/web-0", "pool pool-a", "namespace default"}; !reflect.DeepEqual(api.calls, want) {
		t.Fatalf("calls %v, want %v", api.calls, want)
	}
}

func TestSelectAnnotations(t *testing.T) {
	live := ann("pool-a", "fd00::5", AnnotationNetwork, `{"ips": [{"address": "fd00::5/64"}]}`)
	tests := []struct {
		name       string
		runtime    map[string]string
		want       Annotations
		wantSource AnnotationSource
		wantCode   uint
	}{
		{name: "no capability: the API's", runtime: nil,
			want:       Annotations{Pool: "pool-a", IP: "fd00::5", Network: `{"ips": [{"address": "fd00::5/64"}]}`},
			wantSource: SourceAPI},
		{name: "capability agrees (canonical ip, compact JSON, spaces)",
			runtime: ann(" pool-a ", "fd00:0::5", AnnotationNetwork, `{"ips":[{"address":"fd00::5/64"}]}`),
			want:    Annotations{Pool: "pool-a", IP: "fd00:0::5", Network: `{"ips":[{"address":"fd00::5/64"}]}`}, wantSource: SourceRuntime},
		{name: "capability differs", runtime: ann("pool-a", "fd00::6", AnnotationNetwork, `{"ips":[{"address":"fd00::5/64"}]}`),
			wantCode: ErrRuntimeAnnotations},
		{name: "capability lacks the network", runtime: ann("pool-a", "fd00::5"), wantCode: ErrRuntimeAnnotations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, src, err := SelectAnnotations(tt.runtime, live)
			if failedAsWanted(t, err, tt.wantCode, "") {
				return
			}
			if got != tt.want || src != tt.wantSource {
				t.Fatalf("got %+v from %s, want %+v from %s", got, src, tt.want, tt.wantSource)
			}
		})
	}
}

func TestParseNetwork(t *testing.T) {
	ip4 := netip.MustParseAddr("10.0.1.12")
	ip6 := netip.MustParseAddr("fd00::5")
	tests := []struct {
		name     string
		text     string
		ip       netip.Addr
		want     string // Address/Gateway/Routes rendered by describe
		wantCode uint
		wantMsg  string
	}{
		{name: "v4 full", text: network4, ip: ip4, want: "10.0.1.12/24 gw 10.0.1.1 routes [0.0.0.0/0 via 10.0.1.1]"},
		{name: "v6, route dst masked, no gateway",
			text: `{"ips":[{"address":"fd00::5/64"}],"routes":[{"dst":"fd01::1/64","gw":"fd00::1","mtu":1400}]}`, ip: ip6,
			want: "fd00::5/64 gw <nil> routes [fd01::/64 via fd00::1 mtu 1400]"},
		{name: "dns passes through", text: `{"ips":[{"address":"10.0.1.12/24"}],"dns":{"nameservers":["10.0.0.10"]}}`, ip: ip4,
			want: "10.0.1.12/24 gw <nil> routes [] dns [10.0.0.10]"},
		{name: "address differs", text: `{"ips":[{"address":"10.0.1.13/24"}]}`, ip: ip4, wantCode: ErrNetworkMismatch},
		{name: "no address", text: `{"routes":[]}`, ip: ip4, wantCode: ErrNetworkMismatch, wantMsg: "exactly one"},
		{name: "two addresses", text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::5/64"}]}`, ip: ip4,
			wantCode: ErrNetworkMismatch, wantMsg: "exactly one"},
		{name: "interfaces are not part of it", text: `{"interfaces":[{"name":"eth0"}],"ips":[{"address":"10.0.1.12/24"}]}`, ip: ip4,
			wantCode: ErrMalformedAnnotation, wantMsg: "interfaces"},
		{name: "trailing data", text: `{"ips":[{"address":"10.0.1.12/24"}]} {}`, ip: ip4, wantCode: ErrMalformedAnnotation},
		{name: "address without prefix", text: `{"ips":[{"address":"10.0.1.12"}]}`, ip: ip4, wantCode: ErrMalformedAnnotation},
		{name: "gateway of the other family", text: `{"ips":[{"address":"10.0.1.12/24","gateway":"fd00::1"}]}`, ip: ip4,
			wantCode: ErrMalformedAnnotation, wantMsg: "family"},
		{name: "bad gateway", text: `{"ips":[{"address":"10.0.1.12/24","gateway":"x"}]}`, ip: ip4, wantCode: ErrMalformedAnnotation},
		{name: "bad route dst", text: `{"ips":[{"address":"10.0.1.12/24"}],"routes":[{"dst":"default"}]}`, ip: ip4,
			wantCode: ErrMalformedAnnotation, wantMsg: "routes[0].dst"},
		{name: "route gw of the other family", text: `{"ips":[{"address":"10.0.1.12/24"}],"routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]}`, ip: ip4,
			wantCode: ErrMalformedAnnotation, wantMsg: "different families"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseNetwork(tt.text, tt.ip)
			if failedAsWanted(t, err, tt.wantCode, tt.wantMsg) {
				return
			}
			if got := describe(n); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func describe(n *Network) string {
	var routes []string
	for _, r := range n.Routes {
		s := r.Dst.String() + " via " + r.GW.String()
		if r.MTU != 0 {
			s += " mtu " + strconv.Itoa(r.MTU)
		}
		routes = append(routes, s)
	}
	gw := "<nil>"
	if n.Gateway != nil {
		gw = n.Gateway.String()
	}
	out := n.Address.String() + " gw " + gw + " routes [" + strings.Join(routes, ", ") + "]"
	if len(n.DNS.Nameservers) > 0 {
		out += " dns " + "[" + strings.Join(n.DNS.Nameservers, " ") + "]"
	}
	return out
}
