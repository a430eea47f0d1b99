package ipam

import (
	"fmt"
	"io"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// BuildResult turns the verified addresses into an IPAM result (no
// interfaces, no ips[].interface), one entry per address in the pod's order
// (primary first): with ipscheduler.io/network each one's prefix and
// gateway, and its routes and DNS; without it each address as a host route
// (/32 or /128).
func BuildResult(v *Verified) *types100.Result {
	res := &types100.Result{CNIVersion: types100.ImplementedSpecVersion}
	if v.Network != nil {
		for _, nip := range v.Network.IPs {
			res.IPs = append(res.IPs, &types100.IPConfig{Address: nip.Address, Gateway: nip.Gateway})
		}
		res.Routes = v.Network.Routes
		res.DNS = v.Network.DNS
		return res
	}
	for _, ip := range v.Addresses() {
		bits := ip.BitLen()
		res.IPs = append(res.IPs, &types100.IPConfig{
			Address: net.IPNet{IP: net.IP(ip.AsSlice()), Mask: net.CIDRMask(bits, bits)},
		})
	}
	return res
}

// RenderResult prints res converted to the configuration's cniVersion
// (0.3.x/0.4.0 results get "version": "4"|"6" per address).
func RenderResult(w io.Writer, res types.Result, cniVersion string) error {
	converted, err := res.GetAsVersion(cniVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, MsgConvertResult, fmt.Sprintf("to cniVersion %q: %v", cniVersion, err))
	}
	return converted.PrintTo(w)
}
