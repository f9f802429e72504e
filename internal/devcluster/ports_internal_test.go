package devcluster

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

func TestPickedPortsLieBelowTheEphemeralRange(t *testing.T) {
	ports, err := reservePorts(Options{})
	if err != nil {
		t.Fatal(err)
	}
	limit := ephemeralStart()
	seen := map[int]string{}
	for name, port := range ports {
		if port < 10000 || port >= limit {
			t.Errorf("%s: port %d, want one in [10000, %d)", name, port, limit)
		}
		if other, dup := seen[port]; dup {
			t.Errorf("%s and %s share port %d", name, other, port)
		}
		seen[port] = name
	}
}

func TestALostBindIsRecognisedAsARace(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, bindErr := net.Listen("tcp", l.Addr().String())
	for _, err := range []error{
		bindErr,
		fmt.Errorf("dev node: %w", bindErr),
		errors.New(`kube-scheduler exit status 1; last lines of x.log:
    E1122 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:37231: listen tcp 127.0.0.1:37231: bind: address already in use"`),
		fmt.Errorf("wrapped: %w", syscall.EADDRINUSE),
	} {
		if !lostPortRace(err) {
			t.Errorf("lostPortRace(%q) = false, want true", err)
		}
	}
	if lostPortRace(errors.New("kube-apiserver exit status 1; last lines: invalid flag")) {
		t.Error("an unrelated failure was taken for a lost port race")
	}
}
