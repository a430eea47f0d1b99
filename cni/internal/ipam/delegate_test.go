package ipam

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

// fakeDelegate is the name under which the test binary is a CNI IPAM plugin
// (a symlink on CNI_PATH): it records each call in $FAKE_IPAM_LOG and answers
// with skel, as host-local would. Its ipam object: "address" (the result's
// one address), "fail" (verb → the error object to fail that verb with).
// $FAKE_IPAM_VERSIONS (comma-separated) narrows the spec versions it supports.
const fakeDelegate = "fake-ipam"

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == fakeDelegate {
		fakeDelegateMain()
		return
	}
	os.Exit(m.Run())
}

// fakeCall is one call of the fake delegate, as it recorded it.
type fakeCall struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	Args        string          `json:"args"`
	Stdin       json.RawMessage `json:"stdin"`
}

func fakeDelegateMain() {
	type ipamConf struct {
		Address string                 `json:"address"`
		Fail    map[string]types.Error `json:"fail"`
	}
	run := func(args *skel.CmdArgs) (string, ipamConf, error) {
		line, _ := json.Marshal(fakeCall{os.Getenv("CNI_COMMAND"), args.ContainerID, args.IfName, args.Args, args.StdinData})
		f, err := os.OpenFile(os.Getenv("FAKE_IPAM_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", ipamConf{}, err
		}
		defer f.Close()
		if _, err := f.Write(append(line, '\n')); err != nil {
			return "", ipamConf{}, err
		}
		var conf struct {
			CNIVersion string   `json:"cniVersion"`
			IPAM       ipamConf `json:"ipam"`
		}
		if err := json.Unmarshal(args.StdinData, &conf); err != nil {
			return "", ipamConf{}, err
		}
		if e, ok := conf.IPAM.Fail[os.Getenv("CNI_COMMAND")]; ok {
			return "", ipamConf{}, &e
		}
		return conf.CNIVersion, conf.IPAM, nil
	}
	noResult := func(args *skel.CmdArgs) error {
		_, _, err := run(args)
		return err
	}
	versions := version.All
	if v := os.Getenv("FAKE_IPAM_VERSIONS"); v != "" {
		versions = version.PluginSupports(strings.Split(v, ",")...)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			cniVersion, conf, err := run(args)
			if err != nil {
				return err
			}
			ip, prefix, err := net.ParseCIDR(conf.Address)
			if err != nil {
				return err
			}
			prefix.IP = ip
			return types.PrintResult(&types100.Result{CNIVersion: types100.ImplementedSpecVersion,
				IPs: []*types100.IPConfig{{Address: *prefix}}}, cniVersion)
		},
		Check: noResult, Del: noResult, GC: noResult,
	}, versions, "fake IPAM plugin")
}

// delegateEnv puts the fake delegate on CNI_PATH and sets the CNI_*
// variables a runtime would (the delegate inherits them, as from skel's
// caller) and returns the fake's call log.
func delegateEnv(t *testing.T, args *skel.CmdArgs) func() []fakeCall {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, fakeDelegate)); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls.jsonl")
	for k, v := range map[string]string{
		"CNI_PATH": dir, "FAKE_IPAM_LOG": log, "FAKE_IPAM_VERSIONS": "",
		"CNI_CONTAINERID": args.ContainerID, "CNI_IFNAME": args.IfName, "CNI_NETNS": args.Netns, "CNI_ARGS": args.Args,
	} {
		t.Setenv(k, v)
	}
	return func() []fakeCall {
		f, err := os.Open(log)
		if os.IsNotExist(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var calls []fakeCall
		for s := bufio.NewScanner(f); s.Scan(); {
			var c fakeCall
			if err := json.Unmarshal(s.Bytes(), &c); err != nil {
				t.Fatal(err)
			}
			calls = append(calls, c)
		}
		_ = os.Remove(log)
		return calls
	}
}

func commands(calls []fakeCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Command)
	}
	return strings.Join(out, ",")
}

// delegateConf is netconf with ipam.delegate set to the fake (extra goes
// into the delegate's object) and the top-level keys in rest.
func delegateConf(cniVersion, kc, extra, rest string) []byte {
	stdin := netconf(cniVersion, kc, rest)
	return []byte(strings.Replace(string(stdin), `"nodeName":"node-a"`,
		`"nodeName":"node-a","delegate":{"type":"`+fakeDelegate+`","address":"10.88.1.200/24"`+extra+`}`, 1))
}

func TestLoadConfigDelegate(t *testing.T) {
	tests := []struct {
		name     string
		delegate string
		ownType  string
		wantType string
		wantMsg  string
	}{
		{name: "host-local", delegate: `{"type":"host-local","ranges":[[{"subnet":"10.88.1.0/24"}]],"dataDir":"/d"}`, wantType: "host-local"},
		{name: "null is unset", delegate: `null`},
		{name: "not an object", delegate: `"host-local"`, wantMsg: "must be an object"},
		{name: "an array", delegate: `[{"type":"host-local"}]`, wantMsg: "must be an object"},
		{name: "no type", delegate: `{"ranges":[]}`, wantMsg: `has no "type"`},
		{name: "type not a string", delegate: `{"type":5}`, wantMsg: `"type" must be a string`},
		{name: "empty type", delegate: `{"type":" "}`, wantMsg: `"type" is empty`},
		{name: "itself", delegate: `{"type":"ipscheduler-ipam"}`, wantMsg: "is this plugin"},
		{name: "itself under another name", delegate: `{"type":"underlay-ipam"}`, ownType: "underlay-ipam", wantMsg: "is this plugin"},
		{name: "a path", delegate: `{"type":"/opt/cni/bin/host-local"}`, wantMsg: "not a path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			own := tt.ownType
			if own == "" {
				own = PluginType
			}
			stdin := `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"` + own + `","nodeName":"a","delegate":` + tt.delegate + `}}`
			conf, err := LoadConfig([]byte(stdin), nil)
			if tt.wantMsg != "" {
				failedAsWanted(t, err, types.ErrInvalidNetworkConfig, "ipam.delegate")
				failedAsWanted(t, err, types.ErrInvalidNetworkConfig, tt.wantMsg)
				if DelegateOf([]byte(stdin)) != nil {
					t.Fatal("DelegateOf took an invalid delegate")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := DelegateOf([]byte(stdin))
			if tt.wantType == "" {
				if conf.IPAM.Delegate != nil || d != nil {
					t.Fatalf("delegate %+v / %+v, want none", conf.IPAM.Delegate, d)
				}
				return
			}
			if conf.IPAM.Delegate.Type != tt.wantType || d.Type != tt.wantType {
				t.Fatalf("type %q / %q, want %q", conf.IPAM.Delegate.Type, d.Type, tt.wantType)
			}
			assertJSON(t, conf.IPAM.Delegate.Conf, tt.delegate)
		})
	}
}

// TestAPodOfAnotherSchedulerGoesToTheDelegate: ADD, CHECK of a pod without
// ipscheduler.io/pool of another scheduler reach the delegate with the network
// configuration, ipam replaced by ipam.delegate; its result is printed in the
// configuration's cniVersion and nothing enters the ledger. DEL always reaches
// the delegate, whoever the pod; our pods never reach it otherwise.
func TestAPodOfAnotherSchedulerGoesToTheDelegate(t *testing.T) {
	srv, kc := setup(t)
	srv.setPod(mkPod("u-1", "default-scheduler", map[string]string{"other": "x"}))
	args := &skel.CmdArgs{ContainerID: "abc", Netns: "/var/run/netns/ipscheduler-test-none", IfName: "eth0", Args: cniArgs}
	calls := delegateEnv(t, args)

	tests := []struct {
		name       string
		cniVersion string
		want       string
	}{
		{name: "1.1.0", cniVersion: "1.1.0", want: `{"cniVersion":"1.1.0","ips":[{"address":"10.88.1.200/24"}]}`},
		{name: "0.4.0", cniVersion: "0.4.0", want: `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.88.1.200/24"}],"dns":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := newPlugin(t, &out)
			args.StdinData = delegateConf(tt.cniVersion, kc, "", `,"args":{"cni":{"x":1}},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":"b"}}`)
			if err := p.Add(args); err != nil {
				t.Fatal(err)
			}
			assertJSON(t, out.Bytes(), tt.want)
			got := calls()
			if commands(got) != "ADD" {
				t.Fatalf("delegate calls %s, want ADD", commands(got))
			}
			if c := got[0]; c.ContainerID != "abc" || c.IfName != "eth0" || c.Args != cniArgs {
				t.Fatalf("the delegate got %+v", c)
			}
			// Every top-level key as it was, ipam replaced by the delegate's object.
			var want map[string]any
			_ = json.Unmarshal(args.StdinData, &want)
			want["ipam"] = want["ipam"].(map[string]any)["delegate"]
			assertJSON(t, got[0].Stdin, string(mustJSON(t, want)))
			l, _ := p.OpenLedger("")
			if entries, err := l.Entries(); err != nil || len(entries) != 0 {
				t.Fatalf("a delegated pod in the ledger: %v %v", entries, err)
			}

			prev := `,"prevResult":` + tt.want
			args.StdinData = delegateConf(tt.cniVersion, kc, "", prev)
			if err := p.Check(args); err != nil {
				t.Fatal(err)
			}
			if got := calls(); commands(got) != "CHECK" || !strings.Contains(string(got[0].Stdin), "10.88.1.200/24") {
				t.Fatalf("CHECK: delegate calls %+v", got)
			}
			for range 2 { // idempotent
				if err := p.Del(args); err != nil {
					t.Fatal(err)
				}
			}
			if got := calls(); commands(got) != "DEL,DEL" {
				t.Fatalf("DEL: delegate calls %s", commands(got))
			}
		})
	}

	t.Run("without delegate: 105", func(t *testing.T) {
		var out bytes.Buffer
		args.StdinData = netconf("1.1.0", kc, "")
		if err := newPlugin(t, &out).Add(args); !failedAsWanted(t, err, ErrNotOurs, MsgNotOurs) || out.Len() != 0 {
			t.Fatalf("%v %s", err, out.String())
		}
		if got := calls(); got != nil {
			t.Fatalf("delegate calls %s", commands(got))
		}
	})

	t.Run("our pod without ipscheduler.io/pool yet: 11, not delegated", func(t *testing.T) {
		srv.setPod(unbound(mkPod("u-1", "ip-scheduler", nil)))
		defer srv.setPod(mkPod("u-1", "default-scheduler", nil))
		args.StdinData = delegateConf("1.1.0", kc, "", "")
		p := newPlugin(t, &bytes.Buffer{})
		if err := p.Add(args); !failedAsWanted(t, err, types.ErrTryAgainLater, "has no ipscheduler.io/pool annotation yet") {
			t.Fatal(err)
		}
		if err := p.Check(args); !failedAsWanted(t, err, types.ErrTryAgainLater, "") {
			t.Fatal(err)
		}
		if got := calls(); got != nil {
			t.Fatalf("delegate calls %s", commands(got))
		}
	})

	t.Run("our pod: ours, and its DEL reaches the delegate too", func(t *testing.T) {
		srv.setPod(mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)))
		defer srv.setPod(mkPod("u-1", "default-scheduler", nil))
		var out bytes.Buffer
		p := newPlugin(t, &out)
		args.StdinData = delegateConf("1.1.0", kc, "", "")
		if err := p.Add(args); err != nil {
			t.Fatal(err)
		}
		assertJSON(t, out.Bytes(), `{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}`)
		if err := p.Check(args); err != nil {
			t.Fatal(err)
		}
		if got := calls(); got != nil {
			t.Fatalf("delegate calls %s for our pod", commands(got))
		}
		if err := p.Del(args); err != nil {
			t.Fatal(err)
		}
		if got := calls(); commands(got) != "DEL" {
			t.Fatalf("DEL: delegate calls %s", commands(got))
		}
		l, _ := p.OpenLedger("")
		if entries, err := l.Entries(); err != nil || len(entries) != 0 {
			t.Fatalf("after DEL: %v %v", entries, err)
		}
	})
}

func TestDelegateFailures(t *testing.T) {
	srv, kc := setup(t)
	srv.setPod(mkPod("u-1", "default-scheduler", nil))
	args := &skel.CmdArgs{ContainerID: "abc", Netns: "/var/run/netns/ipscheduler-test-none", IfName: "eth0", Args: cniArgs}
	calls := delegateEnv(t, args)
	fail := `,"fail":{"ADD":{"code":11,"msg":"no IP addresses available in range set","details":"10.88.1.200-10.88.1.250"},` +
		`"CHECK":{"code":7,"msg":"bad"},"DEL":{"code":999,"msg":"cannot release"},"GC":{"code":999,"msg":"cannot collect"}}`

	tests := []struct {
		name     string
		stdin    []byte
		verb     string
		wantCode uint
		wantMsg  string
	}{
		{name: "ADD: the delegate's error as it printed it", stdin: delegateConf("1.1.0", kc, fail, ""), verb: "ADD",
			wantCode: types.ErrTryAgainLater, wantMsg: "no IP addresses available in range set"},
		{name: "CHECK: the delegate's error", stdin: delegateConf("1.1.0", kc, fail, ""), verb: "CHECK", wantCode: 7, wantMsg: "bad"},
		{name: "DEL: the delegate's error", stdin: delegateConf("1.1.0", kc, fail, ""), verb: "DEL", wantCode: 999, wantMsg: "cannot release"},
		{name: "ADD: not on CNI_PATH", stdin: []byte(strings.Replace(string(delegateConf("1.1.0", kc, "", "")), fakeDelegate, "missing-ipam", 1)),
			verb: "ADD", wantCode: ErrDelegate, wantMsg: "missing-ipam"},
		{name: "DEL: not on CNI_PATH", stdin: []byte(strings.Replace(string(delegateConf("1.1.0", kc, "", "")), fakeDelegate, "missing-ipam", 1)),
			verb: "DEL", wantCode: ErrDelegate, wantMsg: "missing-ipam"},
		{name: "GC: not on CNI_PATH", stdin: []byte(strings.Replace(string(delegateConf("1.1.0", kc, "", "")), fakeDelegate, "missing-ipam", 1)),
			verb: "GC", wantCode: ErrDelegate, wantMsg: "missing-ipam"},
		{name: "GC: the delegate's error", stdin: delegateConf("1.1.0", kc, fail, ""), verb: "GC", wantCode: 999, wantMsg: "cannot collect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := newPlugin(t, &out)
			a := *args
			a.StdinData = tt.stdin
			var err error
			switch tt.verb {
			case "ADD":
				err = p.Add(&a)
			case "CHECK":
				err = p.Check(&a)
			case "DEL":
				err = p.Del(&a)
			case "GC":
				err = p.GC(&a)
			}
			failedAsWanted(t, err, tt.wantCode, tt.wantMsg)
			if out.Len() != 0 {
				t.Fatalf("printed %s", out.String())
			}
			calls()
		})
	}

	t.Run("DEL releases the ledger even when the delegate fails, and says both", func(t *testing.T) {
		srv.setPod(mkPod("u-1", "ip-scheduler", ann("pool-a", "10.0.1.12", AnnotationNetwork, network4)))
		defer srv.setPod(mkPod("u-1", "default-scheduler", nil))
		p := newPlugin(t, &bytes.Buffer{})
		a := *args
		a.StdinData = delegateConf("1.1.0", kc, "", "")
		if err := p.Add(&a); err != nil {
			t.Fatal(err)
		}
		a.StdinData = delegateConf("1.1.0", kc, fail, "")
		if err := p.Del(&a); codeOf(err) != 999 {
			t.Fatalf("DEL: %v", err)
		}
		l, _ := p.OpenLedger("")
		if entries, err := l.Entries(); err != nil || len(entries) != 0 {
			t.Fatalf("the ledger kept %v %v", entries, err)
		}
		// A ledger that cannot be written and a failing delegate: the ledger's 5, naming both.
		file := filepath.Join(t.TempDir(), "not-a-dir")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		p.OpenLedger = ledger.Open
		a.StdinData = []byte(strings.Replace(string(a.StdinData), `"nodeName":"node-a"`, `"nodeName":"node-a","dataDir":"`+file+`"`, 1))
		err := p.Del(&a)
		failedAsWanted(t, err, types.ErrIOFailure, MsgLedger)
		failedAsWanted(t, err, types.ErrIOFailure, "cannot release")
		calls()
	})

	t.Run("an invalid delegate: ADD 7, DEL only the ledger", func(t *testing.T) {
		p := newPlugin(t, &bytes.Buffer{})
		a := *args
		a.StdinData = []byte(strings.Replace(string(delegateConf("1.1.0", kc, "", "")), `"type":"`+fakeDelegate+`"`, `"type":""`, 1))
		failedAsWanted(t, p.Add(&a), types.ErrInvalidNetworkConfig, "ipam.delegate")
		if err := p.Del(&a); err != nil {
			t.Fatal(err)
		}
		if got := calls(); got != nil {
			t.Fatalf("delegate calls %s", commands(got))
		}
	})
}

// TestGCReachesTheDelegateThatSupportsIt: GC passes cni.dev/valid-attachments on
// to a delegate that supports the configuration's cniVersion, skips one that
// does not.
func TestGCReachesTheDelegateThatSupportsIt(t *testing.T) {
	_, kc := setup(t)
	calls := delegateEnv(t, &skel.CmdArgs{})
	stdin := delegateConf("1.1.0", kc, "", `,"cni.dev/valid-attachments":[{"containerID":"abc","ifname":"eth0"}]`)
	p := newPlugin(t, &bytes.Buffer{})
	if err := p.GC(&skel.CmdArgs{StdinData: stdin}); err != nil {
		t.Fatal(err)
	}
	got := calls()
	if commands(got) != "GC" || !strings.Contains(string(got[0].Stdin), `"cni.dev/valid-attachments":[{"containerID":"abc","ifname":"eth0"}]`) {
		t.Fatalf("delegate calls %+v", got)
	}
	var ipam struct {
		IPAM map[string]any `json:"ipam"`
	}
	if err := json.Unmarshal(got[0].Stdin, &ipam); err != nil || ipam.IPAM["type"] != fakeDelegate {
		t.Fatalf("the delegate's ipam: %v %v", ipam.IPAM, err)
	}

	t.Setenv("FAKE_IPAM_VERSIONS", "0.3.1,0.4.0,1.0.0")
	if err := p.GC(&skel.CmdArgs{StdinData: stdin}); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != nil {
		t.Fatalf("a 1.0.0 delegate got GC: %+v", got)
	}
}
