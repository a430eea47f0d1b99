// Package ipam is the ipscheduler-ipam CNI plugin. ADD and CHECK verify,
// against the Kubernetes API, the addresses the scheduler reserved for a pod
// (its annotations ipscheduler.io/pool, ipscheduler.io/ip, for a dual-stack
// pod ipscheduler.io/ips, and ipscheduler.io/network, against the
// NodeIPPool's status.allocations entry for the pod's UID: ip, and ips for
// a dual-stack pod) and print them as a CNI result; the node ledger
// (internal/ledger) records which sandbox interface has each address. A
// multi-homed pod's further interfaces (Multus's net1, net2, ...) are in
// ipscheduler.io/interfaces, interface name -> {pool, ips, network}, each
// from its own NodeIPPool (its allocation names the interface): ADD and
// CHECK verify CNI_IFNAME's entry when there is one, else the first
// interface's annotations (interfaces.go). DEL and GC forget addresses in
// the ledger, per sandbox interface; pods of other schedulers can go to
// ipam.delegate.
package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
	"github.com/ipscheduler/ipscheduler/cni/internal/kubeconfig"
	"github.com/ipscheduler/ipscheduler/cni/internal/ledger"
)

// Version is the plugin's own version (set with -ldflags "-X ...ipam.Version=...").
var Version = "dev"

// About is printed by skel when the binary runs without CNI_COMMAND.
func About() string { return "CNI ipscheduler-ipam plugin " + Version }

// Plugin holds the plugin's dependencies so the commands can be tested
// without a cluster.
type Plugin struct {
	// Hostname is the default node name's source (os.Hostname).
	Hostname func() (string, error)
	// NewAPI builds the API client from the ipam section (kubeconfig + kube.Client).
	NewAPI func(conf *IPAMConf) (API, error)
	// Stdout receives the ADD result.
	Stdout io.Writer
	// OpenLedger opens the node-local ledger in a directory (ledger.Open when nil).
	OpenLedger func(dir string) (*ledger.Ledger, error)
	// DelegateExec runs ipam.delegate's plugin (invoke's default, which
	// finds it on CNI_PATH and executes it, when nil).
	DelegateExec invoke.Exec
}

// Default is the production plugin.
func Default() *Plugin {
	return &Plugin{Hostname: os.Hostname, NewAPI: NewKubeAPI, Stdout: os.Stdout, OpenLedger: ledger.Open}
}

// ledger opens the ledger in dir; errors are *types.Error ErrIOFailure.
func (p *Plugin) ledger(dir string) (*ledger.Ledger, error) {
	open := p.OpenLedger
	if open == nil {
		open = ledger.Open
	}
	l, err := open(dir)
	if err != nil {
		return nil, ledgerFailure(err)
	}
	return l, nil
}

func ledgerFailure(err error) error {
	return newErr(types.ErrIOFailure, MsgLedger, "%v", err)
}

// NewKubeAPI loads conf.Kubeconfig and builds a client with conf's timeout.
// Errors are *types.Error code 7.
func NewKubeAPI(conf *IPAMConf) (API, error) {
	kc, err := kubeconfig.Load(conf.Kubeconfig)
	if err != nil {
		return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.kubeconfig %s: %v", conf.Kubeconfig, err)
	}
	c, err := kube.NewClient(kc, conf.Timeout())
	if err != nil {
		return nil, newErr(types.ErrInvalidNetworkConfig, MsgInvalidConfig, "ipam.kubeconfig %s: %v", conf.Kubeconfig, err)
	}
	return c, nil
}

// Funcs are the skel callbacks.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// verify is the part ADD and CHECK share.
func (p *Plugin) verify(conf *NetConf, args *skel.CmdArgs) (*Verified, error) {
	ref, err := ParseArgs(args.Args)
	if err != nil {
		return nil, err
	}
	api, err := p.NewAPI(&conf.IPAM)
	if err != nil {
		return nil, err
	}
	// Two requests, each bounded by the client's timeout; this bounds the whole.
	ctx, cancel := context.WithTimeout(context.Background(), 2*conf.IPAM.Timeout())
	defer cancel()
	return Verify(ctx, api, Request{
		Pod:                ref,
		NodeName:           conf.IPAM.NodeName,
		SchedulerName:      conf.IPAM.SchedulerName,
		RuntimeAnnotations: conf.RuntimeConfig.PodAnnotations,
		IfName:             args.IfName,
	})
}

// Add verifies the pod's reservation for CNI_IFNAME (its entry of
// ipscheduler.io/interfaces, else the first interface's), records its
// addresses (both of a dual-stack interface) as this sandbox interface's
// (CNI_CONTAINERID, CNI_IFNAME) in the node-local ledger, all or none
// (refused, code 11, while another sandbox that still exists has one: the
// kubelet retries the sandbox) and prints them.
// A pod that is not ours (105) goes to ipam.delegate when it is set.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, err := LoadConfig(args.StdinData, p.Hostname)
	if err != nil {
		return err
	}
	v, err := p.verify(conf, args)
	if isNotOurs(err) && conf.IPAM.Delegate != nil {
		return p.delegateAdd(conf, args)
	}
	if err != nil {
		return err
	}
	l, err := p.ledger(conf.IPAM.LedgerDir())
	if err != nil {
		return err
	}
	entry := ledger.Entry{
		ContainerID: args.ContainerID,
		IfName:      args.IfName,
		Network:     conf.Name,
		Netns:       args.Netns,
		PodUID:      v.PodUID,
		Pod:         v.Pod.String(),
	}
	if err := l.ClaimAll(v.Addresses(), entry); err != nil {
		return claimFailure(err)
	}
	return RenderResult(p.Stdout, BuildResult(v), conf.CNIVersion)
}

// claimFailure is the CNI error of a failed ledger.Claim.
func claimFailure(err error) error {
	var held *ledger.Held
	if errors.As(err, &held) {
		return newErr(types.ErrTryAgainLater, MsgAddressHeld, "%v", held)
	}
	return ledgerFailure(err)
}

// Check re-verifies the reservation and that prevResult carries its
// addresses (every one of a dual-stack pod).
// A pod that is not ours (105) goes to ipam.delegate when it is set.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, err := LoadConfig(args.StdinData, p.Hostname)
	if err != nil {
		return err
	}
	var prev *types100.Result
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return newErr(types.ErrDecodingFailure, MsgDecodePrevResult, "%v", err)
	}
	if conf.PrevResult != nil {
		if prev, err = types100.NewResultFromResult(conf.PrevResult); err != nil {
			return newErr(types.ErrDecodingFailure, MsgConvertPrevResult, "%v", err)
		}
	}
	v, err := p.verify(conf, args)
	if isNotOurs(err) && conf.IPAM.Delegate != nil {
		return p.delegateCheck(conf, args)
	}
	if err != nil {
		return err
	}
	if err := p.checkLedger(conf, args, v); err != nil {
		return err
	}
	if prev == nil {
		return nil
	}
	return CheckPrevResult(prev, v.Addresses()...)
}

// checkLedger fails (code 11, MsgAddressHeld) when the ledger gives one of
// v's addresses to another sandbox that still exists. An address the ledger
// does not record (a sandbox made before the ledger existed) passes.
func (p *Plugin) checkLedger(conf *NetConf, args *skel.CmdArgs, v *Verified) error {
	l, err := p.ledger(conf.IPAM.LedgerDir())
	if err != nil {
		return err
	}
	for _, ip := range v.Addresses() {
		holder, err := l.Holder(ip)
		if err != nil {
			return ledgerFailure(err)
		}
		if holder != nil && holder.Of() != (ledger.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}) && l.Exists(*holder) {
			return claimFailure(&ledger.Held{IP: ip, Holder: *holder})
		}
	}
	return nil
}

// CheckPrevResult fails with ErrPrevResultMismatch unless prev carries every
// address of ips (addresses compared canonically; the order and any other
// address prev holds do not matter).
func CheckPrevResult(prev *types100.Result, ips ...netip.Addr) error {
	var has, missing []string
	for _, c := range prev.IPs {
		has = append(has, c.Address.IP.String())
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(prev.IPs, func(c *types100.IPConfig) bool {
			a, ok := netip.AddrFromSlice(c.Address.IP)
			return ok && a.Unmap() == ip.Unmap()
		}) {
			missing = append(missing, ip.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if len(has) == 0 {
		has = []string{"none"}
	}
	return newErr(ErrPrevResultMismatch, MsgPrevResultMismatch,
		"the pool allocates %s, prevResult lacks %s (it has %s)", joinAddrs(ips), strings.Join(missing, ","), strings.Join(has, ","))
}

// Del removes the sandbox interface's addresses from the node-local ledger
// (the main plugin calls it after removing the interface) and never talks to
// the API: the scheduler releases by pod UID. Idempotent; it succeeds when
// nothing is held and whatever the configuration (only ipam.dataDir is read).
// It fails (ErrIOFailure) only when the ledger cannot be written, so the
// runtime retries rather than forget a release.
//
// With ipam.delegate, the delegate's DEL runs too, for every sandbox: whether
// ADD delegated cannot be known now (the pod may be gone), and a delegate's
// DEL of a sandbox it does not know is a no-op. Both always run; a failure
// of either fails DEL (the ledger's first, the delegate's added to its
// details), so the runtime retries both (each is idempotent).
func (p *Plugin) Del(args *skel.CmdArgs) error {
	err := p.release(args)
	if d := DelegateOf(args.StdinData); d != nil {
		err = withAlso(err, p.delegateDel(d, args.StdinData))
	}
	return err
}

// release removes the sandbox interface's records from the node ledger.
func (p *Plugin) release(args *skel.CmdArgs) error {
	l, err := p.ledger(LedgerDirOf(args.StdinData))
	if err != nil {
		return err
	}
	if _, err := l.Release(ledger.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}); err != nil {
		return ledgerFailure(err)
	}
	return nil
}

// GC (CNI 1.1) removes from the ledger this network's addresses whose sandbox
// interface is not in cni.dev/valid-attachments, and every holder that no
// longer exists (a reboot, a sandbox gone without DEL). With ipam.delegate,
// GC is then passed on to the delegate (with the same valid attachments)
// when its VERSION lists the configuration's cniVersion, else skipped.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	var conf types.PluginConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return newErr(types.ErrDecodingFailure, MsgDecodeConfig, "%v", err)
	}
	err := p.collect(&conf, args)
	if d := DelegateOf(args.StdinData); d != nil {
		err = withAlso(err, p.delegateGC(d, conf.CNIVersion, args.StdinData))
	}
	return err
}

// collect drops from the ledger conf's network's records of attachments not
// in cni.dev/valid-attachments, and every stale record.
func (p *Plugin) collect(conf *types.PluginConf, args *skel.CmdArgs) error {
	l, err := p.ledger(LedgerDirOf(args.StdinData))
	if err != nil {
		return err
	}
	valid := make([]ledger.Attachment, 0, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		valid = append(valid, ledger.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	if _, err := l.Collect(conf.Name, valid); err != nil {
		return ledgerFailure(err)
	}
	return nil
}

// Status fails (code 50) only when the plugin's own configuration is broken:
// the kubeconfig is missing, unreadable or unusable. It does not call the
// API and never reports pool exhaustion (containerd would mark the whole
// node's network not ready).
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := LoadConfig(args.StdinData, p.Hostname)
	if err != nil {
		return err
	}
	if _, err := p.NewAPI(&conf.IPAM); err != nil {
		details := err.Error()
		var e *types.Error
		if errors.As(err, &e) {
			details = e.Details
		}
		return types.NewError(ErrStatusUnavailable, MsgStatusUnavailable, details)
	}
	return nil
}

// Main runs the plugin on the process's environment, stdin and stdout and
// returns the exit code. Errors are printed as the SPEC's error object
// (cniVersion, code, msg, details); skel itself would omit cniVersion.
func Main() int {
	var stdinData []byte
	if cmd := os.Getenv("CNI_COMMAND"); cmd != "" && cmd != "VERSION" {
		var err error
		if stdinData, err = io.ReadAll(os.Stdin); err != nil {
			_ = WriteError(os.Stdout, types.NewError(types.ErrIOFailure, MsgReadStdin, err.Error()), nil)
			return 1
		}
		// skel reads os.Stdin itself: hand it the same bytes again.
		r, w, err := os.Pipe()
		if err != nil {
			_ = WriteError(os.Stdout, types.NewError(types.ErrIOFailure, MsgPipe, err.Error()), stdinData)
			return 1
		}
		go func() {
			_, _ = w.Write(stdinData)
			_ = w.Close()
		}()
		os.Stdin = r
	}
	if e := skel.PluginMainFuncsWithError(Default().Funcs(), version.All, About()); e != nil {
		_ = WriteError(os.Stdout, e, stdinData)
		return 1
	}
	return 0
}
