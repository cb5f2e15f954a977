package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"
)

// MaxHTTPConns is how many connections each of our HTTP listeners (the
// timeline page's --http-listen, and --metrics-listen) holds at once;
// more wait, unaccepted, until one closes. Each holds a file descriptor
// of the process, which serve's NATS server shares: idle keep-alive
// connections, never closed, held as many as a client opened (3,000 to
// the page grew serve's RSS by 56 MB; 20,000 took every descriptor, and
// the NATS server accepted no client, "too many open files": leases
// could be neither granted nor renewed; found by an outside client). The
// page's own (MaxFollowers event streams and their assets), and a
// scraper's, probes' and profiles', fit well within it.
const MaxHTTPConns = 256

// httpIdleTimeout closes a keep-alive connection idle for this long,
// giving its slot back.
const httpIdleTimeout = time.Minute

// serveHTTP serves h on ln, in a goroutine, as each of our HTTP listeners
// is served: at most MaxHTTPConns connections at once, idle ones closed
// after httpIdleTimeout, a request's header read within 5 s, and on a
// loopback address only requests for localhost or an IP address
// (loopbackHosts; what names the listener in its refusal). base, if not
// nil, is the parent of every request's context. It returns the server,
// for Shutdown or Close, and a channel closed once it has stopped
// serving.
func serveHTTP(ln net.Listener, what string, h http.Handler, base context.Context) (*http.Server, <-chan struct{}) {
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		h = loopbackHosts(what, h)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout}
	if base != nil {
		hs.BaseContext = func(net.Listener) context.Context { return base }
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = hs.Serve(netutil.LimitListener(ln, MaxHTTPConns)) }()
	return hs, served
}

// loopbackHosts serves h only to requests for a host that no DNS answer
// can make another site's: an IP address, localhost or a name under
// .localhost (RFC 6761, which browsers resolve to loopback themselves).
// Others are refused 421. A listener bound to loopback, its only
// protection, answered any Host, so a site the operator visited could
// rebind its own name to 127.0.0.1 and read it with the browser's help,
// same-origin (DNS rebinding): the timeline's every lease name, holder
// and reason (found by an outside client: curl -H 'Host: evil.example'
// got the tenures), and --metrics-listen's metrics and, with --pprof,
// the process's command line and profiles. On another address (a load
// balancer's probes of /healthz name any host) every Host is answered:
// what reaches it from elsewhere needs no rebinding.
func loopbackHosts(what string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			http.Error(w, fmt.Sprintf("host %q: %s on a loopback address answers requests for localhost or an IP address only "+
				"(another name may be a DNS rebinding attack); behind a proxy, have it send Host: localhost", r.Host, what),
				http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether hostport (a request's Host) names an IP
// address, localhost or a name under .localhost; "" (HTTP/1.0, which
// browsers do not send) is accepted.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	return host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil
}
