package ipam

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

func mkNamespace(name string, ann map[string]string) *kube.Namespace {
	n := &kube.Namespace{}
	n.Metadata.Name, n.Metadata.Annotations = name, ann
	return n
}

// TestVerifyTenancy: the scheduler's tenancy rules (selection.py) on ADD and
// CHECK, with the scheduler's messages as details.
func TestVerifyTenancy(t *testing.T) {
	const pools = AnnotationPools
	const defaults = AnnotationDefaultPools
	pool := func(namespaces ...string) map[string]*kube.NodeIPPool {
		p := mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})
		if namespaces != nil {
			p.Spec.Namespaces = namespaces
		}
		return map[string]*kube.NodeIPPool{"pool-a": p}
	}
	pod := func(extra ...string) map[string]*kube.Pod {
		return map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", extra...))}
	}
	namespace := func(ann map[string]string) map[string]*kube.Namespace {
		return map[string]*kube.Namespace{"default": mkNamespace("default", ann)}
	}
	forbidden := &kube.APIError{StatusCode: http.StatusForbidden, Reason: "Forbidden",
		Message: `namespaces "default" is forbidden: User "ipscheduler-ipam" cannot get resource "namespaces"`,
		URL:     "/api/v1/namespaces/default"}

	tests := []struct {
		name      string
		api       *fakeAPI
		runtime   map[string]string
		wantCode  uint   // 0: allowed
		wantMsg   string // the whole details for ErrTenancy, a substring otherwise
		wantCalls []string
	}{
		// 1. spec.namespaces
		{name: "spec.namespaces absent: any namespace", api: &fakeAPI{pods: pod(), pools: pool()}},
		{name: "spec.namespaces holds the pod's namespace", api: &fakeAPI{pods: pod(), pools: pool("team-a", "default")}},
		{name: "spec.namespaces without the pod's namespace",
			api:      &fakeAPI{pods: pod(), pools: pool("team-b", "team-a", "team-b")},
			wantCode: ErrTenancy, wantMsg: "NodeIPPool pool-a is reserved for namespaces team-a, team-b (spec.namespaces), not default",
			wantCalls: []string{"pod default/web-0", "pool pool-a"}},
		{name: "spec.namespaces refuses even when the pod names the pool",
			api:      &fakeAPI{pods: pod(pools, "pool-a"), pools: pool("team-a")},
			wantCode: ErrTenancy, wantMsg: "NodeIPPool pool-a is reserved for namespaces team-a (spec.namespaces), not default"},

		// 2. the pod's ipscheduler.io/pools (the namespace is not read)
		{name: "pod annotation names the pool",
			api:       &fakeAPI{pods: pod(pools, "pool-b, pool-a"), pools: pool(), namespaces: namespace(map[string]string{defaults: "pool-b"})},
			wantCalls: []string{"pod default/web-0", "pool pool-a"}},
		{name: "pod annotation names the pool, entries trimmed",
			api: &fakeAPI{pods: pod(pools, " \tpool-a\n,pool-b "), pools: pool()}},
		{name: "pod annotation names the pool, the namespace read would be forbidden",
			api:       &fakeAPI{pods: pod(pools, "pool-a"), pools: pool(), nsErr: forbidden},
			wantCalls: []string{"pod default/web-0", "pool pool-a"}},
		{name: "pod annotation names the pool, with the runtime capability (which has no ipscheduler.io/pools)",
			api: &fakeAPI{pods: pod(pools, "pool-a"), pools: pool()}, runtime: ann("pool-a", "10.0.1.12")},
		{name: "pod annotation does not name the pool",
			api:      &fakeAPI{pods: pod(pools, "pool-b,pool-c"), pools: pool(), namespaces: namespace(map[string]string{defaults: "pool-a"})},
			wantCode: ErrTenancy, wantMsg: "annotation ipscheduler.io/pools=pool-b,pool-c does not name NodeIPPool pool-a",
			wantCalls: []string{"pod default/web-0", "pool pool-a"}},
		{name: "pod annotation does not name the pool, though the runtime capability says it does",
			api: &fakeAPI{pods: pod(pools, "pool-b"), pools: pool()}, runtime: ann("pool-a", "10.0.1.12", pools, "pool-a"),
			wantCode: ErrTenancy, wantMsg: "annotation ipscheduler.io/pools=pool-b does not name NodeIPPool pool-a"},
		{name: "pod annotation malformed: an empty entry",
			api:       &fakeAPI{pods: pod(pools, "pool-a,, pool-b"), pools: pool()},
			wantCode:  ErrTenancy,
			wantMsg:   "annotation ipscheduler.io/pools='pool-a,, pool-b': '' is not a NodeIPPool name (a comma-separated list of pool names)",
			wantCalls: []string{"pod default/web-0", "pool pool-a"}},
		{name: "pod annotation malformed: not a DNS subdomain, even though it names the pool",
			api:      &fakeAPI{pods: pod(pools, "pool-a, Pool_B "), pools: pool()},
			wantCode: ErrTenancy,
			wantMsg:  "annotation ipscheduler.io/pools='pool-a, Pool_B ': 'Pool_B' is not a NodeIPPool name (a comma-separated list of pool names)"},
		{name: "pod annotation present but empty is malformed",
			api:      &fakeAPI{pods: pod(pools, ""), pools: pool()},
			wantCode: ErrTenancy,
			wantMsg:  "annotation ipscheduler.io/pools='': '' is not a NodeIPPool name (a comma-separated list of pool names)"},
		{name: "pod annotation malformed: Python's repr quoting",
			api:      &fakeAPI{pods: pod(pools, "it's\tx"), pools: pool()},
			wantCode: ErrTenancy,
			wantMsg:  `annotation ipscheduler.io/pools="it's\tx": "it's\tx" is not a NodeIPPool name (a comma-separated list of pool names)`},
		{name: "pod annotation malformed: a name longer than 253 characters",
			api:      &fakeAPI{pods: pod(pools, strings.Repeat("a", 254)), pools: pool()},
			wantCode: ErrTenancy,
			wantMsg:  "is not a NodeIPPool name (a comma-separated list of pool names)"},

		// 3. the namespace's ipscheduler.io/default-pools, for a pod without ipscheduler.io/pools
		{name: "namespace default names the pool",
			api:       &fakeAPI{pods: pod(), pools: pool(), namespaces: namespace(map[string]string{defaults: "pool-b,pool-a"})},
			wantCalls: []string{"pod default/web-0", "pool pool-a", "namespace default"}},
		{name: "namespace without the annotation: any pool",
			api: &fakeAPI{pods: pod(), pools: pool(), namespaces: namespace(map[string]string{"other": "x"})}},
		{name: "namespace default does not name the pool",
			api:      &fakeAPI{pods: pod(), pools: pool(), namespaces: namespace(map[string]string{defaults: "pool-b, pool-c"})},
			wantCode: ErrTenancy, wantMsg: "namespace default annotation ipscheduler.io/default-pools=pool-b, pool-c does not name NodeIPPool pool-a",
			wantCalls: []string{"pod default/web-0", "pool pool-a", "namespace default"}},
		{name: "namespace default malformed",
			api:      &fakeAPI{pods: pod(), pools: pool(), namespaces: namespace(map[string]string{defaults: "pool-a,-b"})},
			wantCode: ErrTenancy,
			wantMsg:  "namespace default annotation ipscheduler.io/default-pools='pool-a,-b': '-b' is not a NodeIPPool name (a comma-separated list of pool names)"},
		{name: "namespace not found: no defaults",
			api:       &fakeAPI{pods: pod(), pools: pool()},
			wantCalls: []string{"pod default/web-0", "pool pool-a", "namespace default"}},
		{name: "namespace read forbidden: ErrAPI naming the permission",
			api:      &fakeAPI{pods: pod(), pools: pool(), nsErr: forbidden},
			wantCode: ErrAPI, wantMsg: "lacks the permission get namespaces"},
		{name: "namespace read: 401 is ErrAPI",
			api:      &fakeAPI{pods: pod(), pools: pool(), nsErr: &kube.APIError{StatusCode: http.StatusUnauthorized}},
			wantCode: ErrAPI, wantMsg: "reading namespace default"},
		{name: "namespace read: 503 is transient",
			api:      &fakeAPI{pods: pod(), pools: pool(), nsErr: &kube.APIError{StatusCode: http.StatusServiceUnavailable}},
			wantCode: types.ErrTryAgainLater, wantMsg: "reading namespace default"},
		{name: "namespace read: timeout is transient",
			api:      &fakeAPI{pods: pod(), pools: pool(), nsErr: context.DeadlineExceeded},
			wantCode: types.ErrTryAgainLater, wantMsg: "reading namespace default"},

		// Tenancy comes after the node check and before the allocation check.
		{name: "pool of another node: 101 before tenancy",
			api:      &fakeAPI{pods: pod(pools, "pool-b"), pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-b", []string{"10.0.1.0/24"}, nil)}},
			wantCode: ErrPoolOtherNode, wantMsg: "serves node"},
		{name: "no allocation: tenancy first",
			api:      &fakeAPI{pods: pod(pools, "pool-b"), pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-a", []string{"10.0.1.0/24"}, nil)}},
			wantCode: ErrTenancy, wantMsg: "annotation ipscheduler.io/pools=pool-b does not name NodeIPPool pool-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Verify(context.Background(), tt.api, Request{
				Pod:      PodRef{Namespace: "default", Name: "web-0", UID: "u-1"},
				NodeName: "node-a", SchedulerName: "ip-scheduler", RuntimeAnnotations: tt.runtime,
			})
			if tt.wantCalls != nil && !reflect.DeepEqual(tt.api.calls, tt.wantCalls) {
				t.Errorf("calls %v, want %v", tt.api.calls, tt.wantCalls)
			}
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if v.IP.String() != "10.0.1.12" || v.Pool != "pool-a" {
					t.Fatalf("got %+v", v)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("want code %d, got %v (%+v)", tt.wantCode, err, v)
			}
			if e.Code != tt.wantCode {
				t.Fatalf("got %q (code %d), want code %d", err, e.Code, tt.wantCode)
			}
			if tt.wantCode == ErrTenancy && !strings.Contains(tt.name, "longer than") {
				if e.Msg != MsgTenancy || e.Details != tt.wantMsg {
					t.Fatalf("got msg %q details\n  %q\nwant %q", e.Msg, e.Details, tt.wantMsg)
				}
			} else if !strings.Contains(e.Details, tt.wantMsg) {
				t.Fatalf("details %q do not contain %q", e.Details, tt.wantMsg)
			}
		})
	}
}

// The forbidden namespace read names the permission and keeps the server's
// answer.
func TestVerifyTenancyForbiddenNamespaceDetails(t *testing.T) {
	api := &fakeAPI{
		pods:  map[string]*kube.Pod{"default/web-0": mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12"))},
		pools: map[string]*kube.NodeIPPool{"pool-a": mkPool("node-a", []string{"10.0.1.12"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")})},
		nsErr: &kube.APIError{StatusCode: http.StatusForbidden, Message: "no way", URL: "/api/v1/namespaces/default"},
	}
	_, err := Verify(context.Background(), api, Request{Pod: PodRef{Namespace: "default", Name: "web-0", UID: "u-1"}, NodeName: "node-a"})
	var e *types.Error
	if !errors.As(err, &e) || e.Code != ErrAPI || e.Msg != MsgAPI {
		t.Fatalf("got %v", err)
	}
	want := "reading namespace default (for its ipscheduler.io/default-pools): GET /api/v1/namespaces/default: 403 no way: " +
		"the plugin's identity lacks the permission get namespaces (add verbs [get] on resource namespaces to its ClusterRole)"
	if e.Details != want {
		t.Fatalf("details\n  %q\nwant %q", e.Details, want)
	}
}

func TestPyRepr(t *testing.T) {
	// Python 3: repr(s) for each s.
	tests := map[string]string{
		"":            `''`,
		"pool-a":      `'pool-a'`,
		"it's":        `"it's"`,
		`say "hi"`:    `'say "hi"'`,
		`it's "both"`: `'it\'s "both"'`,
		`back\slash`:  `'back\\slash'`,
		"a\tb\nc\rd":  `'a\tb\nc\rd'`,
		"\x00\x7f":    `'\x00\x7f'`,
		"\u00a0x":     `'\xa0x'`,
		"é€":          `'é€'`,
		"\u200b":      `'\u200b'`,
		"\U000e0001":  `'\U000e0001'`,
	}
	for in, want := range tests {
		if got := pyRepr(in); got != want {
			t.Errorf("pyRepr(%q) = %s, want %s", in, got, want)
		}
	}
}
