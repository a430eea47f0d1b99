package ipam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	gotypes "go/types"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

// contractDir holds the CNI hand-off contract, at the repository root because
// the scheduler's tests read it too (tests/unit/test_cni_contract.py).
var contractDir = filepath.Join("..", "..", "..", "testdata", "cni-contract")

// readContract decodes one contract file strictly: an unknown key is a typo
// in the contract, not something to ignore.
func readContract(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(contractDir, name))
	if err != nil {
		t.Fatalf("the contract is read from the repository root: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

type contractError struct {
	Code uint   `json:"code"`
	Name string `json:"name"`
	Msg  string `json:"msg"`
}

type errorsContract struct {
	Description []string        `json:"description"`
	Errors      []contractError `json:"errors"`
}

// TestContractErrors: errors.json lists exactly errorTable, in its order.
func TestContractErrors(t *testing.T) {
	var c errorsContract
	readContract(t, "errors.json", &c)
	var want []contractError
	for _, e := range errorTable {
		want = append(want, contractError{Code: e.Code, Name: e.Name, Msg: e.Msg})
	}
	if !reflect.DeepEqual(c.Errors, want) {
		t.Errorf("errors.json and errorTable differ:\n%s", diffLines(c.Errors, want))
	}
}

func diffLines(got, want []contractError) string {
	var sb strings.Builder
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = fmt.Sprintf("%+v", got[i])
		}
		if i < len(want) {
			w = fmt.Sprintf("%+v", want[i])
		}
		if g != w {
			fmt.Fprintf(&sb, "  [%d] errors.json %s\n  [%d] errorTable  %s\n", i, g, i, w)
		}
	}
	return sb.String()
}

// codeMsg is a (code, msg) pair as source text: the code expression and the
// msg constant's name.
type codeMsg struct{ code, msg string }

// TestEveryErrorUsesTheTable parses the package's source: errorTable's
// entries name their code's constant, and every error the package creates
// (newErr, types.NewError) takes a Msg constant with the code errorTable pairs
// it with; every pair of the table is used.
func TestEveryErrorUsesTheTable(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	table := map[codeMsg]bool{}
	var sites []codeMsg
	var where []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "newErr" {
				continue // the wrapper passes its parameters on
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					if len(n.Names) == 1 && n.Names[0].Name == "errorTable" {
						readTable(t, n, table)
						return false
					}
				case *ast.CallExpr:
					fun := gotypes.ExprString(n.Fun)
					if fun != "newErr" && fun != "types.NewError" {
						return true
					}
					pos := fset.Position(n.Pos()).String()
					if len(n.Args) < 2 {
						t.Errorf("%s: %s with %d arguments", pos, fun, len(n.Args))
						return true
					}
					msg, ok := n.Args[1].(*ast.Ident)
					if !ok || !strings.HasPrefix(msg.Name, "Msg") {
						t.Errorf("%s: the msg of %s must be one of errors.go's Msg constants, not %s", pos, fun, gotypes.ExprString(n.Args[1]))
						return true
					}
					sites = append(sites, codeMsg{gotypes.ExprString(n.Args[0]), msg.Name})
					where = append(where, pos)
				}
				return true
			})
		}
	}
	if len(table) != len(errorTable) {
		t.Fatalf("errorTable: found %d distinct (code, msg) entries in errors.go's source, it has %d", len(table), len(errorTable))
	}
	used := map[codeMsg]bool{}
	for i, s := range sites {
		if !table[s] {
			t.Errorf("%s: (%s, %s) is not in errorTable (nor in testdata/cni-contract/errors.json)", where[i], s.code, s.msg)
		}
		used[s] = true
	}
	for pair := range table {
		if !used[pair] {
			t.Errorf("errorTable lists (%s, %s), which no error of the package uses", pair.code, pair.msg)
		}
	}
}

// readTable collects errorTable's entries ({"Name", code, Msg}) as source
// text and checks that each Name is its code's constant.
func readTable(t *testing.T, spec *ast.ValueSpec, into map[codeMsg]bool) {
	t.Helper()
	if len(spec.Values) != 1 {
		t.Fatal("errorTable: expected one composite literal")
	}
	lit, ok := spec.Values[0].(*ast.CompositeLit)
	if !ok {
		t.Fatal("errorTable: expected a composite literal")
	}
	for i, elt := range lit.Elts {
		entry, ok := elt.(*ast.CompositeLit)
		if !ok || len(entry.Elts) != 3 {
			t.Fatalf("errorTable[%d] is not {Name, Code, Msg}", i)
		}
		name, err := strconv.Unquote(gotypes.ExprString(entry.Elts[0]))
		code := gotypes.ExprString(entry.Elts[1])
		msg, isIdent := entry.Elts[2].(*ast.Ident)
		if err != nil || !isIdent || !strings.HasPrefix(msg.Name, "Msg") {
			t.Fatalf("errorTable[%d] is not {\"Name\", code constant, Msg constant}", i)
		}
		if code != name && code != "types."+name {
			t.Errorf("errorTable[%d]: Name %q is not its code's constant %s", i, name, code)
		}
		pair := codeMsg{code, msg.Name}
		if into[pair] {
			t.Errorf("errorTable: (%s, %s) twice", code, msg.Name)
		}
		into[pair] = true
	}
}

type contractPod struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	UID           string `json:"uid"`
	NodeName      string `json:"nodeName"`
	SchedulerName string `json:"schedulerName"`
}

type contractAlloc struct {
	IP        string   `json:"ip"`
	IPs       []string `json:"ips"`
	Interface string   `json:"interface"`
}

type contractCase struct {
	Name string `json:"name"`
	// IfName is CNI_IFNAME (default eth0): a further interface's name picks
	// its entry of ipscheduler.io/interfaces.
	IfName string          `json:"ifName"`
	Pool   json.RawMessage `json:"pool"`
	// FirstPool is the first interface's pool of a case about a further
	// interface: the scheduler's side builds it too; ADD reads Pool alone.
	FirstPool json.RawMessage `json:"firstPool"`
	// SecondPool and SecondAllocation: a dual-stack pod's second family from
	// a second pool, and its allocation there (interface eth0).
	SecondPool         json.RawMessage   `json:"secondPool"`
	SecondAllocation   *contractAlloc    `json:"secondAllocation"`
	MultusNetwork      string            `json:"multusNetwork"`
	SchedulerName      string            `json:"schedulerName"`
	PodAnnotations     map[string]string `json:"podAnnotations"`
	Annotations        map[string]string `json:"annotations"`
	RuntimeAnnotations map[string]string `json:"runtimeAnnotations"`
	Allocation         *contractAlloc    `json:"allocation"`
	Result             json.RawMessage   `json:"result"`
	Error              *struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	} `json:"error"`
}

type networkContract struct {
	Description []string       `json:"description"`
	CNIVersion  string         `json:"cniVersion"`
	Pod         contractPod    `json:"pod"`
	Cases       []contractCase `json:"cases"`
	CNIOnly     []contractCase `json:"cniOnly"`
}

// TestContractNetwork runs ADD on each case of network.json (CNI_IFNAME the
// case's ifName, eth0 by default), the pod carrying the annotations the
// scheduler wrote, and compares the result or error with the contract's;
// then CHECK with that result as prevResult.
func TestContractNetwork(t *testing.T) {
	var c networkContract
	readContract(t, "network.json", &c)
	if len(c.Cases) == 0 || len(c.CNIOnly) == 0 {
		t.Fatal("network.json has no cases")
	}
	for _, group := range []struct {
		name  string
		cases []contractCase
	}{{"cases", c.Cases}, {"cniOnly", c.CNIOnly}} {
		for _, tc := range group.cases {
			if (tc.Result == nil) == (tc.Error == nil) {
				t.Errorf("%s/%s: needs exactly one of result and error", group.name, tc.Name)
				continue
			}
			// The runtime capability, when the case does not set one: absent,
			// then the live pod's annotations.
			runtimes := []map[string]string{tc.RuntimeAnnotations}
			if tc.RuntimeAnnotations == nil {
				runtimes = []map[string]string{nil, liveAnnotations(tc)}
			}
			for _, runtime := range runtimes {
				source := "runtime"
				if runtime == nil {
					source = "api"
				}
				t.Run(group.name+"/"+tc.Name+"/"+source, func(t *testing.T) {
					runContractCase(t, &c, tc, runtime)
				})
			}
		}
	}
}

func liveAnnotations(tc contractCase) map[string]string {
	live := map[string]string{}
	for k, v := range tc.PodAnnotations {
		live[k] = v
	}
	for k, v := range tc.Annotations {
		live[k] = v
	}
	return live
}

func runContractCase(t *testing.T, c *networkContract, tc contractCase, runtime map[string]string) {
	pod := &kube.Pod{}
	pod.Metadata.Namespace, pod.Metadata.Name, pod.Metadata.UID = c.Pod.Namespace, c.Pod.Name, c.Pod.UID
	pod.Metadata.Annotations = liveAnnotations(tc)
	pod.Spec.NodeName, pod.Spec.SchedulerName = c.Pod.NodeName, c.Pod.SchedulerName
	if tc.SchedulerName != "" {
		pod.Spec.SchedulerName = tc.SchedulerName
	}
	pool := &kube.NodeIPPool{}
	if err := json.Unmarshal(tc.Pool, pool); err != nil {
		t.Fatalf("pool: %v", err)
	}
	if tc.Allocation != nil {
		if pool.Status.Allocations == nil {
			pool.Status.Allocations = map[string]kube.Allocation{}
		}
		pool.Status.Allocations[c.Pod.UID] = kube.Allocation{
			IP: tc.Allocation.IP, IPs: tc.Allocation.IPs, Interface: tc.Allocation.Interface, Pod: c.Pod.Namespace + "/" + c.Pod.Name, Phase: "Bound", Since: "2024-01-01T00:00:00Z",
		}
	}
	api := &fakeAPI{
		pods:  map[string]*kube.Pod{c.Pod.Namespace + "/" + c.Pod.Name: pod},
		pools: map[string]*kube.NodeIPPool{pool.Metadata.Name: pool},
	}
	if tc.SecondPool != nil {
		second := &kube.NodeIPPool{}
		if err := json.Unmarshal(tc.SecondPool, second); err != nil {
			t.Fatalf("secondPool: %v", err)
		}
		if a := tc.SecondAllocation; a != nil {
			second.Status.Allocations = map[string]kube.Allocation{c.Pod.UID: {
				IP: a.IP, IPs: a.IPs, Interface: a.Interface, Pod: c.Pod.Namespace + "/" + c.Pod.Name, Phase: "Bound", Since: "2024-01-01T00:00:00Z",
			}}
		}
		api.pools[second.Metadata.Name] = second
	}
	var out bytes.Buffer
	p := &Plugin{
		Hostname:   hostname("elsewhere"),
		NewAPI:     func(*IPAMConf) (API, error) { return api, nil },
		Stdout:     &out,
		OpenLedger: tempLedger(t),
	}
	conf := map[string]any{
		"cniVersion":   c.CNIVersion,
		"name":         "underlay",
		"type":         "macvlan",
		"capabilities": map[string]bool{CapabilityPodAnnotations: true},
		"ipam":         map[string]any{"type": "ipscheduler-ipam", "nodeName": c.Pod.NodeName},
	}
	if runtime != nil {
		conf["runtimeConfig"] = map[string]any{CapabilityPodAnnotations: runtime}
	}
	ifName := tc.IfName
	if ifName == "" {
		ifName = "eth0"
	}
	args := &skel.CmdArgs{
		ContainerID: "c0ffee",
		Netns:       "/var/run/netns/cni-test",
		IfName:      ifName,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + c.Pod.Namespace + ";K8S_POD_NAME=" + c.Pod.Name +
			";K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=" + c.Pod.UID,
		StdinData: mustJSON(t, conf),
	}

	err := p.Add(args)
	if tc.Error != nil {
		var e *types.Error
		if !errors.As(err, &e) {
			t.Fatalf("ADD: want error %d %q, got %v (stdout %s)", tc.Error.Code, tc.Error.Msg, err, out.String())
		}
		if e.Code != tc.Error.Code || e.Msg != tc.Error.Msg {
			t.Errorf("ADD: want error %d %q, got %d %q (%s)", tc.Error.Code, tc.Error.Msg, e.Code, e.Msg, e.Details)
		}
		if out.Len() != 0 {
			t.Errorf("ADD failed but printed %s", out.String())
		}
		return
	}
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	var got, want any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("ADD printed %q: %v", out.String(), err)
	}
	if err := json.Unmarshal(tc.Result, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ADD result:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}

	// CHECK with the contract's result as prevResult.
	conf["prevResult"] = json.RawMessage(tc.Result)
	args.StdinData = mustJSON(t, conf)
	if err := p.Check(args); err != nil {
		t.Errorf("CHECK with the result as prevResult: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestContractNetworkErrorsAreListed: every error of network.json is one of
// errors.json's.
func TestContractNetworkErrorsAreListed(t *testing.T) {
	var n networkContract
	readContract(t, "network.json", &n)
	var e errorsContract
	readContract(t, "errors.json", &e)
	for _, tc := range slices.Concat(n.Cases, n.CNIOnly) {
		if tc.Error == nil {
			continue
		}
		if !slices.ContainsFunc(e.Errors, func(x contractError) bool { return x.Code == tc.Error.Code && x.Msg == tc.Error.Msg }) {
			t.Errorf("%s: error %d %q is not in errors.json", tc.Name, tc.Error.Code, tc.Error.Msg)
		}
	}
}
