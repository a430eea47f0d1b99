package ipam

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

// fakeServer is a TLS API server on 127.0.0.1 serving pods and NodeIPPools as JSON.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	objects  map[string]any // URL path → object
	requests atomic.Int32
}

func newFakeServer(t *testing.T, token string) *fakeServer {
	f := &fakeServer{objects: map[string]any{}}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		f.mu.Lock()
		obj, ok := f.objects[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"NotFound","message":"not found"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) set(path string, obj any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if obj == nil {
		delete(f.objects, path)
	} else {
		f.objects[path] = obj
	}
}

func (f *fakeServer) setPod(p *kube.Pod) {
	f.set("/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name, p)
}

func (f *fakeServer) setPool(p *kube.NodeIPPool) {
	f.set("/apis/ipscheduler.io/v1alpha1/nodeippools/"+p.Metadata.Name, p)
}

// writeKubeconfig writes a YAML kubeconfig for the server (CA by file,
// token inline) and returns its path.
func (f *fakeServer) writeKubeconfig(t *testing.T, token string) string {
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ipscheduler-ipam.kubeconfig")
	doc := `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: ` + f.URL + `
    certificate-authority: ca.crt
users:
- name: ipam
  user:
    token: "` + token + `"
contexts:
- name: test
  context:
    cluster: test
    user: ipam
current-context: test
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const cniArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1"

func netconf(cniVersion, kubeconfigPath string, extra string) []byte {
	return []byte(`{"cniVersion":"` + cniVersion + `","name":"underlay","type":"bridge",
	"capabilities":{"io.kubernetes.cri.pod-annotations":true},
	"ipam":{"type":"ipscheduler-ipam","kubeconfig":"` + kubeconfigPath + `","nodeName":"node-a"}` + extra + `}`)
}

func newPlugin(t *testing.T, out *bytes.Buffer) *Plugin {
	return &Plugin{Hostname: hostname("node-a"), NewAPI: NewKubeAPI, Stdout: out, OpenLedger: tempLedger(t)}
}

// tempLedger is an OpenLedger that opens one ledger in a temporary directory
// of the test, whatever the configuration names.
func tempLedger(t *testing.T) func(string) (*ledger.Ledger, error) {
	dir := t.TempDir()
	return func(string) (*ledger.Ledger, error) { return ledger.Open(dir) }
}

func setup(t *testing.T) (*fakeServer, string) {
	srv := newFakeServer(t, "tok")
	srv.setPod(mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)))
	srv.setPool(mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-1": alloc("10.0.1.12", "Bound")}))
	return srv, srv.writeKubeconfig(t, "tok")
}

func TestAdd(t *testing.T) {
	srv, kc := setup(t)
	runtime := `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"ipscheduler.io/pool":"pool-a","ipscheduler.io/ip":"10.0.1.12",
		"ipscheduler.io/network":` + jsonString(network4) + `,"kubernetes.io/config.source":"api"}}`
	tests := []struct {
		name     string
		stdin    []byte
		args     string
		want     string
		wantCode uint
	}{
		{name: "1.1.0 from the API", stdin: netconf("1.1.0", kc, ""), args: cniArgs,
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}`},
		{name: "0.4.0 from the runtime capability", stdin: netconf("0.4.0", kc, runtime), args: cniArgs,
			want: `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.1.12/24","gateway":"10.0.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}],"dns":{}}`},
		{name: "forged capability", args: cniArgs,
			stdin:    netconf("1.0.0", kc, `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"ipscheduler.io/pool":"pool-a","ipscheduler.io/ip":"10.0.1.99"}}`),
			wantCode: ErrRuntimeAnnotations},
		{name: "UID mismatch", stdin: netconf("1.1.0", kc, ""), args: strings.Replace(cniArgs, "u-1", "u-0", 1), wantCode: ErrPodUIDMismatch},
		{name: "no CNI_ARGS", stdin: netconf("1.1.0", kc, ""), args: "", wantCode: types.ErrInvalidEnvironmentVariables},
		{name: "missing kubeconfig", stdin: netconf("1.1.0", filepath.Join(t.TempDir(), "nope"), ""), args: cniArgs,
			wantCode: types.ErrInvalidNetworkConfig},
		{name: "wrong token", stdin: netconf("1.1.0", srv.writeKubeconfig(t, "bad"), ""), args: cniArgs, wantCode: ErrAPI},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := newPlugin(t, &out).Add(&skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: tt.args, StdinData: tt.stdin})
			if failedAsWanted(t, err, tt.wantCode, "") {
				if out.Len() != 0 {
					t.Fatalf("printed something before failing: %s", out.String())
				}
				return
			}
			assertJSON(t, out.Bytes(), tt.want)
		})
	}
}

func TestCheck(t *testing.T) {
	srv, kc := setup(t)
	prev11 := `,"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],
		"ips":[{"interface":0,"address":"10.0.1.12/24","gateway":"10.0.1.1"}]}`
	prev04 := `,"prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.1.12/24"}]}`
	prevOther := `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.13/24"}]}`
	check := func(stdin []byte) error {
		var out bytes.Buffer
		err := newPlugin(t, &out).Check(&skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs, StdinData: stdin})
		if out.Len() != 0 {
			t.Fatalf("CHECK printed %s", out.String())
		}
		return err
	}
	for _, stdin := range [][]byte{netconf("1.1.0", kc, prev11), netconf("0.4.0", kc, prev04), netconf("1.0.0", kc, "")} {
		if err := check(stdin); err != nil {
			t.Fatalf("%s: %v", stdin, err)
		}
	}
	if err := check(netconf("1.1.0", kc, prevOther)); codeOf(err) != ErrPrevResultMismatch {
		t.Fatalf("prevResult of another address: %v", err)
	}
	if err := check(netconf("1.1.0", kc, `,"prevResult":{"cniVersion":"1.1.0","ips":"x"}`)); codeOf(err) != types.ErrDecodingFailure {
		t.Fatalf("bad prevResult: %v", err)
	}
	// The scheduler released the address: CHECK fails.
	srv.setPool(mkPool("node-a", []string{"10.0.1.0/24"}, nil))
	if err := check(netconf("1.1.0", kc, prev11)); codeOf(err) != ErrNoAllocation {
		t.Fatalf("released: %v", err)
	}
	// The pool is gone.
	srv.set("/apis/ipscheduler.io/v1alpha1/nodeippools/pool-a", nil)
	if err := check(netconf("1.1.0", kc, prev11)); codeOf(err) != ErrPoolNotFound {
		t.Fatalf("pool gone: %v", err)
	}
}

func TestDelNeverTalksToTheAPI(t *testing.T) {
	p := &Plugin{
		Hostname:   func() (string, error) { t.Fatal("DEL read the host name"); return "", nil },
		NewAPI:     func(*IPAMConf) (API, error) { t.Fatal("DEL built an API client"); return nil, nil },
		OpenLedger: tempLedger(t),
	}
	for _, stdin := range [][]byte{
		netconf("1.1.0", "/nonexistent", ""),
		[]byte(`{"cniVersion":"0.3.1","name":"n","ipam":{"type":"ipscheduler-ipam"}}`),
		[]byte(`not even JSON`),
	} {
		for range 2 { // idempotent
			if err := p.Del(&skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs, StdinData: stdin}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.GC(&skel.CmdArgs{StdinData: netconf("1.1.0", "/nonexistent", `,"cni.dev/valid-attachments":[]`)}); err != nil {
		t.Fatal(err)
	}
}

func TestStatus(t *testing.T) {
	srv, kc := setup(t)
	p := newPlugin(t, &bytes.Buffer{})
	before := srv.requests.Load()
	if err := p.Status(&skel.CmdArgs{StdinData: netconf("1.1.0", kc, "")}); err != nil {
		t.Fatal(err)
	}
	if srv.requests.Load() != before {
		t.Fatal("STATUS called the API")
	}
	// A pool with no free address is not STATUS's business (nothing read).
	srv.setPool(mkPool("node-a", []string{"10.0.1.12"}, map[string]kube.Allocation{"u-9": alloc("10.0.1.12", "Bound")}))
	if err := p.Status(&skel.CmdArgs{StdinData: netconf("1.1.0", kc, "")}); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.kubeconfig")
	if err := os.WriteFile(bad, []byte("clusters: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "missing"), bad} {
		err := p.Status(&skel.CmdArgs{StdinData: netconf("1.1.0", path, "")})
		if codeOf(err) != ErrStatusUnavailable || !strings.Contains(err.Error(), path) {
			t.Fatalf("%s: got %v", path, err)
		}
	}
	if err := p.Status(&skel.CmdArgs{StdinData: []byte(`{"name":"n","ipam":{"nodeName":1}}`)}); codeOf(err) != types.ErrDecodingFailure {
		t.Fatalf("broken netconf: %v", err)
	}
}

func TestWriteError(t *testing.T) {
	var buf bytes.Buffer
	e := types.NewError(ErrNoAllocation, "no allocation for this pod (released?)", "details here")
	if err := WriteError(&buf, e, []byte(`{"cniVersion":"0.4.0","name":"n"}`)); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, buf.Bytes(), `{"cniVersion":"0.4.0","code":102,"msg":"no allocation for this pod (released?)","details":"details here"}`)
	buf.Reset()
	_ = WriteError(&buf, types.NewError(7, "m", ""), []byte("garbage"))
	assertJSON(t, buf.Bytes(), `{"cniVersion":"1.1.0","code":7,"msg":"m"}`)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestAnAddressStillInAnotherSandboxIsRefusedUntilItsDel: pod web-0 (UID u-1) is
// force-deleted and re-created (UID u-2); the scheduler gives the new pod the same
// address while the old sandbox, whose netns still exists, has not been torn down.
// ADD and CHECK of the new sandbox are refused with "try again later" naming the old
// one; once the old sandbox's DEL ran, ADD succeeds; GC drops what the runtime no
// longer has.
func TestAnAddressStillInAnotherSandboxIsRefusedUntilItsDel(t *testing.T) {
	srv, kc := setup(t)
	var out bytes.Buffer
	p := newPlugin(t, &out)
	stdin := netconf("1.1.0", kc, "")
	old := &skel.CmdArgs{ContainerID: "old", Netns: "/proc/self/ns/net", IfName: "eth0", Args: cniArgs, StdinData: stdin}
	if err := p.Add(old); err != nil {
		t.Fatal(err)
	}
	srv.setPod(mkPod("u-2", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)))
	srv.setPool(mkPool("node-a", []string{"10.0.1.0/24"}, map[string]kube.Allocation{"u-2": alloc("10.0.1.12", "Reserved")}))
	args := strings.Replace(cniArgs, "u-1", "u-2", 1)
	fresh := &skel.CmdArgs{ContainerID: "new", Netns: "/run/netns/ipscheduler-test-new", IfName: "eth0", Args: args, StdinData: stdin}
	out.Reset()
	err := p.Add(fresh)
	if !failedAsWanted(t, err, types.ErrTryAgainLater, MsgAddressHeld) || out.Len() != 0 {
		t.Fatalf("ADD over a live sandbox's address: %v (printed %q)", err, out.String())
	}
	for _, want := range []string{"10.0.1.12", "sandbox old", "UID u-1", "netns /proc/self/ns/net"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if err := p.Check(fresh); !failedAsWanted(t, err, types.ErrTryAgainLater, MsgAddressHeld) {
		t.Fatalf("CHECK: %v", err)
	}
	for range 2 {
		if err := p.Del(old); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Add(fresh); err != nil {
		t.Fatalf("ADD after the old sandbox's DEL: %v", err)
	}
	if err := p.Check(fresh); err != nil {
		t.Fatalf("CHECK of the holder: %v", err)
	}
	gc := netconf("1.1.0", kc, `,"cni.dev/valid-attachments":[{"containerID":"other","ifname":"eth0"}]`)
	if err := p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatal(err)
	}
	l, _ := p.OpenLedger("")
	if entries, err := l.Entries(); err != nil || len(entries) != 0 {
		t.Fatalf("after GC: %v %v", entries, err)
	}
}

func TestALedgerThatCannotBeWrittenFailsAddAndDel(t *testing.T) {
	_, kc := setup(t)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Plugin{Hostname: hostname("node-a"), NewAPI: NewKubeAPI, Stdout: &bytes.Buffer{}, OpenLedger: ledger.Open}
	stdin := netconf("1.1.0", kc, `,"x":1`)
	stdin = []byte(strings.Replace(string(stdin), `"nodeName":"node-a"`, `"nodeName":"node-a","dataDir":"`+file+`"`, 1))
	args := &skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs, StdinData: stdin}
	if err := p.Add(args); !failedAsWanted(t, err, types.ErrIOFailure, MsgLedger) {
		t.Fatalf("ADD: %v", err)
	}
	if err := p.Del(args); !failedAsWanted(t, err, types.ErrIOFailure, MsgLedger) {
		t.Fatalf("DEL must not forget a release it cannot write: %v", err)
	}
}

func TestCheckPrevResult(t *testing.T) {
	ip4, ip6 := netip.MustParseAddr("10.0.1.12"), netip.MustParseAddr("fd00::c")
	tests := []struct {
		name    string
		prev    string // prevResult's ips
		ips     []netip.Addr
		wantMsg string // "" : passes
	}{
		{name: "one address", prev: `[{"address":"10.0.1.12/24"}]`, ips: []netip.Addr{ip4}},
		{name: "one address among others", prev: `[{"address":"10.0.9.9/24"},{"address":"10.0.1.12/24"}]`, ips: []netip.Addr{ip4}},
		{name: "one address missing", prev: `[{"address":"10.0.1.13/24"}]`, ips: []netip.Addr{ip4},
			wantMsg: "the pool allocates 10.0.1.12, prevResult lacks 10.0.1.12 (it has 10.0.1.13)"},
		{name: "no addresses", prev: `[]`, ips: []netip.Addr{ip4}, wantMsg: "(it has none)"},
		{name: "both addresses", prev: `[{"address":"10.0.1.12/24"},{"address":"fd00::c/64"}]`, ips: []netip.Addr{ip4, ip6}},
		{name: "both addresses, the other order", prev: `[{"address":"fd00::c/64"},{"address":"10.0.1.12/24"}]`, ips: []netip.Addr{ip4, ip6}},
		{name: "the IPv6 address missing", prev: `[{"address":"10.0.1.12/24"}]`, ips: []netip.Addr{ip4, ip6},
			wantMsg: "the pool allocates 10.0.1.12,fd00::c, prevResult lacks fd00::c (it has 10.0.1.12)"},
		{name: "both missing", prev: `[{"address":"10.0.1.13/24"}]`, ips: []netip.Addr{ip6, ip4},
			wantMsg: "lacks fd00::c,10.0.1.12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var prev types100.Result
			if err := json.Unmarshal([]byte(`{"cniVersion":"1.1.0","ips":`+tt.prev+`}`), &prev); err != nil {
				t.Fatal(err)
			}
			err := CheckPrevResult(&prev, tt.ips...)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			failedAsWanted(t, err, ErrPrevResultMismatch, tt.wantMsg)
		})
	}
}

func setupDual(t *testing.T) (*fakeServer, string) {
	srv := newFakeServer(t, "tok")
	srv.setPod(mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationIPs, "10.0.1.12,fd00::c", AnnotationNetwork, networkDual)))
	srv.setPool(mkPool("node-a", []string{"10.0.1.0/24", "fd00::/120"},
		map[string]kube.Allocation{"u-1": allocDual("Bound", "10.0.1.12", "fd00::c")}))
	return srv, srv.writeKubeconfig(t, "tok")
}

// A dual-stack pod: ADD hands out both addresses and records both in the
// ledger; CHECK wants both in prevResult; DEL frees both.
func TestAddCheckDelDualStack(t *testing.T) {
	_, kc := setupDual(t)
	var out bytes.Buffer
	p := newPlugin(t, &out)
	for _, v := range []struct{ cniVersion, want string }{
		{"1.1.0", `{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"},{"address":"fd00::c/64","gateway":"fd00::1"}],` +
			`"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}]}`},
		{"0.4.0", `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.1.12/24","gateway":"10.0.1.1"},` +
			`{"version":"6","address":"fd00::c/64","gateway":"fd00::1"}],` +
			`"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}],"dns":{}}`},
	} {
		out.Reset()
		args := &skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs, StdinData: netconf(v.cniVersion, kc, "")}
		if err := p.Add(args); err != nil {
			t.Fatalf("ADD %s: %v", v.cniVersion, err)
		}
		assertJSON(t, out.Bytes(), v.want)
	}
	l, _ := p.OpenLedger("")
	entries, err := l.Entries()
	if err != nil || len(entries) != 2 || entries[netip.MustParseAddr("10.0.1.12")].ContainerID != "abc" ||
		entries[netip.MustParseAddr("fd00::c")].ContainerID != "abc" {
		t.Fatalf("ledger after ADD: %+v %v", entries, err)
	}

	check := func(prev string) error {
		return p.Check(&skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs,
			StdinData: netconf("1.1.0", kc, `,"prevResult":{"cniVersion":"1.1.0","ips":`+prev+`}`)})
	}
	if err := check(`[{"address":"fd00::c/64"},{"address":"10.0.1.12/24"}]`); err != nil {
		t.Fatalf("CHECK with both addresses: %v", err)
	}
	if err := check(`[{"address":"10.0.1.12/24"}]`); !failedAsWanted(t, err, ErrPrevResultMismatch, "lacks fd00::c") {
		t.Fatalf("CHECK without the IPv6 address: %v", err)
	}

	if err := p.Del(&skel.CmdArgs{ContainerID: "abc", IfName: "eth0", Args: cniArgs, StdinData: netconf("1.1.0", kc, "")}); err != nil {
		t.Fatal(err)
	}
	if entries, err := l.Entries(); err != nil || len(entries) != 0 {
		t.Fatalf("ledger after DEL: %+v %v", entries, err)
	}
}

// One of a dual-stack pod's addresses still in another live sandbox: ADD
// claims neither (and prints nothing), CHECK is refused too; after that
// sandbox's DEL both are claimed.
func TestADualStackAddIsRefusedWhileOneAddressIsHeld(t *testing.T) {
	_, kc := setupDual(t)
	var out bytes.Buffer
	p := newPlugin(t, &out)
	l, _ := p.OpenLedger("")
	old := ledger.Entry{ContainerID: "old", IfName: "eth0", Network: "underlay", Netns: "/proc/self/ns/net", PodUID: "u-0", Pod: "default/old"}
	if err := l.Claim(netip.MustParseAddr("fd00::c"), old); err != nil {
		t.Fatal(err)
	}
	args := &skel.CmdArgs{ContainerID: "abc", Netns: "/run/netns/ipscheduler-test-abc", IfName: "eth0", Args: cniArgs,
		StdinData: netconf("1.1.0", kc, "")}
	err := p.Add(args)
	if !failedAsWanted(t, err, types.ErrTryAgainLater, "address fd00::c is still configured in sandbox old") || out.Len() != 0 {
		t.Fatalf("ADD: %v (printed %q)", err, out.String())
	}
	if e, err := l.Holder(netip.MustParseAddr("10.0.1.12")); err != nil || e != nil {
		t.Fatalf("the IPv4 address was claimed anyway: %+v %v", e, err)
	}
	if err := p.Check(args); !failedAsWanted(t, err, types.ErrTryAgainLater, "fd00::c") {
		t.Fatalf("CHECK: %v", err)
	}
	if err := p.Del(&skel.CmdArgs{ContainerID: "old", IfName: "eth0", StdinData: args.StdinData}); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(args); err != nil {
		t.Fatalf("ADD after the old sandbox's DEL: %v", err)
	}
	if entries, err := l.Entries(); err != nil || len(entries) != 2 {
		t.Fatalf("ledger: %+v %v", entries, err)
	}
}
