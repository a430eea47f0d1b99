package ipam

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

// Annotation keys written by the scheduler.
const (
	AnnotationPool    = "ipscheduler.io/pool"
	AnnotationIP      = "ipscheduler.io/ip"
	AnnotationNetwork = "ipscheduler.io/network"
	// AnnotationIPs is every address of a dual-stack pod's interface,
	// comma-separated, AnnotationIP first (the kubelet orders status.podIPs by its node IP's family); single-stack
	// pods have none.
	AnnotationIPs = "ipscheduler.io/ips"
	// AnnotationInterfaces is a pod's further underlay interfaces (net1,
	// net2, ... attached by Multus), each from its own NodeIPPool: a compact
	// JSON object, interface name -> {"pool", "ips", "network"}. Only pods
	// with further interfaces have it; the annotations above are always the
	// pod's first interface's.
	AnnotationInterfaces = "ipscheduler.io/interfaces"

	// AnnotationPools (on the pod) and AnnotationDefaultPools (on its
	// namespace, for pods without AnnotationPools) name the NodeIPPools the
	// pod may use: a comma-separated list of pool names.
	AnnotationPools        = "ipscheduler.io/pools"
	AnnotationDefaultPools = "ipscheduler.io/default-pools"

	// CapabilityPodAnnotations is the runtimeConfig key (and capability)
	// under which containerd and CRI-O pass the pod's annotations.
	CapabilityPodAnnotations = "io.kubernetes.cri.pod-annotations"
)

// Defaults of the ipam section.
const (
	DefaultKubeconfig    = "/etc/cni/net.d/ipscheduler-ipam.kubeconfig"
	DefaultSchedulerName = "ip-scheduler"
	DefaultTimeout       = 10 * time.Second
)

// IPAMConf is the "ipam" section of the network configuration.
type IPAMConf struct {
	Type string `json:"type"`
	// Kubeconfig is the path of the kubeconfig the plugin uses to reach the API.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// NodeName is the Kubernetes name of this node (default: the host name,
	// lower-cased, as the kubelet does).
	NodeName string `json:"nodeName,omitempty"`
	// SchedulerName is the spec.schedulerName of pods the scheduler serves:
	// such a pod without ipscheduler.io/pool gets "try again later" instead
	// of "not ours".
	SchedulerName string `json:"schedulerName,omitempty"`
	// TimeoutSeconds bounds each API request (default 10).
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
	// DataDir is the node-local ledger's directory (default
	// /var/lib/cni/ipscheduler-ipam): which sandbox holds which address.
	DataDir string `json:"dataDir,omitempty"`
	// Delegate is the IPAM configuration of another plugin (host-local, …)
	// that serves the pods that are not ours (no ipscheduler.io/pool and
	// another scheduler: 105 without it); nil: none.
	Delegate *Delegate `json:"delegate,omitempty"`
}

// LedgerDir is DataDir or its default.
func (c *IPAMConf) LedgerDir() string {
	if c.DataDir == "" {
		return ledger.DefaultDir
	}
	return c.DataDir
}

// Timeout is the per-request timeout.
func (c *IPAMConf) Timeout() time.Duration {
	if c.TimeoutSeconds <= 0 {
		return DefaultTimeout
	}
	return time.Duration(c.TimeoutSeconds * float64(time.Second))
}

// RuntimeConfig is the part of runtimeConfig the plugin reads.
type RuntimeConfig struct {
	// PodAnnotations is nil when the runtime did not pass the capability.
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
}

// NetConf is the network configuration handed on stdin.
type NetConf struct {
	types.PluginConf
	IPAM          IPAMConf      `json:"ipam"`
	RuntimeConfig RuntimeConfig `json:"runtimeConfig"`
}

// LoadConfig decodes stdin and fills in defaults; hostname is os.Hostname in
// production (injectable for tests). Errors are *types.Error (6 or 7).
func LoadConfig(stdin []byte, hostname func() (string, error)) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, newErr(types.ErrDecodingFailure, MsgDecodeConfig, "%v", err)
	}
	if conf.IPAM.Kubeconfig == "" {
		conf.IPAM.Kubeconfig = DefaultKubeconfig
	}
	if conf.IPAM.SchedulerName == "" {
		conf.IPAM.SchedulerName = DefaultSchedulerName
	}
	if conf.IPAM.DataDir != "" && !filepath.IsAbs(conf.IPAM.DataDir) {
		return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.dataDir %q is not an absolute path", conf.IPAM.DataDir)
	}
	if conf.IPAM.Delegate != nil {
		if err := conf.IPAM.Delegate.validate(conf.IPAM.Type); err != nil {
			return nil, err
		}
	}
	if conf.IPAM.TimeoutSeconds < 0 {
		return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.timeoutSeconds must not be negative")
	}
	if conf.IPAM.NodeName == "" {
		if hostname == nil {
			hostname = os.Hostname
		}
		h, err := hostname()
		if err != nil {
			return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.nodeName is unset and the host name is unknown: %v", err)
		}
		conf.IPAM.NodeName = strings.ToLower(strings.TrimSpace(h))
	}
	if conf.IPAM.NodeName == "" {
		return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.nodeName is unset and the host name is empty")
	}
	return conf, nil
}

// LedgerDirOf reads only ipam.dataDir from a network configuration (DEL and
// GC need nothing else): the default when absent or unreadable.
func LedgerDirOf(stdin []byte) string {
	var conf struct {
		IPAM struct {
			DataDir string `json:"dataDir"`
		} `json:"ipam"`
	}
	if json.Unmarshal(stdin, &conf) != nil || !filepath.IsAbs(conf.IPAM.DataDir) {
		return ledger.DefaultDir
	}
	return conf.IPAM.DataDir
}

// K8sArgs are the CNI_ARGS keys containerd and CRI-O set.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive,stylecheck // the wire names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive,stylecheck
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive,stylecheck
	K8S_POD_UID                types.UnmarshallableString //nolint:revive,stylecheck
}

// PodRef identifies the pod a CNI call is for.
type PodRef struct {
	Namespace        string
	Name             string
	UID              string // "" when the runtime does not pass K8S_POD_UID
	InfraContainerID string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// ParseArgs reads CNI_ARGS. K8S_POD_NAMESPACE and K8S_POD_NAME are required;
// unknown keys need IgnoreUnknown=1 (as types.LoadArgs wants). Errors are
// *types.Error code 4.
func ParseArgs(cniArgs string) (PodRef, error) {
	args := K8sArgs{}
	if err := types.LoadArgs(cniArgs, &args); err != nil {
		return PodRef{}, newErr(types.ErrInvalidEnvironmentVariables, MsgInvalidArgs, "%v", err)
	}
	ref := PodRef{
		Namespace:        string(args.K8S_POD_NAMESPACE),
		Name:             string(args.K8S_POD_NAME),
		UID:              string(args.K8S_POD_UID),
		InfraContainerID: string(args.K8S_POD_INFRA_CONTAINER_ID),
	}
	var missing []string
	if ref.Namespace == "" {
		missing = append(missing, "K8S_POD_NAMESPACE")
	}
	if ref.Name == "" {
		missing = append(missing, "K8S_POD_NAME")
	}
	if len(missing) > 0 {
		return PodRef{}, newErr(types.ErrInvalidEnvironmentVariables, MsgInvalidArgs, "CNI_ARGS lacks %s (is the runtime a Kubernetes CRI?)", strings.Join(missing, " and "))
	}
	return ref, nil
}
