package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ipscheduler/ipscheduler/cni/internal/ipam"
)

// The test binary doubles as the plugin: run with this variable set it is
// ipscheduler-ipam, so these tests drive the real skel dispatch, stdin,
// stdout and exit codes.
const beThePlugin = "IPSCHEDULER_IPAM_TEST_BE_PLUGIN"

// dataDir is the ledger directory every configuration of these tests names.
var dataDir string

func TestMain(m *testing.M) {
	if os.Getenv(beThePlugin) == "1" {
		os.Exit(ipam.Main())
	}
	dir, err := os.MkdirTemp("", "ipscheduler-ipam-ledger-")
	if err != nil {
		panic(err)
	}
	dataDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type run struct {
	stdout, stderr string
	exit           int
}

func runPlugin(t *testing.T, env map[string]string, stdin string) run {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{beThePlugin + "=1", "PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errOut.String()}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		r.exit = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func cniEnv(command string) map[string]string {
	return map[string]string{
		"CNI_COMMAND":     command,
		"CNI_CONTAINERID": "abc123",
		"CNI_NETNS":       "/var/run/netns/ipscheduler-ipam-test-does-not-exist",
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/opt/cni/bin",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=u-1",
	}
}

// apiServer serves one pod and its pool over TLS on 127.0.0.1 and returns a
// JSON kubeconfig for it.
func apiServer(t *testing.T) string {
	objects := map[string]string{
		"/api/v1/namespaces/default/pods/web-0": `{"metadata":{"name":"web-0","namespace":"default","uid":"u-1",
			"annotations":{"ipscheduler.io/pool":"pool-a","ipscheduler.io/ip":"fd00::5"}},
			"spec":{"nodeName":"node-a","schedulerName":"ip-scheduler"}}`,
		"/apis/ipscheduler.io/v1alpha1/nodeippools/pool-a": `{"metadata":{"name":"pool-a"},
			"spec":{"nodeName":"node-a","addresses":["fd00::/120"]},
			"status":{"allocations":{"u-1":{"ip":"fd00::5","pod":"default/web-0","phase":"Bound","since":"2024-01-01T00:00:00Z"}}}}`,
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := objects[r.URL.Path]
		if !ok || r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc, _ := json.Marshal(map[string]any{
		"current-context": "c",
		"clusters":        []any{map[string]any{"name": "x", "cluster": map[string]any{"server": srv.URL, "certificate-authority-data": ca}}},
		"users":           []any{map[string]any{"name": "u", "user": map[string]any{"token": "tok"}}},
		"contexts":        []any{map[string]any{"name": "c", "context": map[string]any{"cluster": "x", "user": "u"}}},
	})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func conf(cniVersion, kubeconfig string) string {
	return `{"cniVersion":"` + cniVersion + `","name":"underlay","type":"bridge",
		"ipam":{"type":"ipscheduler-ipam","kubeconfig":"` + kubeconfig + `","nodeName":"node-a","dataDir":"` + dataDir + `"}}`
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestVersion(t *testing.T) {
	r := runPlugin(t, map[string]string{"CNI_COMMAND": "VERSION"}, "")
	if r.exit != 0 {
		t.Fatalf("exit %d: %s %s", r.exit, r.stdout, r.stderr)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if !strings.Contains(strings.Join(v.SupportedVersions, ","), want) {
			t.Fatalf("%s missing from %v", want, v.SupportedVersions)
		}
	}
}

func TestAbout(t *testing.T) {
	r := runPlugin(t, nil, "")
	if r.exit != 0 || !strings.Contains(r.stderr, "CNI ipscheduler-ipam plugin") {
		t.Fatalf("exit %d stderr %q", r.exit, r.stderr)
	}
}

func TestAddPrintsTheResult(t *testing.T) {
	kc := apiServer(t)
	r := runPlugin(t, cniEnv("ADD"), conf("0.4.0", kc))
	if r.exit != 0 {
		t.Fatalf("exit %d: %s %s", r.exit, r.stdout, r.stderr)
	}
	jsonEqual(t, r.stdout, `{"cniVersion":"0.4.0","ips":[{"version":"6","address":"fd00::5/128"}],"dns":{}}`)

	r = runPlugin(t, cniEnv("ADD"), conf("1.1.0", kc))
	if r.exit != 0 {
		t.Fatalf("exit %d: %s %s", r.exit, r.stdout, r.stderr)
	}
	jsonEqual(t, r.stdout, `{"cniVersion":"1.1.0","ips":[{"address":"fd00::5/128"}]}`)
}

func TestErrorsCarryCNIVersion(t *testing.T) {
	kc := apiServer(t)
	env := cniEnv("ADD")
	env["CNI_ARGS"] = strings.Replace(env["CNI_ARGS"], "K8S_POD_UID=u-1", "K8S_POD_UID=u-0", 1)
	r := runPlugin(t, env, conf("1.0.0", kc))
	if r.exit != 1 {
		t.Fatalf("exit %d: %s", r.exit, r.stdout)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
		t.Fatal(err)
	}
	if e["cniVersion"] != "1.0.0" || e["code"] != float64(ipam.ErrPodUIDMismatch) || e["msg"] != "pod UID mismatch" ||
		!strings.Contains(e["details"].(string), "K8S_POD_UID u-0") {
		t.Fatalf("error %s", r.stdout)
	}

	// Errors skel raises itself get the cniVersion too.
	env = cniEnv("ADD")
	delete(env, "CNI_IFNAME")
	r = runPlugin(t, env, conf("0.4.0", kc))
	if r.exit != 1 || !strings.Contains(r.stdout, `"cniVersion": "0.4.0"`) || !strings.Contains(r.stdout, `"code": 4`) {
		t.Fatalf("exit %d: %s", r.exit, r.stdout)
	}
}

func TestDelAndGCSucceedWithoutAPI(t *testing.T) {
	for _, command := range []string{"DEL", "DEL", "GC"} {
		r := runPlugin(t, cniEnv(command), conf("1.1.0", "/nonexistent"))
		if r.exit != 0 || r.stdout != "" {
			t.Fatalf("%s: exit %d: %s %s", command, r.exit, r.stdout, r.stderr)
		}
	}
}

func TestStatus(t *testing.T) {
	r := runPlugin(t, cniEnv("STATUS"), conf("1.1.0", apiServer(t)))
	if r.exit != 0 {
		t.Fatalf("exit %d: %s", r.exit, r.stdout)
	}
	r = runPlugin(t, cniEnv("STATUS"), conf("1.1.0", "/nonexistent/kubeconfig"))
	if r.exit != 1 || !strings.Contains(r.stdout, `"code": 50`) || !strings.Contains(r.stdout, "/nonexistent/kubeconfig") {
		t.Fatalf("exit %d: %s", r.exit, r.stdout)
	}
}
