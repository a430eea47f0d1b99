package ipam

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

func hostname(name string) func() (string, error) {
	return func() (string, error) { return name, nil }
}

// codeOf returns the CNI error code of err (0 when err is not a *types.Error).
func codeOf(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// failedAsWanted checks err against a table case's expected CNI error. With wantCode 0 err
// must be nil, and it returns false: the caller checks the result. Otherwise err must carry
// wantCode and contain wantMsg ("" matches any message), and it returns true: the case is done.
func failedAsWanted(t *testing.T, err error, wantCode uint, wantMsg string) bool {
	t.Helper()
	if wantCode == 0 {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if codeOf(err) != wantCode || !strings.Contains(fmt.Sprint(err), wantMsg) {
		t.Fatalf("got %v (code %d), want code %d containing %q", err, codeOf(err), wantCode, wantMsg)
	}
	return true
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name     string
		stdin    string
		hostname func() (string, error)
		want     IPAMConf
		wantAnn  map[string]string
		wantCode uint
	}{
		{
			name:     "defaults",
			stdin:    `{"cniVersion":"1.1.0","name":"underlay","type":"bridge","ipam":{"type":"ipscheduler-ipam"}}`,
			hostname: hostname(" Node-A.example\n"),
			want: IPAMConf{Type: "ipscheduler-ipam", Kubeconfig: DefaultKubeconfig, NodeName: "node-a.example",
				SchedulerName: DefaultSchedulerName},
		},
		{
			name: "everything set, runtimeConfig annotations",
			stdin: `{"cniVersion":"0.4.0","name":"underlay","type":"macvlan",
				"capabilities":{"io.kubernetes.cri.pod-annotations":true},
				"ipam":{"type":"ipscheduler-ipam","kubeconfig":"/k","nodeName":"node-b","schedulerName":"mine","timeoutSeconds":2.5,"dataDir":"/d"},
				"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"ipscheduler.io/ip":"10.0.1.12","ipscheduler.io/pool":"p"}}}`,
			hostname: func() (string, error) { t.Fatal("hostname must not be read when nodeName is set"); return "", nil },
			want:     IPAMConf{Type: "ipscheduler-ipam", Kubeconfig: "/k", NodeName: "node-b", SchedulerName: "mine", TimeoutSeconds: 2.5, DataDir: "/d"},
			wantAnn:  map[string]string{"ipscheduler.io/ip": "10.0.1.12", "ipscheduler.io/pool": "p"},
		},
		{
			name:     "not JSON",
			stdin:    `{"ipam":`,
			wantCode: types.ErrDecodingFailure,
		},
		{
			name:     "wrong type",
			stdin:    `{"name":"n","ipam":{"nodeName":5}}`,
			wantCode: types.ErrDecodingFailure,
		},
		{
			name:     "negative timeout",
			stdin:    `{"name":"n","ipam":{"nodeName":"a","timeoutSeconds":-1}}`,
			wantCode: types.ErrInvalidNetworkConfig,
		},
		{
			name:     "relative ledger directory",
			stdin:    `{"name":"n","ipam":{"nodeName":"a","dataDir":"var/lib"}}`,
			wantCode: types.ErrInvalidNetworkConfig,
		},
		{
			name:     "no node name, host name unknown",
			stdin:    `{"name":"n","ipam":{}}`,
			hostname: func() (string, error) { return "", errors.New("uname failed") },
			wantCode: types.ErrInvalidNetworkConfig,
		},
		{
			name:     "no node name, empty host name",
			stdin:    `{"name":"n","ipam":{}}`,
			hostname: hostname(" "),
			wantCode: types.ErrInvalidNetworkConfig,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := LoadConfig([]byte(tt.stdin), tt.hostname)
			if failedAsWanted(t, err, tt.wantCode, "") {
				return
			}
			if conf.IPAM != tt.want {
				t.Fatalf("got  %+v\nwant %+v", conf.IPAM, tt.want)
			}
			if !reflect.DeepEqual(conf.RuntimeConfig.PodAnnotations, tt.wantAnn) {
				t.Fatalf("annotations %v, want %v", conf.RuntimeConfig.PodAnnotations, tt.wantAnn)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	if got := (&IPAMConf{}).Timeout(); got != 10*time.Second {
		t.Fatalf("default %v", got)
	}
	if got := (&IPAMConf{TimeoutSeconds: 0.5}).Timeout(); got != 500*time.Millisecond {
		t.Fatalf("0.5 s: %v", got)
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name     string
		args     string
		want     PodRef
		wantCode uint
		wantMsg  string
	}{
		{
			name: "containerd",
			args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=u-1",
			want: PodRef{Namespace: "default", Name: "web-0", UID: "u-1", InfraContainerID: "abc123"},
		},
		{
			name: "no UID (older runtimes)",
			args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
			want: PodRef{Namespace: "default", Name: "web-0"},
		},
		{
			name: "unknown keys ignored with IgnoreUnknown",
			args: "IgnoreUnknown=true;FOO=bar;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=n;K8S_POD_UID=u",
			want: PodRef{Namespace: "ns", Name: "n", UID: "u"},
		},
		{
			name:     "unknown keys without IgnoreUnknown",
			args:     "FOO=bar;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=n",
			wantCode: types.ErrInvalidEnvironmentVariables, wantMsg: "unknown args",
		},
		{
			name:     "malformed pair",
			args:     "IgnoreUnknown=1;K8S_POD_NAME",
			wantCode: types.ErrInvalidEnvironmentVariables, wantMsg: "invalid pair",
		},
		{
			name:     "empty",
			args:     "",
			wantCode: types.ErrInvalidEnvironmentVariables, wantMsg: "K8S_POD_NAMESPACE and K8S_POD_NAME",
		},
		{
			name:     "no name",
			args:     "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns",
			wantCode: types.ErrInvalidEnvironmentVariables, wantMsg: "lacks K8S_POD_NAME",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if failedAsWanted(t, err, tt.wantCode, tt.wantMsg) {
				return
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLedgerDirOf(t *testing.T) {
	for stdin, want := range map[string]string{
		`{"ipam":{"dataDir":"/x/y"}}`:            "/x/y",
		`{"ipam":{"dataDir":"rel"}}`:             ledger.DefaultDir,
		`{"ipam":{}}`:                            ledger.DefaultDir,
		`not JSON`:                               ledger.DefaultDir,
		`{"ipam":{"dataDir":5}}`:                 ledger.DefaultDir,
		`{"ipam":{"nodeName":5,"dataDir":"/z"}}`: "/z", // the rest of the configuration is not DEL's business
	} {
		if got := LedgerDirOf([]byte(stdin)); got != want {
			t.Errorf("%s: %s, want %s", stdin, got, want)
		}
	}
}
