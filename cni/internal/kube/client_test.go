package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ipscheduler/ipscheduler/cni/internal/kubeconfig"
)

const podJSON = `{"kind":"Pod","metadata":{"name":"web-0","namespace":"default","uid":"u-1",
"annotations":{"ipscheduler.io/ip":"10.0.1.12","ipscheduler.io/pool":"node-a"}},
"spec":{"nodeName":"node-a","schedulerName":"ip-scheduler"}}`

const poolJSON = `{"kind":"NodeIPPool","metadata":{"name":"node-a"},
"spec":{"nodeName":"node-a","addresses":["10.0.1.0/28"],"namespaces":["team-b","team-a"]},
"status":{"allocations":{"u-1":{"ip":"10.0.1.12","pod":"default/web-0","phase":"Bound","since":"2024-01-01T00:00:00Z"},
"u-2":{"ip":null,"pod":"default/x","phase":"Reserved","since":"2024-01-01T00:00:00Z"},
"u-3":{"ip":"10.0.2.12","ips":["10.0.2.12","fd00::c"],"pod":"default/y","phase":"Bound","since":"2024-01-01T00:00:00Z"}}}}`

const namespaceJSON = `{"kind":"Namespace","metadata":{"name":"team-a","uid":"n-1",
"annotations":{"ipscheduler.io/default-pools":"fast, general","other":"x"},"labels":{"a":"b"}},
"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`

func apiHandler(t *testing.T, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"Unauthorized","message":"Unauthorized"}`))
			return
		}
		path := strings.TrimPrefix(r.URL.EscapedPath(), "/prefix")
		switch path {
		case "/api/v1/namespaces/default/pods/web-0":
			_, _ = w.Write([]byte(podJSON))
		case "/apis/ipscheduler.io/v1alpha1/nodeippools/node-a":
			_, _ = w.Write([]byte(poolJSON))
		case "/apis/ipscheduler.io/v1alpha1/nodeippools/any-namespace":
			_, _ = w.Write([]byte(`{"metadata":{"name":"any-namespace"},"spec":{"nodeName":"node-a","namespaces":null}}`))
		case "/apis/ipscheduler.io/v1alpha1/nodeippools/no-namespace":
			_, _ = w.Write([]byte(`{"metadata":{"name":"no-namespace"},"spec":{"nodeName":"node-a","namespaces":[]}}`))
		case "/api/v1/namespaces/team-a":
			_, _ = w.Write([]byte(namespaceJSON))
		case "/api/v1/namespaces/a%2Fb":
			_, _ = w.Write([]byte(namespaceJSON))
		case "/api/v1/namespaces/locked":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"Forbidden","message":"namespaces \"locked\" is forbidden: User \"ipscheduler-ipam\" cannot get resource \"namespaces\""}`))
		case "/api/v1/namespaces/default/pods/a%2Fb":
			_, _ = w.Write([]byte(podJSON))
		case "/api/v1/namespaces/default/pods/garbage":
			_, _ = w.Write([]byte(`{"metadata":`))
		case "/api/v1/namespaces/default/pods/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/api/v1/namespaces/default/pods/broken":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("etcd is sad"))
		case "/api/v1/namespaces/default/pods/forbidden":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"Forbidden","message":"pods \"forbidden\" is forbidden"}`))
		case "/api/v1/namespaces/default/pods/slow":
			time.Sleep(500 * time.Millisecond)
			_, _ = w.Write([]byte(podJSON))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"NotFound","message":"not found"}`))
		}
	})
}

func caPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// tlsClient is a Client of the test API server over TLS (its CA) with the token it expects;
// the server stops at the end of the test.
func tlsClient(t *testing.T) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(apiHandler(t, "s3cr3t"))
	t.Cleanup(srv.Close)
	c, err := NewClient(&kubeconfig.Config{Server: srv.URL, CAData: caPEM(srv), Token: "s3cr3t"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientTLSWithCAAndToken(t *testing.T) {
	c := tlsClient(t)
	ctx := context.Background()
	pod, err := c.GetPod(ctx, "default", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Metadata.UID != "u-1" || pod.Metadata.Annotations["ipscheduler.io/ip"] != "10.0.1.12" ||
		pod.Spec.NodeName != "node-a" || pod.Spec.SchedulerName != "ip-scheduler" {
		t.Fatalf("pod %+v", pod)
	}
	pool, err := c.GetNodeIPPool(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if pool.Spec.NodeName != "node-a" || pool.Status.Allocations["u-1"].IP != "10.0.1.12" ||
		pool.Status.Allocations["u-2"].IP != "" || pool.Status.Allocations["u-1"].Phase != "Bound" ||
		pool.Status.Allocations["u-1"].IPs != nil ||
		!reflect.DeepEqual(pool.Status.Allocations["u-3"].IPs, []string{"10.0.2.12", "fd00::c"}) ||
		!reflect.DeepEqual(pool.Spec.Namespaces, []string{"team-b", "team-a"}) {
		t.Fatalf("pool %+v", pool)
	}
	// spec.namespaces null (or absent): nil, any namespace; [] : empty, none.
	if pool, err = c.GetNodeIPPool(ctx, "any-namespace"); err != nil || pool.Spec.Namespaces != nil {
		t.Fatalf("pool %+v, %v: want nil namespaces", pool, err)
	}
	if pool, err = c.GetNodeIPPool(ctx, "no-namespace"); err != nil || pool.Spec.Namespaces == nil || len(pool.Spec.Namespaces) != 0 {
		t.Fatalf("pool %+v, %v: want empty, non-nil namespaces", pool, err)
	}
	// Names are escaped as one path segment.
	if _, err := c.GetPod(ctx, "default", "a/b"); err != nil {
		t.Fatal(err)
	}
}

func TestClientGetNamespace(t *testing.T) {
	c := tlsClient(t)
	ctx := context.Background()
	ns, err := c.GetNamespace(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Metadata.Name != "team-a" ||
		!reflect.DeepEqual(ns.Metadata.Annotations, map[string]string{"ipscheduler.io/default-pools": "fast, general", "other": "x"}) {
		t.Fatalf("namespace %+v", ns)
	}
	// The name is escaped as one path segment.
	if _, err := c.GetNamespace(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetNamespace(ctx, "gone")
	if !IsNotFound(err) || IsForbidden(err) || IsTransient(err) {
		t.Fatalf("gone: %v: want a 404", err)
	}
	_, err = c.GetNamespace(ctx, "locked")
	if !IsForbidden(err) || IsNotFound(err) || IsTransient(err) || !strings.Contains(err.Error(), `cannot get resource "namespaces"`) {
		t.Fatalf("locked: %v: want a 403 with the server's message", err)
	}
}

func TestClientErrors(t *testing.T) {
	srv := httptest.NewTLSServer(apiHandler(t, "s3cr3t"))
	defer srv.Close()
	good := &kubeconfig.Config{Server: srv.URL, CAData: caPEM(srv), Token: "s3cr3t"}
	client := func(cfg *kubeconfig.Config, timeout time.Duration) *Client {
		c, err := NewClient(cfg, timeout)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name          string
		c             *Client
		pod           string
		notFound      bool
		transient     bool
		errorContains string
	}{
		{"404", client(good, time.Second), "nope", true, false, "not found"},
		{"429", client(good, time.Second), "busy", false, true, "429"},
		{"500", client(good, time.Second), "broken", false, true, "etcd is sad"},
		{"403", client(good, time.Second), "forbidden", false, false, "is forbidden"},
		{"undecodable", client(good, time.Second), "garbage", false, false, "decoding"},
		{"wrong token", client(&kubeconfig.Config{Server: srv.URL, CAData: caPEM(srv), Token: "x"}, time.Second), "web-0", false, false, "401"},
		{"unknown CA", client(&kubeconfig.Config{Server: srv.URL, Token: "s3cr3t"}, time.Second), "web-0", false, false, "certificate"},
		{"refused", client(&kubeconfig.Config{Server: closedURL}, time.Second), "web-0", false, true, "refused"},
		{"timeout", client(good, 100*time.Millisecond), "slow", false, true, "Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.GetPod(context.Background(), "default", tt.pod)
			if err == nil {
				t.Fatal("want an error")
			}
			if IsNotFound(err) != tt.notFound || IsTransient(err) != tt.transient {
				t.Fatalf("%v: IsNotFound=%v IsTransient=%v", err, IsNotFound(err), IsTransient(err))
			}
			if !strings.Contains(err.Error(), tt.errorContains) {
				t.Fatalf("%v does not contain %q", err, tt.errorContains)
			}
		})
	}
}

func TestClientInsecureAndPathPrefix(t *testing.T) {
	srv := httptest.NewTLSServer(apiHandler(t, ""))
	defer srv.Close()
	c, err := NewClient(&kubeconfig.Config{Server: srv.URL + "/prefix/", Insecure: true}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPod(context.Background(), "default", "web-0"); err != nil {
		t.Fatal(err)
	}
}

func TestClientPlainHTTP(t *testing.T) {
	srv := httptest.NewServer(apiHandler(t, ""))
	defer srv.Close()
	c, err := NewClient(&kubeconfig.Config{Server: srv.URL}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetNodeIPPool(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
}

func TestClientCertificateAuth(t *testing.T) {
	certPEM, keyPEM, cert := selfSigned(t, "ipscheduler-ipam")
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "ipscheduler-ipam" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(podJSON))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	srv.StartTLS()
	defer srv.Close()

	c, err := NewClient(&kubeconfig.Config{Server: srv.URL, CAData: caPEM(srv), CertData: certPEM, KeyData: keyPEM}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPod(context.Background(), "default", "web-0"); err != nil {
		t.Fatal(err)
	}
	// Without the certificate the handshake fails.
	c, _ = NewClient(&kubeconfig.Config{Server: srv.URL, CAData: caPEM(srv)}, time.Second)
	if _, err := c.GetPod(context.Background(), "default", "web-0"); err == nil {
		t.Fatal("want a TLS error without a client certificate")
	}
}

func TestNewClientErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  kubeconfig.Config
	}{
		{"not a URL", kubeconfig.Config{Server: "h:6443"}},
		{"no PEM in CA", kubeconfig.Config{Server: "https://h", CAData: []byte("nope")}},
		{"bad key pair", kubeconfig.Config{Server: "https://h", CertData: []byte("x"), KeyData: []byte("y")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewClient(&tt.cfg, time.Second); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), cert
}
