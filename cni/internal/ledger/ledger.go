// Package ledger is ipscheduler-ipam's node-local record of the addresses it
// gave to pod sandboxes: the node's last line of defence against one address
// on two interfaces.
//
// The scheduler releases an address when the API server says its pod is gone;
// the kubelet's CNI DEL of that pod's sandbox may come seconds (or, with the
// kubelet down, minutes) later. Until that DEL, the ledger records the address
// as the old sandbox's, and ADD refuses it to any other sandbox while the old
// one still exists.
//
// Layout, as the reference host-local IPAM keeps its store
// (containernetworking/plugins plugins/ipam/host-local/backend/disk): one
// directory (default /var/lib/cni/ipscheduler-ipam, on the node's disk, so it
// survives plugin, kubelet, containerd and node restarts), one file per
// address named by the address (canonical text) holding the sandbox that has
// it as JSON, written atomically (a temporary file renamed over it); every
// operation holds host-local's flock (backend/disk.FileLock) on the
// directory's "lock" file, so concurrent CNI calls on the node are serialised.
// A dual-stack sandbox has two files, one per address, claimed together
// (ClaimAll) and released together (Release: by sandbox interface).
//
// A holder "still exists" while its network namespace does (the runtime pins
// it at CNI_NETNS from ADD until after DEL; containernetworking/plugins
// pkg/ns.IsNSorErr) and the node has not rebooted since (the kernel's boot
// ID). A holder that vanished without DEL (a reboot; a runtime whose state
// was wiped) is stale: its entry is removed by the next ADD or GC on the node.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
)

// DefaultDir is where the ledger lives unless the network configuration's
// ipam.dataDir says otherwise.
const DefaultDir = "/var/lib/cni/ipscheduler-ipam"

// bootIDPath is the kernel's random ID of the current boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// Entry is one address's holder: the sandbox interface it was given to.
type Entry struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// Network is the network configuration's name (GC is per network).
	Network string `json:"network"`
	// Netns is the sandbox's network namespace path (CNI_NETNS); "" when the
	// runtime passed none (the holder then lasts until its DEL or a reboot).
	Netns  string `json:"netns,omitempty"`
	PodUID string `json:"podUID,omitempty"`
	// Pod is namespace/name.
	Pod string `json:"pod,omitempty"`
	// BootID is the kernel's boot ID when the address was given.
	BootID string `json:"bootID,omitempty"`
	// Since is when the address was given (UTC).
	Since time.Time `json:"since"`
}

// Attachment is what a CNI call names: a sandbox's interface.
type Attachment struct {
	ContainerID string
	IfName      string
}

// Of is the entry's attachment.
func (e Entry) Of() Attachment { return Attachment{e.ContainerID, e.IfName} }

// Describe names the holder for error messages: sandbox, pod, UID, netns.
func (e Entry) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s (interface %s", e.ContainerID, e.IfName)
	if e.Pod != "" {
		fmt.Fprintf(&b, ", pod %s", e.Pod)
	}
	if e.PodUID != "" {
		fmt.Fprintf(&b, ", UID %s", e.PodUID)
	}
	if e.Netns != "" {
		fmt.Fprintf(&b, ", netns %s", e.Netns)
	}
	fmt.Fprintf(&b, ", since %s)", e.Since.UTC().Format(time.RFC3339))
	return b.String()
}

// Held is Claim's refusal: IP is still given to Holder, a sandbox that
// still exists.
type Held struct {
	IP     netip.Addr
	Holder Entry
}

func (h *Held) Error() string {
	return fmt.Sprintf("address %s is still configured in %s on this node; its CNI DEL has not run yet", h.IP, h.Holder.Describe())
}

// Ledger is the record in one directory. The zero value is not usable: see Open.
type Ledger struct {
	dir string
	// BootID is the current boot's ID ("" when unknown: reboots are then
	// detected by the namespaces alone).
	BootID string
	// NetnsExists says whether a network namespace path still exists (default:
	// ns.IsNSorErr; a path that cannot be checked for another reason counts as
	// existing). Injectable for tests.
	NetnsExists func(path string) bool
	// Now stamps new entries (default time.Now).
	Now func() time.Time
}

// Open returns the ledger in dir, creating the directory (0700) if needed.
func Open(dir string) (*Ledger, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("ledger directory %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger directory: %w", err)
	}
	boot, _ := os.ReadFile(bootIDPath)
	return &Ledger{dir: dir, BootID: strings.TrimSpace(string(boot)), NetnsExists: netnsExists, Now: time.Now}, nil
}

// Dir is the ledger's directory.
func (l *Ledger) Dir() string { return l.dir }

func netnsExists(path string) bool {
	err := ns.IsNSorErr(path)
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	return !errors.As(err, &notExist) && !errors.As(err, &notNS)
}

// Exists reports whether e's sandbox may still have the address: same boot
// and, when a namespace was recorded, that namespace still there.
func (l *Ledger) Exists(e Entry) bool {
	if l.BootID != "" && e.BootID != "" && e.BootID != l.BootID {
		return false
	}
	return e.Netns == "" || l.NetnsExists(e.Netns)
}

// locked runs fn holding the directory's flock.
func (l *Ledger) locked(fn func() error) error {
	lock, err := disk.NewFileLock(l.dir)
	if err != nil {
		return fmt.Errorf("ledger lock: %w", err)
	}
	defer lock.Close()
	if err := lock.Lock(); err != nil {
		return fmt.Errorf("ledger lock: %w", err)
	}
	defer func() { _ = lock.Unlock() }()
	return fn()
}

// Claim records ip as given to e's sandbox, unless another sandbox that
// still exists holds it: then a *Held error names it and nothing changes.
// Claiming again for the same sandbox interface is a no-op (ADD retried);
// a holder that no longer exists is replaced. Stale entries of other
// addresses are removed on the way (swept).
func (l *Ledger) Claim(ip netip.Addr, e Entry) error {
	return l.ClaimAll([]netip.Addr{ip}, e)
}

// ClaimAll is Claim of every address of ips for one sandbox interface (a
// dual-stack pod's IPv4 and IPv6 address), all or none, under one lock: when
// another sandbox that still exists holds any of them, a *Held error names
// the first such address and nothing changes; when a write fails, the
// entries this call wrote are removed again (those the sandbox already held
// stay). DEL releases them together (Release: every entry of the sandbox
// interface).
func (l *Ledger) ClaimAll(ips []netip.Addr, e Entry) error {
	want := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if ip = ip.Unmap(); !slices.Contains(want, ip) {
			want = append(want, ip)
		}
	}
	return l.locked(func() error {
		entries, err := l.read()
		if err != nil {
			return err
		}
		for _, ip := range want {
			if cur, ok := entries[ip]; ok && cur.Of() != e.Of() && l.Exists(cur) {
				return &Held{IP: ip, Holder: cur}
			}
		}
		for other, cur := range entries {
			if !slices.Contains(want, other) && !l.Exists(cur) {
				if err := l.remove(other); err != nil {
					return err
				}
			}
		}
		if e.BootID == "" {
			e.BootID = l.BootID
		}
		if e.Since.IsZero() {
			e.Since = l.Now().UTC()
		}
		var written []netip.Addr
		for _, ip := range want {
			if cur, ok := entries[ip]; ok && cur.Of() == e.Of() {
				continue
			}
			if err := l.write(ip, e); err != nil {
				for _, w := range written {
					_ = l.remove(w)
				}
				return err
			}
			written = append(written, ip)
		}
		return nil
	})
}

// Release removes every address the sandbox interface a holds; it returns
// them (none: nothing was held, which is not an error).
func (l *Ledger) Release(a Attachment) ([]netip.Addr, error) {
	return l.removeWhere(func(e Entry) bool { return e.Of() == a })
}

// Holder is the entry of ip (nil when none).
func (l *Ledger) Holder(ip netip.Addr) (*Entry, error) {
	var out *Entry
	err := l.locked(func() error {
		e, err := l.readOne(ip.Unmap())
		out = e
		return err
	})
	return out, err
}

// Collect is CNI GC: it removes the entries of network whose sandbox
// interface is not in valid, and every stale entry (any network). It
// returns the addresses removed.
func (l *Ledger) Collect(network string, valid []Attachment) ([]netip.Addr, error) {
	keep := make(map[Attachment]bool, len(valid))
	for _, a := range valid {
		keep[a] = true
	}
	return l.removeWhere(func(e Entry) bool { return (e.Network == network && !keep[e.Of()]) || !l.Exists(e) })
}

// removeWhere removes the entries drop picks and returns their addresses, sorted.
func (l *Ledger) removeWhere(drop func(Entry) bool) ([]netip.Addr, error) {
	var removed []netip.Addr
	err := l.locked(func() error {
		entries, err := l.read()
		if err != nil {
			return err
		}
		for ip, e := range entries {
			if drop(e) {
				if err := l.remove(ip); err != nil {
					return err
				}
				removed = append(removed, ip)
			}
		}
		return nil
	})
	sortAddrs(removed)
	return removed, err
}

// Entries is every address recorded, with its holder.
func (l *Ledger) Entries() (map[netip.Addr]Entry, error) {
	var out map[netip.Addr]Entry
	err := l.locked(func() error {
		var err error
		out, err = l.read()
		return err
	})
	return out, err
}

// -- files (under the lock) ----------------------------------------------------

const tmpPrefix = ".tmp-"

// read decodes every entry file. A file named by an address that cannot be
// decoded is an error (the ledger will not guess who holds an address).
func (l *Ledger) read() (map[netip.Addr]Entry, error) {
	des, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	out := make(map[netip.Addr]Entry, len(des))
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			// A write that died before its rename (writes hold the lock we hold).
			_ = os.Remove(filepath.Join(l.dir, de.Name()))
			continue
		}
		ip, err := netip.ParseAddr(de.Name())
		if err != nil || !de.Type().IsRegular() {
			continue // the lock file
		}
		e, err := l.readOne(ip)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out[ip] = *e
		}
	}
	return out, nil
}

func (l *Ledger) path(ip netip.Addr) string { return filepath.Join(l.dir, ip.String()) }

func (l *Ledger) readOne(ip netip.Addr) (*Entry, error) {
	b, err := os.ReadFile(l.path(ip))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.ContainerID == "" {
		return nil, fmt.Errorf("ledger entry %s is unreadable (%v): remove it once no sandbox on this node has %s", l.path(ip), err, ip)
	}
	return &e, nil
}

func (l *Ledger) write(ip netip.Addr, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.dir, tmpPrefix)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return fmt.Errorf("ledger: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("ledger: %w", err)
	}
	if err := os.Rename(f.Name(), l.path(ip)); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

func (l *Ledger) remove(ip netip.Addr) error {
	if err := os.Remove(l.path(ip)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

func sortAddrs(ips []netip.Addr) {
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
}
