package devcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// The ports of the plane's components, chosen free before they start.

// reservePorts checks the requested ports and picks free ones for the rest.
// Picked ports lie below the kernel's ephemeral range: a port from that range
// can be taken, between this check and the component's bind, by any outgoing
// connection on the host, and the plane makes many.
func reservePorts(opts Options) (map[string]int, error) {
	requested := []struct {
		name string
		port int
	}{
		{"kube-apiserver", opts.APIServerPort},
		{"etcd", opts.EtcdPort},
		{"etcd-peer", 0},
		{"kube-controller-manager", 0},
		{"kube-scheduler", 0},
		{"dev-node", 0},
		{"dev-node-proxy", 0},
	}
	ports := map[string]int{}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, r := range requested {
		var l net.Listener
		var err error
		if r.port != 0 {
			if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))); err != nil {
				return nil, fmt.Errorf("%s: %w: 127.0.0.1:%d (%w); choose another port or stop what listens there", r.name, ErrPortInUse, r.port, err)
			}
		} else if l, err = listenFree(); err != nil {
			return nil, fmt.Errorf("finding a free port for %s: %w", r.name, err)
		}
		held = append(held, l)
		ports[r.name] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// listenFree binds a random free port on 127.0.0.1 between 10000 and the
// start of the ephemeral range, or any free port if none is found there.
func listenFree() (net.Listener, error) {
	low, high := 10000, ephemeralStart()
	for i := 0; i < 50 && high > low; i++ {
		port := low + rand.IntN(high-low)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralStart returns the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768 // Linux's default
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return n
}
