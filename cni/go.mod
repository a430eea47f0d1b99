module github.com/ipscheduler/ipscheduler/cni

go 1.26

require (
	github.com/containernetworking/cni v1.3.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/vishvananda/netns v0.0.4 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.23.0 // indirect
)
