package kubeconfig

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var (
	caPEM   = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
	certPEM = "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n"
	keyPEM  = "-----BEGIN EC PRIVATE KEY-----\nKEY\n-----END EC PRIVATE KEY-----\n"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// What hack/devcluster.py writes (JSON is valid YAML).
const devclusterJSON = `{
  "apiVersion": "v1",
  "kind": "Config",
  "clusters": [
    {
      "name": "devcluster",
      "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": true}
    }
  ],
  "users": [{"name": "admin", "user": {"token": "s3cr3t"}}],
  "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "admin"}}],
  "current-context": "devcluster"
}
`

// kubectl / kind style: sequences at the parent key's indentation, keys in
// any order, preferences: {}.
func kubectlYAML() string {
	return `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: ` + b64(caPEM) + `
    server: https://kind-control-plane:6443
  name: kind-kind
- cluster:
    server: https://other:6443
  name: other
contexts:
- context:
    cluster: kind-kind
    user: kind-kind
  name: kind-kind
- context:
    cluster: other
    user: other
  name: other
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate-data: ` + b64(certPEM) + `
    client-key-data: ` + b64(keyPEM) + `
- name: other
  user:
    token: nope
`
}

// What the DaemonSet writes: indented sequences, quotes, comments, ---.
func daemonSetYAML() string {
	return `# Written by the ipscheduler-ipam installer; do not edit.
---
apiVersion: v1
kind: Config
clusters:
  - name: "local"   # the in-cluster API
    cluster:
      server: 'https://10.96.0.1:443'
      certificate-authority: ca.crt
      tls-server-name: kubernetes.default.svc
users:
  - name: ipscheduler-ipam
    user:
      tokenFile: "token"
contexts:
  - name: ipscheduler-ipam
    context:
      cluster: local
      user: ipscheduler-ipam
      namespace: kube-system
current-context: "ipscheduler-ipam"
`
}

func TestParse(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ca.crt"), caPEM)
	mustWrite(t, filepath.Join(dir, "token"), "  file-token\n")
	mustWrite(t, filepath.Join(dir, "client.crt"), certPEM)
	mustWrite(t, filepath.Join(dir, "client.key"), keyPEM)

	tests := []struct {
		name string
		doc  string
		want *Config
	}{
		{
			name: "devcluster JSON",
			doc:  devclusterJSON,
			want: &Config{Server: "https://127.0.0.1:6443", Insecure: true, Token: "s3cr3t"},
		},
		{
			name: "kubectl YAML with inline data",
			doc:  kubectlYAML(),
			want: &Config{
				Server: "https://kind-control-plane:6443", CAData: []byte(caPEM),
				CertData: []byte(certPEM), KeyData: []byte(keyPEM),
			},
		},
		{
			name: "DaemonSet YAML with files relative to the kubeconfig",
			doc:  daemonSetYAML(),
			want: &Config{
				Server: "https://10.96.0.1:443", CAData: []byte(caPEM), TLSServerName: "kubernetes.default.svc",
				Token: "file-token",
			},
		},
		{
			name: "client cert files and quoted insecure flag",
			doc: `current-context: c
contexts:
- name: c
  context:
    cluster: x
    user: u
clusters:
- name: x
  cluster:
    server: http://127.0.0.1:8080/
    insecure-skip-tls-verify: "true"
users:
- name: u
  user:
    client-certificate: client.crt
    client-key: ` + filepath.Join(dir, "client.key") + `
`,
			want: &Config{Server: "http://127.0.0.1:8080", Insecure: true, CertData: []byte(certPEM), KeyData: []byte(keyPEM)},
		},
		{
			name: "YAML flow collections, anchors, block scalars, BOM and CRLF",
			doc: "\ufeff" + strings.ReplaceAll(`current-context: c
contexts:
- {name: c, context: {cluster: x, user: u}}
clusters:
- name: x
  cluster: &cl
    server: "https://h"
    certificate-authority-data: |
      `+b64(caPEM)[:20]+`
      `+b64(caPEM)[20:]+`
- name: y
  cluster: *cl
users:
- name: u
  user:
    token: >-
      12345
`, "\n", "\r\n"),
			want: &Config{Server: "https://h", CAData: []byte(caPEM), Token: "12345"},
		},
		{
			name: "no current-context but one context; no user",
			doc:  `{"clusters":[{"name":"x","cluster":{"server":"https://h"}}],"contexts":[{"name":"c","context":{"cluster":"x"}}]}`,
			want: &Config{Server: "https://h"},
		},
		{
			name: "YAML: no current-context but one context",
			doc:  "clusters:\n- name: x\n  cluster:\n    server: https://h\ncontexts:\n- name: c\n  context:\n    cluster: x\n",
			want: &Config{Server: "https://h"},
		},
		{
			name: "token and tokenFile: the file wins",
			doc: `{"current-context":"c","clusters":[{"name":"x","cluster":{"server":"https://h"}}],
			"users":[{"name":"u","user":{"token":"inline","tokenFile":"token"}}],
			"contexts":[{"name":"c","context":{"cluster":"x","user":"u"}}]}`,
			want: &Config{Server: "https://h", Token: "file-token"},
		},
		{
			name: "YAML token and tokenFile: the file wins",
			doc: `current-context: c
clusters:
- name: x
  cluster:
    server: https://h
users:
- name: u
  user:
    token: inline
    tokenFile: token
contexts:
- name: c
  context:
    cluster: x
    user: u
`,
			want: &Config{Server: "https://h", Token: "file-token"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.doc), dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadResolvesRelativeToFile(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ca.crt"), caPEM)
	mustWrite(t, filepath.Join(dir, "token"), "file-token")
	path := filepath.Join(dir, "ipscheduler-ipam.kubeconfig")
	mustWrite(t, path, daemonSetYAML())
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != "file-token" || string(got.CAData) != caPEM {
		t.Fatalf("got %+v", got)
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !os.IsNotExist(err) {
		t.Fatalf("missing file: got %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	base := func(user string) string {
		return `{"current-context":"c","clusters":[{"name":"x","cluster":{"server":"https://h"}}],
		"users":[{"name":"u","user":` + user + `}],"contexts":[{"name":"c","context":{"cluster":"x","user":"u"}}]}`
	}
	tests := []struct {
		name, doc, wantErr string
	}{
		{"empty", "  \n", "empty kubeconfig"},
		{"not a mapping", "- a\n- b\n", "cannot unmarshal array"},
		{"bad JSON", `{"clusters": [}`, "kubeconfig JSON"},
		{"unknown current-context", `{"current-context":"nope","contexts":[{"name":"c","context":{"cluster":"x"}}]}`, `context "nope" not found`},
		{"two contexts, none current", `{"contexts":[{"name":"a"},{"name":"b"}]}`, "no current-context"},
		{"missing cluster", `{"current-context":"c","contexts":[{"name":"c","context":{"cluster":"x"}}]}`, `cluster "x"`},
		{"missing user", `{"current-context":"c","clusters":[{"name":"x","cluster":{"server":"https://h"}}],"contexts":[{"name":"c","context":{"cluster":"x","user":"u"}}]}`, `user "u"`},
		{"no server", `{"current-context":"c","clusters":[{"name":"x","cluster":{}}],"contexts":[{"name":"c","context":{"cluster":"x"}}]}`, "no server"},
		{"server not http", `{"current-context":"c","clusters":[{"name":"x","cluster":{"server":"h:6443"}}],"contexts":[{"name":"c","context":{"cluster":"x"}}]}`, "not an http(s) URL"},
		{"exec user", base(`{"exec":{"command":"aws"}}`), "exec credential plugins are not supported"},
		{"auth-provider user", base(`{"auth-provider":{"name":"gcp"}}`), "auth-provider is not supported"},
		{"YAML exec user", "current-context: c\nclusters:\n- name: x\n  cluster:\n    server: https://h\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n      args: [eks, get-token]\ncontexts:\n- name: c\n  context:\n    cluster: x\n    user: u\n", "exec credential plugins are not supported"},
		{"YAML auth-provider user", "current-context: c\nclusters:\n- name: x\n  cluster:\n    server: https://h\nusers:\n- name: u\n  user:\n    auth-provider:\n      name: gcp\ncontexts:\n- name: c\n  context:\n    cluster: x\n    user: u\n", "auth-provider is not supported"},
		{"bad base64", base(`{"client-certificate-data":"!!","client-key-data":"eA=="}`), "client-certificate-data"},
		{"cert without key", base(`{"client-certificate-data":"eA=="}`), "go together"},
		{"missing token file", base(`{"tokenFile":"nope"}`), "tokenFile"},
		{"bad boolean", `{"current-context":"c","clusters":[{"name":"x","cluster":{"server":"https://h","insecure-skip-tls-verify":"maybe"}}],"contexts":[{"name":"c","context":{"cluster":"x"}}]}`, "not a boolean"},
		{"YAML tab indentation", "a:\n\tb: c\n", "kubeconfig YAML: error converting YAML to JSON: yaml: line 2"},
		{"YAML bad indentation", "a:\n    b: c\n  d: e\n", "kubeconfig YAML: error converting YAML to JSON: yaml: line 2"},
		{"YAML unterminated quote", "a: \"b\n", "kubeconfig YAML: error converting YAML to JSON: yaml: line 2"},
		{"YAML unterminated flow", "current-context: c\nclusters: [{name: x\n", "kubeconfig YAML: error converting YAML to JSON"},
		{"YAML wrong shape", "clusters: [x]\n", "kubeconfig YAML: error unmarshaling JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
