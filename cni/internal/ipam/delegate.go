package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// PluginType is this plugin's own type (its binary's name): a delegate may
// not be it.
const PluginType = "ipscheduler-ipam"

// Delegate is ipam.delegate: the IPAM configuration of another plugin
// (host-local, …) that gets the pods that are not ours (those that would
// otherwise be refused with 105), as flannel and calico-ipam delegate to
// host-local. The object is handed on as it is, as the delegate's "ipam".
type Delegate struct {
	// Type is the delegate's "type": its binary's name, found on CNI_PATH.
	Type string
	// Conf is the whole object, as written.
	Conf json.RawMessage
}

// UnmarshalJSON keeps the object as written; LoadConfig validates it (so
// that a bad delegate is a configuration error, 7, not a decoding one).
func (d *Delegate) UnmarshalJSON(b []byte) error {
	d.Conf = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON writes the object as it was read.
func (d Delegate) MarshalJSON() ([]byte, error) { return d.Conf, nil }

// validate checks the object and sets Type: a JSON object with a non-empty
// string "type" that is not this plugin (ownType is ipam.type). Errors are
// *types.Error code 7.
func (d *Delegate) validate(ownType string) error {
	invalid := func(format string, args ...any) error {
		return newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.delegate "+format, args...)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(d.Conf, &obj); err != nil || obj == nil {
		return invalid("must be an object, the IPAM configuration of another plugin (such as {\"type\": \"host-local\", …}), not %s", d.Conf)
	}
	raw, ok := obj["type"]
	if !ok {
		return invalid("has no \"type\": name the IPAM plugin to delegate to (such as host-local)")
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return invalid("\"type\" must be a string (a plugin's name), not %s", raw)
	}
	if strings.TrimSpace(typ) == "" {
		return invalid("\"type\" is empty: name the IPAM plugin to delegate to (such as host-local)")
	}
	if strings.ContainsRune(typ, filepath.Separator) {
		return invalid("\"type\" %q must be a plugin's name on CNI_PATH, not a path", typ)
	}
	if typ == PluginType || typ == ownType {
		return invalid("\"type\" %q is this plugin: the delegate must be another IPAM plugin (such as host-local)", typ)
	}
	d.Type = typ
	return nil
}

// DelegateOf reads only ipam.delegate from a network configuration (DEL and
// GC need nothing else): nil when absent, null, or invalid (with an invalid
// delegate no ADD can have delegated, so there is nothing to undo).
func DelegateOf(stdin []byte) *Delegate {
	var conf struct {
		IPAM struct {
			Type     string    `json:"type"`
			Delegate *Delegate `json:"delegate"`
		} `json:"ipam"`
	}
	if json.Unmarshal(stdin, &conf) != nil || conf.IPAM.Delegate == nil {
		return nil
	}
	if conf.IPAM.Delegate.validate(conf.IPAM.Type) != nil {
		return nil
	}
	return conf.IPAM.Delegate
}

// delegateNetconf is the network configuration the delegate gets: stdin with
// "ipam" replaced by the delegate's object; every other key (name,
// cniVersion, the main plugin's type and keys, runtimeConfig, args,
// prevResult, cni.dev/valid-attachments) as it is, as the main plugin hands
// them to its IPAM plugin.
func delegateNetconf(stdin []byte, d *Delegate) ([]byte, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, newErr(types.ErrDecodingFailure, MsgDecodeConfig, "%v", err)
	}
	conf["ipam"] = d.Conf
	return json.Marshal(conf)
}

// isNotOurs tells whether err is the verification's 105: a pod of another
// scheduler, without ipscheduler.io/pool (not our pod waiting for one).
func isNotOurs(err error) bool {
	var e *types.Error
	return errors.As(err, &e) && e.Code == ErrNotOurs
}

// delegateFailure is the error of a failed delegate call: the delegate's own
// CNI error object as it printed it, else (not found on CNI_PATH, crashed,
// unreadable output) 114.
func delegateFailure(d *Delegate, verb string, err error) error {
	var e *types.Error
	if errors.As(err, &e) && e.Code != 0 {
		return e
	}
	return newErr(ErrDelegate, MsgDelegate, "ipam.delegate %s, %s: %v", d.Type, verb, err)
}

// delegateAdd hands a pod that is not ours to the delegate and prints its
// result in the configuration's cniVersion. Nothing is recorded in the node
// ledger: the delegate keeps its own addresses.
func (p *Plugin) delegateAdd(conf *NetConf, args *skel.CmdArgs) error {
	d := conf.IPAM.Delegate
	netconf, err := delegateNetconf(args.StdinData, d)
	if err != nil {
		return err
	}
	res, err := invoke.DelegateAdd(context.Background(), d.Type, netconf, p.DelegateExec)
	if err != nil {
		return delegateFailure(d, "ADD", err)
	}
	return RenderResult(p.Stdout, res, conf.CNIVersion)
}

// delegateCheck hands CHECK of a pod that is not ours to the delegate.
func (p *Plugin) delegateCheck(conf *NetConf, args *skel.CmdArgs) error {
	d := conf.IPAM.Delegate
	netconf, err := delegateNetconf(args.StdinData, d)
	if err != nil {
		return err
	}
	if err := invoke.DelegateCheck(context.Background(), d.Type, netconf, p.DelegateExec); err != nil {
		return delegateFailure(d, "CHECK", err)
	}
	return nil
}

// delegateDel runs the delegate's DEL for the sandbox interface, whoever the
// pod was: whether ADD delegated cannot be known at DEL time (the pod may be
// gone), and a delegate's DEL of a container it does not know is a no-op.
func (p *Plugin) delegateDel(d *Delegate, stdin []byte) error {
	netconf, err := delegateNetconf(stdin, d)
	if err != nil {
		return err
	}
	if err := invoke.DelegateDel(context.Background(), d.Type, netconf, p.DelegateExec); err != nil {
		return delegateFailure(d, "DEL", err)
	}
	return nil
}

// delegateGC passes GC (and its cni.dev/valid-attachments) on to the
// delegate when its VERSION lists the configuration's cniVersion; a delegate
// of an older spec has no GC and is skipped.
func (p *Plugin) delegateGC(d *Delegate, cniVersion string, stdin []byte) error {
	exec := p.DelegateExec
	if exec == nil {
		exec = &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}
	}
	path, err := exec.FindInPath(d.Type, filepath.SplitList(os.Getenv("CNI_PATH")))
	if err != nil {
		return delegateFailure(d, "GC", err)
	}
	info, err := invoke.GetVersionInfo(context.Background(), path, exec)
	if err != nil {
		return delegateFailure(d, "VERSION", err)
	}
	if !slices.Contains(info.SupportedVersions(), cniVersion) {
		return nil
	}
	netconf, err := delegateNetconf(stdin, d)
	if err != nil {
		return err
	}
	if err := invoke.DelegateGC(context.Background(), d.Type, netconf, exec); err != nil {
		return delegateFailure(d, "GC", err)
	}
	return nil
}

// withAlso is first with second's failure added to its details (either
// may be nil).
func withAlso(first, second error) error {
	if second == nil {
		return first
	}
	if first == nil {
		return second
	}
	var e *types.Error
	if errors.As(first, &e) {
		combined := *e
		if combined.Details != "" {
			combined.Details += "; and "
		}
		combined.Details += second.Error()
		return &combined
	}
	return fmt.Errorf("%w; and %v", first, second)
}
