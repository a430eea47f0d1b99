package ledger

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

// open returns a ledger in a temporary directory whose namespaces "exist"
// while they are in live.
func open(t *testing.T, live map[string]bool) *Ledger {
	t.Helper()
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l.BootID = "boot-1"
	l.NetnsExists = func(p string) bool { return live[p] }
	l.Now = func() time.Time { return time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) }
	return l
}

func entry(container, netns string) Entry {
	return Entry{ContainerID: container, IfName: "eth0", Network: "underlay", Netns: netns, PodUID: "uid-" + container, Pod: "default/" + container}
}

var ip = netip.MustParseAddr("10.0.1.12")

func TestClaim(t *testing.T) {
	tests := []struct {
		name string
		// prior is written before the claim (nil: the address is free).
		prior     *Entry
		live      map[string]bool
		claim     Entry
		wantHeld  bool
		wantOwner string // the container ID recorded afterwards
	}{
		{name: "free address", claim: entry("b", "/run/netns/b"), wantOwner: "b"},
		{name: "held by a sandbox whose netns exists", prior: ptr(entry("a", "/run/netns/a")),
			live: map[string]bool{"/run/netns/a": true}, claim: entry("b", "/run/netns/b"), wantHeld: true, wantOwner: "a"},
		{name: "held by a sandbox gone without DEL", prior: ptr(entry("a", "/run/netns/a")),
			claim: entry("b", "/run/netns/b"), wantOwner: "b"},
		{name: "held before a reboot (another boot ID)", prior: withBoot(entry("a", "/run/netns/a"), "boot-0"),
			live: map[string]bool{"/run/netns/a": true}, claim: entry("b", "/run/netns/b"), wantOwner: "b"},
		{name: "held without a netns (until DEL or reboot)", prior: ptr(entry("a", "")),
			claim: entry("b", "/run/netns/b"), wantHeld: true, wantOwner: "a"},
		{name: "the same sandbox again (ADD retried)", prior: ptr(entry("a", "/run/netns/a")),
			live: map[string]bool{"/run/netns/a": true}, claim: entry("a", "/run/netns/a"), wantOwner: "a"},
		{name: "another interface of the same sandbox", prior: ptr(entry("a", "/run/netns/a")),
			live: map[string]bool{"/run/netns/a": true}, claim: withIf(entry("a", "/run/netns/a"), "net1"), wantHeld: true, wantOwner: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, tt.live)
			if tt.prior != nil {
				if err := l.write(ip, *tt.prior); err != nil {
					t.Fatal(err)
				}
			}
			err := l.Claim(ip, tt.claim)
			var held *Held
			if got := errors.As(err, &held); got != tt.wantHeld || (!got && err != nil) {
				t.Fatalf("Claim: %v (want held: %v)", err, tt.wantHeld)
			}
			if held != nil && (held.IP != ip || held.Holder.ContainerID != tt.prior.ContainerID) {
				t.Fatalf("Held names %v", held)
			}
			e, err := l.Holder(ip)
			if err != nil || e == nil || e.ContainerID != tt.wantOwner {
				t.Fatalf("holder afterwards: %+v, %v (want %s)", e, err, tt.wantOwner)
			}
		})
	}
}

var ip6 = netip.MustParseAddr("fd00::c")

// TestClaimAll: a dual-stack sandbox's addresses are claimed all or none.
func TestClaimAll(t *testing.T) {
	live := map[string]bool{"/run/netns/a": true, "/run/netns/b": true}
	tests := []struct {
		name string
		// prior is written before the claim, by address.
		prior    map[netip.Addr]Entry
		ips      []netip.Addr
		wantHeld netip.Addr // the address the *Held error names (invalid: none)
		// want is each address's holder afterwards ("" : none).
		want map[netip.Addr]string
	}{
		{name: "both free", ips: []netip.Addr{ip, ip6}, want: map[netip.Addr]string{ip: "b", ip6: "b"}},
		{name: "IPv6 first", ips: []netip.Addr{ip6, ip}, want: map[netip.Addr]string{ip: "b", ip6: "b"}},
		{name: "the IPv6 address held by a live sandbox: nothing claimed",
			prior: map[netip.Addr]Entry{ip6: entry("a", "/run/netns/a")}, ips: []netip.Addr{ip, ip6},
			wantHeld: ip6, want: map[netip.Addr]string{ip: "", ip6: "a"}},
		{name: "the IPv4 address held by a live sandbox: nothing claimed",
			prior: map[netip.Addr]Entry{ip: entry("a", "/run/netns/a")}, ips: []netip.Addr{ip, ip6},
			wantHeld: ip, want: map[netip.Addr]string{ip: "a", ip6: ""}},
		{name: "one held by a sandbox gone without DEL: replaced",
			prior: map[netip.Addr]Entry{ip6: entry("gone", "/run/netns/gone")}, ips: []netip.Addr{ip, ip6},
			want: map[netip.Addr]string{ip: "b", ip6: "b"}},
		{name: "one already the sandbox's (ADD retried)",
			prior: map[netip.Addr]Entry{ip: entry("b", "/run/netns/b")}, ips: []netip.Addr{ip, ip6},
			want: map[netip.Addr]string{ip: "b", ip6: "b"}},
		{name: "the same address twice (mapped form) is one",
			ips: []netip.Addr{ip, netip.MustParseAddr("::ffff:10.0.1.12")}, want: map[netip.Addr]string{ip: "b", ip6: ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, live)
			for a, e := range tt.prior {
				if err := l.write(a, e); err != nil {
					t.Fatal(err)
				}
			}
			err := l.ClaimAll(tt.ips, entry("b", "/run/netns/b"))
			var held *Held
			switch {
			case tt.wantHeld.IsValid() && (!errors.As(err, &held) || held.IP != tt.wantHeld):
				t.Fatalf("ClaimAll: %v, want %s held", err, tt.wantHeld)
			case !tt.wantHeld.IsValid() && err != nil:
				t.Fatalf("ClaimAll: %v", err)
			}
			entries, err := l.Entries()
			if err != nil {
				t.Fatal(err)
			}
			for a, want := range tt.want {
				if got := entries[a].ContainerID; got != want {
					t.Errorf("%s held by %q, want %q", a, got, want)
				}
			}
			if len(entries) != len(tt.want)-countEmpty(tt.want) {
				t.Errorf("entries %+v", entries)
			}
		})
	}
}

func countEmpty(m map[netip.Addr]string) int {
	n := 0
	for _, v := range m {
		if v == "" {
			n++
		}
	}
	return n
}

// A write that fails takes back what the claim wrote before it, and only that.
func TestClaimAllUndoesItsWritesWhenOneFails(t *testing.T) {
	live := map[string]bool{"/run/netns/b": true}
	l := open(t, live)
	third := netip.MustParseAddr("10.0.1.14")
	if err := l.Claim(third, entry("b", "/run/netns/b")); err != nil {
		t.Fatal(err)
	}
	// fd00::c's file cannot be written: a directory stands in its place.
	if err := os.Mkdir(filepath.Join(l.Dir(), ip6.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	err := l.ClaimAll([]netip.Addr{ip, third, ip6}, entry("b", "/run/netns/b"))
	var held *Held
	if err == nil || errors.As(err, &held) {
		t.Fatalf("ClaimAll: %v, want a write error", err)
	}
	entries, err := l.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[third].ContainerID != "b" {
		t.Fatalf("entries %+v: want only the address held before", entries)
	}
}

// DEL releases every address of the sandbox interface, both families.
func TestReleaseFreesBothAddressesOfADualStackSandbox(t *testing.T) {
	l := open(t, map[string]bool{"/run/netns/a": true, "/run/netns/b": true})
	if err := l.ClaimAll([]netip.Addr{ip6, ip}, entry("a", "/run/netns/a")); err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimAll([]netip.Addr{ip, ip6}, entry("b", "/run/netns/b")); err == nil {
		t.Fatal("a live sandbox's addresses claimed again")
	}
	got, err := l.Release(Attachment{"a", "eth0"})
	if err != nil || !reflect.DeepEqual(got, []netip.Addr{ip, ip6}) {
		t.Fatalf("released %v, %v", got, err)
	}
	if err := l.ClaimAll([]netip.Addr{ip, ip6}, entry("b", "/run/netns/b")); err != nil {
		t.Fatalf("after DEL: %v", err)
	}
}

func TestClaimRecordsTheBootAndTheTime(t *testing.T) {
	l := open(t, nil)
	if err := l.Claim(netip.MustParseAddr("::ffff:10.0.1.12"), entry("a", "/run/netns/a")); err != nil {
		t.Fatal(err)
	}
	e, err := l.Holder(ip) // the IPv4-mapped form is the same address
	if err != nil || e == nil {
		t.Fatalf("%+v %v", e, err)
	}
	want := entry("a", "/run/netns/a")
	want.BootID, want.Since = "boot-1", l.Now()
	if !reflect.DeepEqual(*e, want) {
		t.Fatalf("got %+v\nwant %+v", *e, want)
	}
	if _, err := os.Stat(filepath.Join(l.Dir(), "10.0.1.12")); err != nil {
		t.Fatalf("one file per address, named by it: %v", err)
	}
}

func TestHeldErrorNamesTheHolder(t *testing.T) {
	l := open(t, map[string]bool{"/run/netns/a": true})
	_ = l.Claim(ip, entry("a", "/run/netns/a"))
	err := l.Claim(ip, entry("b", "/run/netns/b"))
	want := "address 10.0.1.12 is still configured in sandbox a (interface eth0, pod default/a, UID uid-a, netns /run/netns/a, since 2026-11-27T12:00:00Z) on this node; its CNI DEL has not run yet"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func TestReleaseThenClaim(t *testing.T) {
	live := map[string]bool{"/run/netns/a": true, "/run/netns/b": true}
	l := open(t, live)
	other := netip.MustParseAddr("10.0.1.13")
	if err := l.Claim(ip, entry("a", "/run/netns/a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(other, entry("c", "/run/netns/c")); err != nil {
		t.Fatal(err)
	}
	live["/run/netns/c"] = true
	for range 2 { // DEL is idempotent
		got, err := l.Release(Attachment{"a", "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 1 || (len(got) == 1 && got[0] != ip) {
			t.Fatalf("released %v", got)
		}
	}
	if err := l.Claim(ip, entry("b", "/run/netns/b")); err != nil {
		t.Fatalf("after DEL: %v", err)
	}
	entries, err := l.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[ip].ContainerID != "b" || entries[other].ContainerID != "c" {
		t.Fatalf("entries %+v", entries)
	}
}

func TestClaimSweepsStaleEntriesOfOtherAddresses(t *testing.T) {
	live := map[string]bool{"/run/netns/a": true}
	l := open(t, live)
	stale := netip.MustParseAddr("10.0.1.20")
	if err := l.Claim(stale, entry("gone", "/run/netns/gone")); err != nil {
		t.Fatal(err)
	}
	kept := netip.MustParseAddr("10.0.1.21")
	if err := l.Claim(kept, entry("a", "/run/netns/a")); err != nil {
		t.Fatal(err)
	}
	entries, _ := l.Entries()
	if _, ok := entries[stale]; ok {
		t.Fatalf("a holder gone without DEL stayed recorded: %+v", entries)
	}
	if _, ok := entries[kept]; !ok {
		t.Fatalf("a live holder was swept: %+v", entries)
	}
}

func TestCollect(t *testing.T) {
	live := map[string]bool{"/run/netns/a": true, "/run/netns/b": true, "/run/netns/o": true}
	l := open(t, live)
	a, b, gone, o := netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3"), netip.MustParseAddr("10.0.1.4")
	for ip, e := range map[netip.Addr]Entry{a: entry("a", "/run/netns/a"), b: entry("b", "/run/netns/b"), o: withNetwork(entry("o", "/run/netns/o"), "other")} {
		if err := l.Claim(ip, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.write(gone, entry("gone", "/run/netns/gone")); err != nil {
		t.Fatal(err)
	}
	removed, err := l.Collect("underlay", []Attachment{{"a", "eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	// b: not a valid attachment of this network; gone: its sandbox no longer exists;
	// o: another network's, live: kept.
	if !reflect.DeepEqual(removed, []netip.Addr{b, gone}) {
		t.Fatalf("removed %v", removed)
	}
	entries, _ := l.Entries()
	if len(entries) != 2 || entries[a].ContainerID != "a" || entries[o].ContainerID != "o" {
		t.Fatalf("left %+v", entries)
	}
}

func TestAnUnreadableEntryIsAnErrorNotAGuess(t *testing.T) {
	l := open(t, nil)
	if err := os.WriteFile(filepath.Join(l.Dir(), ip.String()), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := l.Claim(ip, entry("b", "/run/netns/b"))
	var held *Held
	if err == nil || errors.As(err, &held) {
		t.Fatalf("Claim over an unreadable entry: %v", err)
	}
	if _, err := l.Release(Attachment{"b", "eth0"}); err == nil {
		t.Fatal("Release read past an unreadable entry")
	}
}

func TestLeftoversOfADeadWriteAreIgnoredAndRemoved(t *testing.T) {
	l := open(t, nil)
	tmp := filepath.Join(l.Dir(), tmpPrefix+"123")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(ip, entry("a", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}

func TestConcurrentClaimsOfOneAddressHaveOneWinner(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := Open(dir) // each its own lock file descriptor, as separate plugin processes
			if err != nil {
				t.Error(err)
				return
			}
			l.NetnsExists = func(string) bool { return true }
			err = l.Claim(ip, entry(string(rune('a'+i)), "/run/netns/x"))
			var held *Held
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.As(err, &held):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d claims won", won)
	}
}

func TestOpenRefusesARelativeDirectory(t *testing.T) {
	if _, err := Open("relative/dir"); err == nil {
		t.Fatal("relative directory accepted")
	}
}

func TestNetnsExists(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"/proc/self/ns/net": true,  // a namespace file
		file:                false, // a plain file: the namespace was unmounted
		filepath.Join(filepath.Dir(file), "missing"): false, // gone
	} {
		if got := netnsExists(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}

func ptr(e Entry) *Entry { return &e }

func withBoot(e Entry, boot string) *Entry { e.BootID = boot; return &e }

func withIf(e Entry, ifName string) Entry { e.IfName = ifName; return e }

func withNetwork(e Entry, network string) Entry { e.Network = network; return e }
