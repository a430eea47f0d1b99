package ipam

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestRenderResult(t *testing.T) {
	ip4 := netip.MustParseAddr("10.0.1.12")
	ip6 := netip.MustParseAddr("fd00::5")
	net4, err := ParseNetwork(network4, ip4)
	if err != nil {
		t.Fatal(err)
	}
	net6, err := ParseNetwork(`{"ips":[{"address":"fd00::5/64","gateway":"fd00::1"}],"routes":[{"dst":"::/0","gw":"fd00::1"}]}`, ip6)
	if err != nil {
		t.Fatal(err)
	}
	ipC := netip.MustParseAddr("fd00::c")
	netDual, err := ParseNetwork(networkDual, ip4, ipC)
	if err != nil {
		t.Fatal(err)
	}
	net6First, err := ParseNetwork(`{"ips":[{"address":"fd00::c/64","gateway":"fd00::1"},{"address":"10.0.1.12/24"}],`+
		`"routes":[{"dst":"10.1.0.0/16","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}]}`, ipC, ip4)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*Verified{
		"v4 host":          {IP: ip4},
		"v4 network":       {IP: ip4, Network: net4},
		"v6 host":          {IP: ip6},
		"v6 network":       {IP: ip6, Network: net6},
		"v4 host, listed":  {IP: ip4, IPs: []netip.Addr{ip4}},
		"dual host":        {IP: ip4, IPs: []netip.Addr{ip4, ipC}},
		"dual network":     {IP: ip4, IPs: []netip.Addr{ip4, ipC}, Network: netDual},
		"dual host, v6":    {IP: ipC, IPs: []netip.Addr{ipC, ip4}},
		"dual network, v6": {IP: ipC, IPs: []netip.Addr{ipC, ip4}, Network: net6First},
	}
	// ips / routes as each spec version prints them; the 0.x "version"
	// field is the point of the 0.3.1/0.4.0 rows.
	ips := map[string]string{
		"v4 host":          `[{"address":"10.0.1.12/32"}]`,
		"v4 network":       `[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}]`,
		"v6 host":          `[{"address":"fd00::5/128"}]`,
		"v6 network":       `[{"address":"fd00::5/64","gateway":"fd00::1"}]`,
		"v4 host, listed":  `[{"address":"10.0.1.12/32"}]`,
		"dual host":        `[{"address":"10.0.1.12/32"},{"address":"fd00::c/128"}]`,
		"dual network":     `[{"address":"10.0.1.12/24","gateway":"10.0.1.1"},{"address":"fd00::c/64","gateway":"fd00::1"}]`,
		"dual host, v6":    `[{"address":"fd00::c/128"},{"address":"10.0.1.12/32"}]`,
		"dual network, v6": `[{"address":"fd00::c/64","gateway":"fd00::1"},{"address":"10.0.1.12/24"}]`,
	}
	ips04 := map[string]string{
		"v4 host":          `[{"version":"4","address":"10.0.1.12/32"}]`,
		"v4 network":       `[{"version":"4","address":"10.0.1.12/24","gateway":"10.0.1.1"}]`,
		"v6 host":          `[{"version":"6","address":"fd00::5/128"}]`,
		"v6 network":       `[{"version":"6","address":"fd00::5/64","gateway":"fd00::1"}]`,
		"v4 host, listed":  `[{"version":"4","address":"10.0.1.12/32"}]`,
		"dual host":        `[{"version":"4","address":"10.0.1.12/32"},{"version":"6","address":"fd00::c/128"}]`,
		"dual network":     `[{"version":"4","address":"10.0.1.12/24","gateway":"10.0.1.1"},{"version":"6","address":"fd00::c/64","gateway":"fd00::1"}]`,
		"dual host, v6":    `[{"version":"6","address":"fd00::c/128"},{"version":"4","address":"10.0.1.12/32"}]`,
		"dual network, v6": `[{"version":"6","address":"fd00::c/64","gateway":"fd00::1"},{"version":"4","address":"10.0.1.12/24"}]`,
	}
	routes := map[string]string{
		"v4 network":       `,"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]`,
		"v6 network":       `,"routes":[{"dst":"::/0","gw":"fd00::1"}]`,
		"dual network":     `,"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}]`,
		"dual network, v6": `,"routes":[{"dst":"10.1.0.0/16","gw":"10.0.1.1"},{"dst":"::/0","gw":"fd00::1"}]`,
	}
	for name, v := range cases {
		for _, cniVersion := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			t.Run(name+" "+cniVersion, func(t *testing.T) {
				var want string
				if strings.HasPrefix(cniVersion, "0.") {
					// types040 always prints dns (empty here).
					want = `{"cniVersion":"` + cniVersion + `","ips":` + ips04[name] + routes[name] + `,"dns":{}}`
				} else {
					want = `{"cniVersion":"` + cniVersion + `","ips":` + ips[name] + routes[name] + `}`
				}
				var buf bytes.Buffer
				if err := RenderResult(&buf, BuildResult(v), cniVersion); err != nil {
					t.Fatal(err)
				}
				assertJSON(t, buf.Bytes(), want)
			})
		}
	}
}

func TestRenderResultLegacyAndDNS(t *testing.T) {
	ip4 := netip.MustParseAddr("10.0.1.12")
	n, err := ParseNetwork(`{"ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],"dns":{"nameservers":["10.0.0.10"],"search":["svc"]}}`, ip4)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := RenderResult(&buf, BuildResult(&Verified{IP: ip4, Network: n}), "1.1.0"); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, buf.Bytes(), `{"cniVersion":"1.1.0","ips":[{"address":"10.0.1.12/24","gateway":"10.0.1.1"}],
		"dns":{"nameservers":["10.0.0.10"],"search":["svc"]}}`)

	buf.Reset()
	if err := RenderResult(&buf, BuildResult(&Verified{IP: ip4}), "0.2.0"); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, buf.Bytes(), `{"cniVersion":"0.2.0","ip4":{"ip":"10.0.1.12/32"},"dns":{}}`)

	// 0.2.0 has one ip4 and one ip6: a dual-stack pod's two addresses fit.
	buf.Reset()
	dual := &Verified{IP: ip4, IPs: []netip.Addr{ip4, netip.MustParseAddr("fd00::c")}}
	if err := RenderResult(&buf, BuildResult(dual), "0.2.0"); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, buf.Bytes(), `{"cniVersion":"0.2.0","ip4":{"ip":"10.0.1.12/32"},"ip6":{"ip":"fd00::c/128"},"dns":{}}`)

	if err := RenderResult(&buf, BuildResult(&Verified{IP: ip4}), "9.9.9"); codeOf(err) != 1 {
		t.Fatalf("unknown version: %v", err)
	}
}

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
