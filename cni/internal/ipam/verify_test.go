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

// networkDual is a dual-stack pod's network: IPv4 first, both subnets' default routes.
const networkDual = `{"ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"},{"address":"fd00::c/64","gateway":"fd00::1"}],` +
	`"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}]}`

func allocDual(phase string, ips ...string) kube.Allocation {
	a := alloc(ips[0], phase)
	a.IPs = ips
	return a
}

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
	dual := addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12", "fd00::c")})

	tests := []struct {
		name       string
		api        *fakeAPI
		ref        PodRef
		runtime    map[string]string
		wantCode   uint
		wantMsg    string // substring of msg + details
		wantIP     string
		wantIPs    string // every address, joined (default: wantIP)
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

		// Dual-stack pods: ipscheduler.io/ips and the allocation's ips.
		{name: "dual-stack, IPv4 primary",
			api:    &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")), pools: dual},
			wantIP: "10.0.1.12", wantIPs: "10.0.1.12,fd00::c", wantSource: SourceAPI},
		{name: "dual-stack, IPv6 primary",
			api: &fakeAPI{pods: livePod(ann("pool-a", "fd00::c", AnnotationIPs, "fd00::c,10.0.1.12")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "fd00::c", "10.0.1.12")})},
			wantIP: "fd00::c", wantIPs: "fd00::c,10.0.1.12", wantSource: SourceAPI},
		{name: "dual-stack, compared canonically, spaces around entries",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, " 10.0.1.12 , FD00:0::C ")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12", "fd00:0:0::c")})},
			wantIP: "10.0.1.12", wantIPs: "10.0.1.12,fd00::c", wantSource: SourceAPI},
		{name: "dual-stack with ipscheduler.io/network",
			api:    &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c", AnnotationNetwork, networkDual)), pools: dual},
			wantIP: "10.0.1.12", wantIPs: "10.0.1.12,fd00::c", wantSource: SourceAPI, wantNet: true},
		{name: "dual-stack from the runtime capability",
			api:     &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")), pools: dual},
			runtime: ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12, fd00:0::c"),
			wantIP:  "10.0.1.12", wantIPs: "10.0.1.12,fd00::c", wantSource: SourceRuntime},
		{name: "PreferDualStack fell back to one family: ips holds ip alone",
			api:    &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12")), pools: bound},
			wantIP: "10.0.1.12", wantSource: SourceAPI},
		{name: "fallback with an allocation that lists its one address",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12")})},
			wantIP: "10.0.1.12", wantSource: SourceAPI},
		{name: "ips empty is absent: single-stack",
			api:    &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, " ")), pools: bound},
			wantIP: "10.0.1.12", wantSource: SourceAPI},
		{name: "ips with an empty entry",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: "malformed ipscheduler.io/ips annotation; pod default/web-0: \"10.0.1.12,\": entry 2 is empty"},
		{name: "ips with two IPv4 addresses",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,10.0.1.13")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: "two IPv4 addresses"},
		{name: "ips with three addresses",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c,fd00::d")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: "at most two"},
		{name: "ips entry not an address",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::/64")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: "malformed ipscheduler.io/ips annotation; pod default/web-0: \"10.0.1.12,fd00::/64\": entry 2"},
		{name: "ips whose first is not ip",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "fd00::c,10.0.1.12")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: `the first address of ipscheduler.io/ips "fd00::c,10.0.1.12" is not ipscheduler.io/ip "10.0.1.12"`},
		{name: "ips without ip",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "-", AnnotationIPs, "10.0.1.12,fd00::c")), pools: dual},
			wantCode: ErrMalformedAnnotation, wantMsg: `is not ipscheduler.io/ip ""`},
		{name: "dual-stack, the allocation holds ip alone",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")), pools: bound},
			wantCode: ErrAllocationMismatch, wantMsg: `annotated ipscheduler.io/ips 10.0.1.12,fd00::c, NodeIPPool pool-a allocates ip "10.0.1.12" (no ips) to UID u-1`},
		{name: "dual-stack, the allocation in the other order",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "fd00::c", "10.0.1.12")})},
			wantCode: ErrAllocationMismatch, wantMsg: `allocates ips ["fd00::c" "10.0.1.12"] (ip "fd00::c")`},
		{name: "dual-stack, the allocation's other address differs",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12", "fd00::d")})},
			wantCode: ErrAllocationMismatch, wantMsg: "allocates ips"},
		{name: "dual-stack, the allocation's ip is not the first of its ips",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")),
				pools: addrPool(map[string]kube.Allocation{"u-1": {IP: "fd00::c", IPs: []string{"10.0.1.12", "fd00::c"}, Phase: "Bound"}})},
			wantCode: ErrAllocationMismatch, wantMsg: `(ip "fd00::c")`},
		{name: "dual-stack, an allocation entry that does not parse",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")),
				pools: addrPool(map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12", "fd00::c%eth0")})},
			wantCode: ErrAllocationMismatch, wantMsg: "allocates ips"},
		{name: "fallback, the allocation holds two addresses",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12")), pools: dual},
			wantCode: ErrAllocationMismatch, wantMsg: "allocates ips"},
		{name: "dual-stack, network carries one address",
			api: &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c", AnnotationNetwork, network4)),
				pools: dual},
			wantCode: ErrNetworkMismatch, wantMsg: "ipscheduler.io/network does not match ipscheduler.io/ips; ipscheduler.io/network must carry exactly the addresses of ipscheduler.io/ips (10.0.1.12,fd00::c), in that order; it has 1"},
		{name: "runtime ips differ from the live pod",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")), pools: dual},
			runtime:  ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::d"),
			wantCode: ErrRuntimeAnnotations, wantMsg: `ipscheduler.io/ips "10.0.1.12,fd00::d" (runtime) vs "10.0.1.12,fd00::c" (pod)`},
		{name: "runtime capability without the live pod's ips",
			api:      &fakeAPI{pods: livePod(ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")), pools: dual},
			runtime:  ann("pool-a", "10.0.1.12"),
			wantCode: ErrRuntimeAnnotations, wantMsg: `ipscheduler.io/ips "" (runtime)`},
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
			wantIPs := tt.wantIPs
			if wantIPs == "" {
				wantIPs = tt.wantIP
			}
			if v.IP.String() != tt.wantIP || joinAddrs(v.IPs) != wantIPs || v.Source != tt.wantSource || v.PodUID != "u-1" || v.Pool != "pool-a" ||
				(v.Network != nil) != tt.wantNet {
				t.Fatalf("got %+v", v)
			}
			if v.Network != nil && len(v.Network.IPs) != len(v.IPs) {
				t.Fatalf("network %+v for addresses %v", v.Network, v.IPs)
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
		{name: "capability adds ips the pod lacks", runtime: ann("pool-a", "fd00::5", AnnotationNetwork, `{"ips":[{"address":"fd00::5/64"}]}`,
			AnnotationIPs, "fd00::5,10.0.0.5"), wantCode: ErrRuntimeAnnotations},
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

func TestSelectAnnotationsDualStack(t *testing.T) {
	live := ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c")
	tests := []struct {
		name     string
		runtime  string // the capability's ipscheduler.io/ips ("-": absent)
		wantCode uint
	}{
		{name: "the same list", runtime: "10.0.1.12,fd00::c"},
		{name: "canonically the same, spaces", runtime: " 10.0.1.12 , FD00:0::C"},
		{name: "absent", runtime: "-", wantCode: ErrRuntimeAnnotations},
		{name: "other order", runtime: "fd00::c,10.0.1.12", wantCode: ErrRuntimeAnnotations},
		{name: "one address only", runtime: "10.0.1.12", wantCode: ErrRuntimeAnnotations},
		{name: "another IPv6 address", runtime: "10.0.1.12,fd00::d", wantCode: ErrRuntimeAnnotations},
		{name: "not addresses", runtime: "10.0.1.12,x", wantCode: ErrRuntimeAnnotations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime := ann("pool-a", "10.0.1.12")
			if tt.runtime != "-" {
				runtime[AnnotationIPs] = tt.runtime
			}
			got, src, err := SelectAnnotations(runtime, live)
			if failedAsWanted(t, err, tt.wantCode, AnnotationIPs) {
				return
			}
			if src != SourceRuntime || got.IPs != strings.TrimSpace(tt.runtime) {
				t.Fatalf("got %+v from %s", got, src)
			}
		})
	}
}

func TestParseIPs(t *testing.T) {
	tests := []struct {
		text    string
		want    string // joined canonically
		wantErr string
	}{
		{text: "10.0.2.12,fd00::c", want: "10.0.2.12,fd00::c"},
		{text: "fd00::c,10.0.2.12", want: "fd00::c,10.0.2.12"},
		{text: " 10.0.2.12 ,\tFD00:0::C ", want: "10.0.2.12,fd00::c"},
		{text: "10.0.2.12", want: "10.0.2.12"},
		{text: "fd00::c", want: "fd00::c"},
		{text: "", wantErr: "entry 1 is empty"},
		{text: "10.0.2.12,", wantErr: "entry 2 is empty"},
		{text: ",10.0.2.12", wantErr: "entry 1 is empty"},
		{text: "10.0.2.12 fd00::c", wantErr: "entry 1"},
		{text: "10.0.2.12,fd00::c,10.0.2.13", wantErr: "3 addresses: at most two"},
		{text: "10.0.2.12,10.0.2.13", wantErr: "two IPv4 addresses"},
		{text: "fd00::c,fd00::d", wantErr: "two IPv6 addresses"},
		{text: "10.0.2.12,::ffff:10.0.2.13", wantErr: "IPv4-mapped"},
		{text: "10.0.2.12,fe80::1%eth0", wantErr: "zones"},
		{text: "10.0.2.12,10.0.2.0/24", wantErr: "entry 2"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, err := ParseIPs(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || joinAddrs(got) != tt.want {
				t.Fatalf("got %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestParseNetwork(t *testing.T) {
	ip4 := netip.MustParseAddr("10.0.1.12")
	ip6 := netip.MustParseAddr("fd00::5")
	ipC := netip.MustParseAddr("fd00::c")
	tests := []struct {
		name     string
		text     string
		ip       netip.Addr
		more     []netip.Addr // the rest of ipscheduler.io/ips
		want     string       // Address/Gateway/Routes rendered by describe
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

		{name: "dual-stack", text: networkDual, ip: ip4, more: []netip.Addr{ipC},
			want: "10.0.1.12/24 gw 10.0.1.1, fd00::c/64 gw fd00::1 routes [0.0.0.0/0 via 10.0.1.1, ::/0 via fd00::1]"},
		{name: "dual-stack, IPv6 first, no gateways",
			text: `{"ips":[{"address":"fd00::c/64"},{"address":"10.0.1.12/24"}],"routes":[{"dst":"10.1.0.0/16","gw":"10.0.1.1"}]}`,
			ip:   ipC, more: []netip.Addr{ip4}, want: "fd00::c/64 gw <nil>, 10.0.1.12/24 gw <nil> routes [10.1.0.0/16 via 10.0.1.1]"},
		{name: "dual-stack, one address", text: network4, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrNetworkMismatch, wantMsg: "does not match ipscheduler.io/ips; ipscheduler.io/network must carry exactly the addresses of ipscheduler.io/ips (10.0.1.12,fd00::c), in that order; it has 1"},
		{name: "dual-stack, three addresses",
			text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::c/64"},{"address":"fd00::d/64"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrNetworkMismatch, wantMsg: "it has 3"},
		{name: "dual-stack, the other order",
			text: `{"ips":[{"address":"fd00::c/64"},{"address":"10.0.1.12/24"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrNetworkMismatch, wantMsg: "ipscheduler.io/network ips[0] carries fd00::c, address 1 of ipscheduler.io/ips (10.0.1.12,fd00::c) is 10.0.1.12"},
		{name: "dual-stack, another IPv6 address",
			text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::d/64"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrNetworkMismatch, wantMsg: "ips[1] carries fd00::d"},
		{name: "dual-stack, the IPv6 gateway is IPv4",
			text: `{"ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"},{"address":"fd00::c/64","gateway":"10.0.1.1"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrMalformedAnnotation, wantMsg: "ips[1].gateway 10.0.1.1 is not of the address's family"},
		{name: "dual-stack, the IPv6 address without prefix",
			text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::c"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrMalformedAnnotation, wantMsg: "ips[1].address"},
		{name: "dual-stack, route gw of the other family",
			text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::c/64"}],"routes":[{"dst":"::/0","gw":"10.0.1.1"}]}`, ip: ip4, more: []netip.Addr{ipC},
			wantCode: ErrMalformedAnnotation, wantMsg: "different families"},
		{name: "PreferDualStack fallback: one address, today's message", text: `{"ips":[{"address":"10.0.1.12/24"},{"address":"fd00::c/64"}]}`, ip: ip4,
			wantCode: ErrNetworkMismatch, wantMsg: "does not match ipscheduler.io/ip; ipscheduler.io/network must carry exactly one address (10.0.1.12), it has 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseNetwork(tt.text, tt.ip, tt.more...)
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
	var ips []string
	for _, nip := range n.IPs {
		gw := "<nil>"
		if nip.Gateway != nil {
			gw = nip.Gateway.String()
		}
		ips = append(ips, nip.Address.String()+" gw "+gw)
	}
	out := strings.Join(ips, ", ") + " routes [" + strings.Join(routes, ", ") + "]"
	if len(n.DNS.Nameservers) > 0 {
		out += " dns " + "[" + strings.Join(n.DNS.Nameservers, " ") + "]"
	}
	return out
}
