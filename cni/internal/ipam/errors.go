package ipam

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
)

// Plugin-specific error codes (SPEC: 100+ are the plugin's own).
const (
	ErrPodUIDMismatch      uint = 100 // K8S_POD_UID is not the live pod's UID
	ErrPoolOtherNode       uint = 101 // the pool's spec.nodeName is not this node
	ErrNoAllocation        uint = 102 // status.allocations has no entry for the pod UID
	ErrAllocationMismatch  uint = 103 // the allocation holds another address than the annotation
	ErrPoolNotFound        uint = 104 // the NodeIPPool named by the annotation does not exist
	ErrNotOurs             uint = 105 // no ipscheduler.io/pool and another scheduler
	ErrRuntimeAnnotations  uint = 106 // runtimeConfig annotations differ from the live pod's
	ErrNetworkMismatch     uint = 107 // ipscheduler.io/network's addresses are not ipscheduler.io/ip (ips); a further interface's network is not its ips or has a default route
	ErrMalformedAnnotation uint = 108 // ipscheduler.io/ip, ips, network or interfaces unparsable
	ErrPodNotFound         uint = 109 // the pod named by CNI_ARGS does not exist
	ErrCountOnly           uint = 110 // a count-only pool: there is no address to hand out
	ErrPrevResultMismatch  uint = 111 // CHECK: prevResult does not carry the allocated address
	ErrAPI                 uint = 112 // the API server refused a request (401/403/4xx) or sent garbage
	ErrTenancy             uint = 113 // the pool's spec.namespaces or the pod's (namespace's) pool list refuses the pool
	ErrDelegate            uint = 114 // ipam.delegate could not be run (not on CNI_PATH) or gave no readable answer
)

// ErrStatusUnavailable is the SPEC's STATUS code "the plugin is not
// available (cannot service ADD)".
const ErrStatusUnavailable uint = 50

// The msg of each error the plugin prints (the details say which pod, pool
// and addresses). Every error this package creates takes one of these, with
// the code errorTable pairs it with.
const (
	MsgConvertResult      = "cannot convert the result"
	MsgInvalidArgs        = "invalid CNI_ARGS"
	MsgReadStdin          = "error reading from stdin"
	MsgPipe               = "pipe"
	MsgDecodeConfig       = "failed to decode network configuration"
	MsgDecodePrevResult   = "failed to decode prevResult"
	MsgConvertPrevResult  = "failed to convert prevResult"
	MsgInvalidConfig      = "invalid network configuration"
	MsgTryAgain           = "try again later"
	MsgStatusUnavailable  = "plugin not available: kubeconfig unusable"
	MsgPodUIDMismatch     = "pod UID mismatch"
	MsgPoolOtherNode      = "pool serves another node"
	MsgNoAllocation       = "no allocation for this pod (released?)"
	MsgAllocationMismatch = "annotated address differs from the allocation (forged?)"
	MsgPoolNotFound       = "pool not found"
	MsgNotOurs            = "pod has no " + AnnotationPool + " annotation"
	MsgRuntimeAnnotations = "runtime-supplied annotations differ from the live pod's (forged or stale)"
	MsgNetworkMismatch    = AnnotationNetwork + " does not match " + AnnotationIP
	MsgNetworkMismatchIPs = AnnotationNetwork + " does not match " + AnnotationIPs
	// MsgInterfaceNetworkMismatch and MsgInterfaceDefaultRoute: the entry of
	// ipscheduler.io/interfaces for CNI_IFNAME (a further interface).
	MsgInterfaceNetworkMismatch = "the network of an " + AnnotationInterfaces + " entry does not match its ips"
	MsgInterfaceDefaultRoute    = "a further interface never carries the default route"
	MsgMalformedIP              = "malformed " + AnnotationIP + " annotation"
	MsgMalformedIPs             = "malformed " + AnnotationIPs + " annotation"
	MsgMalformedNetwork         = "malformed " + AnnotationNetwork + " annotation"
	MsgMalformedInterfaces      = "malformed " + AnnotationInterfaces + " annotation"
	MsgPodNotFound              = "pod not found (deleted?)"
	MsgCountOnly                = "count-only pool: no address to hand out"
	MsgPrevResultMismatch       = "prevResult does not carry the allocated address"
	MsgAPI                      = "Kubernetes API request failed"
	MsgTenancy                  = "the pod may not use this NodeIPPool"
	MsgAddressHeld              = "address still held by another sandbox on this node"
	MsgLedger                   = "node ledger unusable"
	MsgDelegate                 = "delegate IPAM plugin failed"
)

// errorTable is every (code, msg) pair the plugin prints, in the order of
// the CNI hand-off contract testdata/cni-contract/errors.json (at the
// repository root) and of the error table in cni/README.md. Name is the
// code's constant: this package's, or package types' for the SPEC's
// well-known codes. contract_test.go checks the contract against this table
// and that every error the package creates uses one of its pairs;
// tests/unit/test_cni_contract.py checks cni/README.md's table against the
// contract.
var errorTable = []struct {
	Name string
	Code uint
	Msg  string
}{
	{"ErrIncompatibleCNIVersion", types.ErrIncompatibleCNIVersion, MsgConvertResult},
	{"ErrInvalidEnvironmentVariables", types.ErrInvalidEnvironmentVariables, MsgInvalidArgs},
	{"ErrIOFailure", types.ErrIOFailure, MsgReadStdin},
	{"ErrIOFailure", types.ErrIOFailure, MsgPipe},
	{"ErrIOFailure", types.ErrIOFailure, MsgLedger},
	{"ErrDecodingFailure", types.ErrDecodingFailure, MsgDecodeConfig},
	{"ErrDecodingFailure", types.ErrDecodingFailure, MsgDecodePrevResult},
	{"ErrDecodingFailure", types.ErrDecodingFailure, MsgConvertPrevResult},
	{"ErrInvalidNetworkConfig", types.ErrInvalidNetworkConfig, MsgInvalidConfig},
	{"ErrTryAgainLater", types.ErrTryAgainLater, MsgTryAgain},
	{"ErrTryAgainLater", types.ErrTryAgainLater, MsgAddressHeld},
	{"ErrStatusUnavailable", ErrStatusUnavailable, MsgStatusUnavailable},
	{"ErrPodUIDMismatch", ErrPodUIDMismatch, MsgPodUIDMismatch},
	{"ErrPoolOtherNode", ErrPoolOtherNode, MsgPoolOtherNode},
	{"ErrNoAllocation", ErrNoAllocation, MsgNoAllocation},
	{"ErrAllocationMismatch", ErrAllocationMismatch, MsgAllocationMismatch},
	{"ErrPoolNotFound", ErrPoolNotFound, MsgPoolNotFound},
	{"ErrNotOurs", ErrNotOurs, MsgNotOurs},
	{"ErrRuntimeAnnotations", ErrRuntimeAnnotations, MsgRuntimeAnnotations},
	{"ErrNetworkMismatch", ErrNetworkMismatch, MsgNetworkMismatch},
	{"ErrNetworkMismatch", ErrNetworkMismatch, MsgNetworkMismatchIPs},
	{"ErrNetworkMismatch", ErrNetworkMismatch, MsgInterfaceNetworkMismatch},
	{"ErrNetworkMismatch", ErrNetworkMismatch, MsgInterfaceDefaultRoute},
	{"ErrMalformedAnnotation", ErrMalformedAnnotation, MsgMalformedIP},
	{"ErrMalformedAnnotation", ErrMalformedAnnotation, MsgMalformedIPs},
	{"ErrMalformedAnnotation", ErrMalformedAnnotation, MsgMalformedNetwork},
	{"ErrMalformedAnnotation", ErrMalformedAnnotation, MsgMalformedInterfaces},
	{"ErrPodNotFound", ErrPodNotFound, MsgPodNotFound},
	{"ErrCountOnly", ErrCountOnly, MsgCountOnly},
	{"ErrPrevResultMismatch", ErrPrevResultMismatch, MsgPrevResultMismatch},
	{"ErrAPI", ErrAPI, MsgAPI},
	{"ErrTenancy", ErrTenancy, MsgTenancy},
	{"ErrDelegate", ErrDelegate, MsgDelegate},
}

// defaultErrorOutputCNIVersion is used when stdin has no readable cniVersion.
const defaultErrorOutputCNIVersion = "1.1.0"

func newErr(code uint, msg, format string, args ...any) *types.Error {
	return types.NewError(code, msg, fmt.Sprintf(format, args...))
}

// ErrorOutput is the SPEC's error object: cniVersion, code, msg, details.
// (types.Error, which skel prints, has no cniVersion.)
type ErrorOutput struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

// WriteError prints e as the SPEC's error object, with the network
// configuration's cniVersion (1.1.0 when it cannot be read).
func WriteError(w io.Writer, e *types.Error, stdinData []byte) error {
	out := ErrorOutput{CNIVersion: cniVersionOf(stdinData), Code: e.Code, Msg: e.Msg, Details: e.Details}
	b, err := json.MarshalIndent(out, "", "    ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func cniVersionOf(stdinData []byte) string {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if json.Unmarshal(stdinData, &conf) == nil && conf.CNIVersion != "" {
		return conf.CNIVersion
	}
	return defaultErrorOutputCNIVersion
}
