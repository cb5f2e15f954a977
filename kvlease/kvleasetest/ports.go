package kvleasetest

import (
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago: each is listened on until all n are found, then let go for
// the caller's server to take. They are drawn from below Linux's
// ephemeral range (32768-60999 by default), from which the kernel picks
// the local port of every outgoing connection: a port taken from there
// (listening on port 0) was taken, once, by a connection of the tests'
// own clients or another process between FreePorts and the server's
// bind ("address already in use", a cluster test failed). A port is
// handed out once per process. Another process that binds ports of its
// own in that range may still take one first.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for len(ports) < n {
		ln, err := listenFree()
		if err != nil {
			tb.Fatalf("kvleasetest: a free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// FreePort returns one TCP port on 127.0.0.1 that was free a moment ago
// (FreePorts).
func FreePort(tb testing.TB) int {
	tb.Helper()
	return FreePorts(tb, 1)[0]
}

// ConsecutiveFreePorts returns the first of n consecutive TCP ports on
// 127.0.0.1 that were free a moment ago (as FreePorts: below the
// ephemeral range, handed out once per process): for a program that
// numbers its ports from a base (leased dev-cluster).
func ConsecutiveFreePorts(tb testing.TB, n int) int {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		base := minFreePort + rand.IntN(maxFreePort-minFreePort-n)
		var lns []net.Listener
		for p := base; p < base+n && !handedOut.ports[p]; p++ {
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			for p := base; p < base+n; p++ {
				handedOut.ports[p] = true
			}
			return base
		}
	}
	tb.Fatalf("kvleasetest: no %d consecutive free ports", n)
	return 0
}

// Ports FreePorts draws from: [minFreePort, maxFreePort).
const (
	minFreePort = 20000
	maxFreePort = 32768
)

// handedOut holds the ports handed out in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// listenFree listens on a port of [minFreePort, maxFreePort) not handed
// out before in this process, or, after many tries, on any port.
func listenFree() (net.Listener, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		p := minFreePort + rand.IntN(maxFreePort-minFreePort)
		if handedOut.ports[p] {
			continue
		}
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		if err != nil {
			continue // in use
		}
		handedOut.ports[p] = true
		return ln, nil
	}
	return net.Listen("tcp", "127.0.0.1:0")
}
