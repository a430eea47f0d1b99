// Package kubeconfig reads the part of a kubeconfig file a node-side plugin
// needs to reach the Kubernetes API: the current context's cluster (server,
// CA, insecure-skip-tls-verify, tls-server-name) and user (token, tokenFile,
// client certificate and key, inline or as files).
//
// Files may be JSON (what our dev cluster writes) or YAML (what kubectl, kind
// and the DaemonSet write), decoded with sigs.k8s.io/yaml like client-go
// does. exec and auth-provider users are not supported.
package kubeconfig

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the resolved connection information of the current context.
type Config struct {
	Server        string // https://host:port[/path]
	CAData        []byte // PEM; empty: system roots
	Insecure      bool   // insecure-skip-tls-verify
	TLSServerName string // tls-server-name
	Token         string // bearer token (from token or tokenFile)
	CertData      []byte // PEM client certificate
	KeyData       []byte // PEM client key
}

// flexBool accepts true/false as booleans or as strings ("true" quoted in
// YAML, which stays a string).
type flexBool bool

func (b *flexBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		*b = false
	case bool:
		*b = flexBool(x)
	case string:
		switch strings.ToLower(x) {
		case "true", "yes", "on":
			*b = true
		case "false", "no", "off", "":
			*b = false
		default:
			return fmt.Errorf("not a boolean: %q", x)
		}
	default:
		return fmt.Errorf("not a boolean: %s", data)
	}
	return nil
}

type rawCluster struct {
	Server                   string   `json:"server"`
	CertificateAuthority     string   `json:"certificate-authority"`
	CertificateAuthorityData string   `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    flexBool `json:"insecure-skip-tls-verify"`
	TLSServerName            string   `json:"tls-server-name"`
}

type rawUser struct {
	Token                 string          `json:"token"`
	TokenFile             string          `json:"tokenFile"`
	ClientCertificate     string          `json:"client-certificate"`
	ClientCertificateData string          `json:"client-certificate-data"`
	ClientKey             string          `json:"client-key"`
	ClientKeyData         string          `json:"client-key-data"`
	Exec                  json.RawMessage `json:"exec"`
	AuthProvider          json.RawMessage `json:"auth-provider"`
}

type rawContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

type rawConfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string     `json:"name"`
		Cluster rawCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string  `json:"name"`
		User rawUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string     `json:"name"`
		Context rawContext `json:"context"`
	} `json:"contexts"`
}

// Load reads and resolves the kubeconfig at path. Relative file references
// inside it (certificate-authority, client-certificate, client-key,
// tokenFile) are resolved against the kubeconfig's directory, as kubectl
// does.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse resolves a kubeconfig document (JSON or YAML); dir is the base for
// relative file references.
func Parse(data []byte, dir string) (*Config, error) {
	raw, err := decode(data)
	if err != nil {
		return nil, err
	}
	ctxName := raw.CurrentContext
	if ctxName == "" {
		if len(raw.Contexts) != 1 {
			return nil, fmt.Errorf("no current-context (and not exactly one context)")
		}
		ctxName = raw.Contexts[0].Name
	}
	var ctx *rawContext
	for i := range raw.Contexts {
		if raw.Contexts[i].Name == ctxName {
			ctx = &raw.Contexts[i].Context
			break
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("context %q not found", ctxName)
	}
	var cluster *rawCluster
	for i := range raw.Clusters {
		if raw.Clusters[i].Name == ctx.Cluster {
			cluster = &raw.Clusters[i].Cluster
			break
		}
	}
	if cluster == nil {
		return nil, fmt.Errorf("cluster %q (of context %q) not found", ctx.Cluster, ctxName)
	}
	var user rawUser
	if ctx.User != "" {
		found := false
		for i := range raw.Users {
			if raw.Users[i].Name == ctx.User {
				user = raw.Users[i].User
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("user %q (of context %q) not found", ctx.User, ctxName)
		}
	}

	out := &Config{
		Server:        strings.TrimRight(cluster.Server, "/"),
		Insecure:      bool(cluster.InsecureSkipTLSVerify),
		TLSServerName: cluster.TLSServerName,
	}
	if out.Server == "" {
		return nil, fmt.Errorf("cluster %q has no server", ctx.Cluster)
	}
	if !strings.HasPrefix(out.Server, "https://") && !strings.HasPrefix(out.Server, "http://") {
		return nil, fmt.Errorf("cluster %q: server %q is not an http(s) URL", ctx.Cluster, out.Server)
	}
	if out.CAData, err = dataOrFile(cluster.CertificateAuthorityData, cluster.CertificateAuthority, dir, "certificate-authority"); err != nil {
		return nil, err
	}
	if len(user.Exec) > 0 && string(user.Exec) != "null" {
		return nil, fmt.Errorf("user %q: exec credential plugins are not supported", ctx.User)
	}
	if len(user.AuthProvider) > 0 && string(user.AuthProvider) != "null" {
		return nil, fmt.Errorf("user %q: auth-provider is not supported", ctx.User)
	}
	out.Token = strings.TrimSpace(user.Token)
	if user.TokenFile != "" {
		b, err := os.ReadFile(resolve(dir, user.TokenFile))
		if err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
		out.Token = strings.TrimSpace(string(b))
	}
	if out.CertData, err = dataOrFile(user.ClientCertificateData, user.ClientCertificate, dir, "client-certificate"); err != nil {
		return nil, err
	}
	if out.KeyData, err = dataOrFile(user.ClientKeyData, user.ClientKey, dir, "client-key"); err != nil {
		return nil, err
	}
	if (len(out.CertData) == 0) != (len(out.KeyData) == 0) {
		return nil, fmt.Errorf("user %q: client-certificate and client-key go together", ctx.User)
	}
	return out, nil
}

func decode(data []byte) (*rawConfig, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("empty kubeconfig")
	}
	raw := &rawConfig{}
	if trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, raw); err != nil {
			return nil, fmt.Errorf("kubeconfig JSON: %w", err)
		}
		return raw, nil
	}
	// sigs.k8s.io/yaml converts the YAML to JSON (scalars follow the target
	// field's type, so a numeric-looking token stays a string) and decodes
	// that with encoding/json.
	if err := yaml.Unmarshal(data, raw); err != nil {
		return nil, fmt.Errorf("kubeconfig YAML: %w", err)
	}
	return raw, nil
}

func dataOrFile(data, file, dir, what string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(data), ""))
		if err != nil {
			return nil, fmt.Errorf("%s-data: %w", what, err)
		}
		return b, nil
	}
	if file != "" {
		b, err := os.ReadFile(resolve(dir, file))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return b, nil
	}
	return nil, nil
}

func resolve(dir, path string) string {
	if filepath.IsAbs(path) || dir == "" {
		return path
	}
	return filepath.Join(dir, path)
}
