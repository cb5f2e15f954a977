package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/kvlease"
)

type serveFlags struct {
	listen        string
	data          string
	sync          string
	bucket        string
	replicas      int
	grantorMargin time.Duration
	logFormat     string
	debug         bool
}

func newServe(stderr io.Writer) *cobra.Command {
	f := serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a grantor node with an embedded NATS JetStream server",
		Long: `serve starts a NATS server with JetStream on --listen, storing its data in
--data, and opens (creating if needed) the lease bucket. Every write is synced
to disk before it is acknowledged unless --sync unsafe-interval is given.
It runs until SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f, stderr) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client listen address host:port (port 0 picks a free one)")
	fl.StringVar(&f.data, "data", defaultDataDir(), "data directory for the JetStream store")
	fl.StringVar(&f.sync, "sync", "always", "store sync policy: always (sync before ack) or unsafe-interval (may lose acknowledged grants on power loss)")
	fl.StringVar(&f.bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	fl.IntVar(&f.replicas, "replicas", 1, "replicas of the lease bucket when it is created")
	fl.DurationVar(&f.grantorMargin, "grantor-margin", kvlease.DefaultGrantorMargin, "added to every lease duration before rounding up to the server TTL")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVar(&f.debug, "debug", false, "log debug messages, including the NATS server's")
	return cmd
}

// defaultDataDir is $XDG_DATA_HOME/leased, or ~/.local/share/leased.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "leased")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "leased")
	}
	return "leased-data"
}

func serve(ctx context.Context, f serveFlags, stderr io.Writer) error {
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	log, err := newLogger(stderr, f.logFormat, level)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %q: %v", f.listen, err)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return usageError{fmt.Errorf("--listen %q: bad port", f.listen)}
	}
	cfg := embedded.Config{Host: host, Port: port, DataDir: f.data, Logger: log.With("component", "nats"), Debug: f.debug}
	switch f.sync {
	case "always":
		cfg.Sync = embedded.SyncAlways
	case "unsafe-interval":
		cfg.Sync = embedded.UnsafeSyncInterval
		log.Warn("store acknowledges writes before syncing them: a power loss can hand out a fencing token twice")
	default:
		return usageError{fmt.Errorf("--sync %q: want always or unsafe-interval", f.sync)}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if err := os.MkdirAll(f.data, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		return err
	}
	defer srv.Shutdown()

	nc, err := srv.Connect(nats.Name("leased-serve"))
	if err != nil {
		return fmt.Errorf("connect to embedded server: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := kvlease.Open(octx, js, kvlease.WithBucket(f.bucket), kvlease.WithReplicas(f.replicas),
		kvlease.WithGrantorMargin(f.grantorMargin), kvlease.WithLogger(log))
	if err != nil {
		return err
	}
	log.Info("ready", "url", srv.ClientURL(), "data", f.data, "bucket", st.Bucket(), "sync", srv.Sync().String())
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}
