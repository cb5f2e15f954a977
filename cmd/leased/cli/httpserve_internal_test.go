package cli

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// elsewhere is a loopback listener that says it is bound to another
// address, as one on 0.0.0.0 or a public address is.
type elsewhere struct{ net.Listener }

func (elsewhere) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 9464} }

// Only a loopback listener refuses other Hosts: on another address a load
// balancer's or an orchestrator's probe of /healthz names whatever host
// it likes (a Kubernetes probe, the pod's IP or its own Host header), and
// what reaches the listener from elsewhere needs no DNS rebinding.
func TestServeHTTPHostsByAddress(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	for _, tc := range []struct {
		name     string
		loopback bool
		want     int
	}{
		{"loopback", true, http.StatusMisdirectedRequest},
		{"elsewhere", false, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			if !tc.loopback {
				ln = elsewhere{ln}
			}
			hs, served := serveHTTP(ln, "the test", ok, nil)
			t.Cleanup(func() { _ = hs.Close(); <-served })
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/healthz", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "lb-probe.internal.example"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("Host %s on a listener at %s: %d %q, want %d", req.Host, ln.Addr(), resp.StatusCode, b, tc.want)
			}
		})
	}
}
