// Package kube is the smallest Kubernetes REST client the plugin needs: GET a
// pod, a NodeIPPool and a namespace, over net/http with the TLS settings and
// credentials of a kubeconfig. No client-go.
package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ipscheduler/ipscheduler/cni/internal/kubeconfig"
)

// DefaultTimeout bounds every request (connect, TLS, response).
const DefaultTimeout = 10 * time.Second

// maxBody caps what a response may hold (a NodeIPPool of many allocations
// stays far below).
const maxBody = 16 << 20

// Pod is the part of a v1 Pod the plugin reads.
type Pod struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName      string `json:"nodeName"`
		SchedulerName string `json:"schedulerName"`
	} `json:"spec"`
}

// Allocation is one entry of NodeIPPool status.allocations (keyed by pod UID).
type Allocation struct {
	IP string `json:"ip"` // "" (or null) in count-only pools; the primary address of a dual-stack pod
	// IPs is every address of the allocation, primary (IP) first, when it
	// holds more than one (a dual-stack pod); nil otherwise: it holds just IP.
	IPs []string `json:"ips,omitempty"`
	// Interface names the pod's further interface (ipscheduler.io/interfaces'
	// key: "net1") the allocation is for; "" for the pod's first interface.
	Interface  string `json:"interface,omitempty"`
	Pod        string `json:"pod"`
	Phase      string `json:"phase"`
	Since      string `json:"since"`
	ReservedBy string `json:"reservedBy"`
}

// NodeIPPool is the part of an ipscheduler.io/v1alpha1 NodeIPPool the plugin reads.
type NodeIPPool struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeName  string   `json:"nodeName"`
		Addresses []string `json:"addresses"`
		// Namespaces reserves the pool for pods of these namespaces: nil when
		// absent (or null), any namespace; empty, none.
		Namespaces []string `json:"namespaces"`
	} `json:"spec"`
	Status struct {
		Allocations map[string]Allocation `json:"allocations"`
	} `json:"status"`
}

// Namespace is the part of a v1 Namespace the plugin reads.
type Namespace struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// APIError is a non-2xx answer of the API server.
type APIError struct {
	StatusCode int
	Reason     string // Status.reason when the body is a metav1.Status
	Message    string // Status.message, or the start of the body
	URL        string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("GET %s: %d %s", e.URL, e.StatusCode, msg)
}

// IsNotFound tells whether err is a 404 from the API server.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}

// IsForbidden tells whether err is a 403 from the API server (the
// identity lacks a permission).
func IsForbidden(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusForbidden
}

// IsTransient tells whether retrying later may help: the server was not
// reached or timed out, or it answered 429 / 5xx.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var e *APIError
	if errors.As(err, &e) {
		return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
	}
	var decodeErr *DecodeError
	if errors.As(err, &decodeErr) {
		return false
	}
	// A certificate the kubeconfig does not accept is configuration, not weather.
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostnameErr) {
		return false
	}
	// Transport level: refused, reset, DNS, TLS handshake timeouts, deadline.
	return true
}

// DecodeError is a 2xx answer whose body is not the expected object.
type DecodeError struct {
	URL string
	Err error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("GET %s: decoding: %v", e.URL, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// Client talks to one API server.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}

// NewClient builds a client from resolved kubeconfig settings. The
// environment's HTTP(S)_PROXY is ignored on purpose: runtimes hand their own
// environment (often with an image-pull proxy) to CNI plugins.
func NewClient(cfg *kubeconfig.Config, timeout time.Duration) (*Client, error) {
	base, err := url.Parse(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", cfg.Server, err)
	}
	if base.Scheme != "https" && base.Scheme != "http" || base.Host == "" {
		return nil, fmt.Errorf("server %q: not an http(s) URL", cfg.Server)
	}
	tlsConf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: cfg.Insecure, //nolint:gosec // the kubeconfig asks for it
		ServerName:         cfg.TLSServerName,
	}
	if len(cfg.CAData) > 0 && !cfg.Insecure {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAData) {
			return nil, fmt.Errorf("certificate authority: no PEM certificate found")
		}
		tlsConf.RootCAs = pool
	}
	if len(cfg.CertData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
	}
	return &Client{
		base:  base,
		http:  &http.Client{Transport: transport, Timeout: timeout},
		token: cfg.Token,
	}, nil
}

// GetPod reads /api/v1/namespaces/<ns>/pods/<name>.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*Pod, error) {
	pod := &Pod{}
	err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), pod)
	if err != nil {
		return nil, err
	}
	return pod, nil
}

// GetNodeIPPool reads /apis/ipscheduler.io/v1alpha1/nodeippools/<name>.
func (c *Client) GetNodeIPPool(ctx context.Context, name string) (*NodeIPPool, error) {
	pool := &NodeIPPool{}
	if err := c.get(ctx, "/apis/ipscheduler.io/v1alpha1/nodeippools/"+url.PathEscape(name), pool); err != nil {
		return nil, err
	}
	return pool, nil
}

// GetNamespace reads /api/v1/namespaces/<name> (the plugin reads only its
// annotations).
func (c *Client) GetNamespace(ctx context.Context, name string) (*Namespace, error) {
	ns := &Namespace{}
	if err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(name), ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func (c *Client) get(ctx context.Context, path string, into any) error {
	// path's segments are escaped by the callers.
	target := strings.TrimRight(c.base.String(), "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ipscheduler-ipam")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &APIError{StatusCode: resp.StatusCode, URL: path}
		var status struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &status) == nil && (status.Message != "" || status.Reason != "") {
			apiErr.Reason, apiErr.Message = status.Reason, status.Message
		} else {
			apiErr.Message = strings.TrimSpace(truncate(string(body), 200))
		}
		return apiErr
	}
	if err := json.Unmarshal(body, into); err != nil {
		return &DecodeError{URL: path, Err: err}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
