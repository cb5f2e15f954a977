package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/grantor/timeline"
	"github.com/leased/leased/kvlease"
)

// httpFlags are serve's flags for the timeline page.
type httpFlags struct {
	listen      string
	allowPublic bool
	jaegerUI    string
}

func (h *httpFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&h.listen, "http-listen", "", "serve the timeline page (who held which lease when), /api/tenures and /events on http://HOST:PORT/ (default: off; port 0 picks a free one)")
	fs.BoolVar(&h.allowPublic, "allow-public-http", false, "allow --http-listen on a non-loopback address: the page has no authorization, and anyone who can reach it sees every lease name, holder and reason")
	fs.StringVar(&h.jaegerUI, "jaeger-ui", "", "Jaeger UI base URL (e.g. http://localhost:16686): the timeline links each tenure to its grant's trace")
}

func (h *httpFlags) options(log *slog.Logger) []timeline.Option {
	opts := []timeline.Option{timeline.WithLogger(log.With("component", "timeline"))}
	if h.jaegerUI != "" {
		opts = append(opts, timeline.WithJaegerUI(h.jaegerUI))
	}
	return opts
}

// listenLoopbackOnly reports whether host accepts connections from this
// host only; "" and unspecified addresses (0.0.0.0, ::) listen everywhere.
func listenLoopbackOnly(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// open checks the flags and, with --http-listen, binds the page's
// listener, before anything else starts: a refused flag or a busy port
// fails serve at once. It returns a nil listener without --http-listen.
func (h *httpFlags) open(log *slog.Logger) (net.Listener, error) {
	if h.listen == "" {
		switch {
		case h.allowPublic:
			return nil, usageError{errors.New("--allow-public-http needs --http-listen")}
		case h.jaegerUI != "":
			return nil, usageError{errors.New("--jaeger-ui needs --http-listen (it is for the timeline page's trace links)")}
		}
		return nil, nil
	}
	if err := timeline.CheckOptions(h.options(log)...); err != nil {
		return nil, usageError{fmt.Errorf("--jaeger-ui: %w", err)}
	}
	host, _, err := net.SplitHostPort(h.listen)
	if err != nil {
		return nil, usageError{fmt.Errorf("--http-listen %q: %v", h.listen, err)}
	}
	if !listenLoopbackOnly(host) {
		if !h.allowPublic {
			return nil, usageError{fmt.Errorf("--http-listen %q is not a loopback address: the timeline page has no authorization, "+
				"and anyone who can reach it sees every lease name, holder and reason; bind 127.0.0.1 (and reach it through "+
				"an SSH tunnel or a proxy that authenticates) or, on a network you trust, give --allow-public-http", h.listen)}
		}
		log.Warn("--allow-public-http: the timeline page on a non-loopback address shows every lease name, holder and reason to anyone who reaches it",
			"addr", h.listen)
	}
	ln, err := net.Listen("tcp", h.listen)
	if err != nil {
		return nil, listenError("--http-listen", err)
	}
	return ln, nil
}

// listenError is the error of a listener flag whose net.Listen failed: a
// port in use (or not ours to bind) is this machine's state, exit 1 as for
// the NATS ports; anything else is the flag's value (exit 2, with usage).
// Both were exit 2 (found by an outside client).
func listenError(flag string, err error) error {
	err = fmt.Errorf("%s: %w", flag, err)
	if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return err
	}
	return usageError{err}
}

// serve serves the timeline of hist, with the live leases of st, on ln and logs "http listening" with
// the address bound. The returned stop ends the page's event streams and
// closes the server.
func (h *httpFlags) serve(ln net.Listener, hist *history.Stream, st *kvlease.Store, log *slog.Logger) (stop func(), err error) {
	th, err := timeline.New(hist, append(h.options(log), timeline.WithLive(st.List))...)
	if err != nil {
		return nil, usageError{err}
	}
	// The event streams never go idle: ending their requests' context is
	// what lets Shutdown finish.
	base, cancel := context.WithCancel(context.Background())
	hs, served := serveHTTP(ln, "the timeline", th, base)
	addr := ln.Addr().String()
	log.Info("http listening", "addr", addr, "url", "http://"+addr+"/", "jaeger_ui", h.jaegerUI)
	return func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		<-served
	}, nil
}
