package kvleasetest

import (
	"net"
	"testing"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago: each is listened on until all n are found, then let go for
// the caller's server to take. Another process may take one first; the
// kernel hands out ephemeral ports in turn, so that is rare.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
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
