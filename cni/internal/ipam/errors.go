package ipam

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
)

// Plugin-specific error codes (SPEC: 100+ are the plugin's own). Keep in
// sync with the table in README.md.
const (
	ErrPodUIDMismatch      uint = 100 // K8S_POD_UID is not the live pod's UID
	ErrPoolOtherNode       uint = 101 // the pool's spec.nodeName is not this node
	ErrNoAllocation        uint = 102 // status.allocations has no entry for the pod UID
	ErrAllocationMismatch  uint = 103 // the allocation holds another address than the annotation
	ErrPoolNotFound        uint = 104 // the NodeIPPool named by the annotation does not exist
	ErrNotOurs             uint = 105 // no ipscheduler.io/pool and another scheduler
	ErrRuntimeAnnotations  uint = 106 // runtimeConfig annotations differ from the live pod's
	ErrNetworkMismatch     uint = 107 // ipscheduler.io/network's address is not ipscheduler.io/ip
	ErrMalformedAnnotation uint = 108 // ipscheduler.io/ip or ipscheduler.io/network unparsable
	ErrPodNotFound         uint = 109 // the pod named by CNI_ARGS does not exist
	ErrCountOnly           uint = 110 // a count-only pool: there is no address to hand out
	ErrPrevResultMismatch  uint = 111 // CHECK: prevResult does not carry the allocated address
	ErrAPI                 uint = 112 // the API server refused a request (401/403/4xx) or sent garbage
)

// ErrStatusUnavailable is the SPEC's STATUS code "the plugin is not
// available (cannot service ADD)".
const ErrStatusUnavailable uint = 50

// Well-known codes used here.
const (
	errTryAgain      = types.ErrTryAgainLater
	errInvalidConfig = types.ErrInvalidNetworkConfig
	errInvalidEnv    = types.ErrInvalidEnvironmentVariables
	errDecoding      = types.ErrDecodingFailure
)

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
