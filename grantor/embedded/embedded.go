// Package embedded runs a single nats-server with JetStream inside the
// current process. It is what `leased serve` starts by default and what the
// tests start (through [github.com/leased/leased/kvlease/kvleasetest]).
//
// # Durability
//
// JetStream's file store acknowledges a write before it reaches the disk and
// fsyncs every two minutes by default. For a lease store that means a
// revision, which is a fencing token, can be handed out twice after a power
// loss. This package therefore defaults to [SyncAlways]: every write is synced
// before it is acknowledged. [UnsafeSyncInterval] restores JetStream's lazy
// default and is named for what it risks.
//
// # One server per data directory
//
// [Start] takes an exclusive lock (flock(2)) on the file leased.lock in the
// data directory before the server opens its store, and writes its process
// id into it. A second server on the same directory fails at once with
// [ErrLocked]: two servers on one store would each grant from their own copy
// and hand out one fencing token twice. The lock is released by
// [Server.Shutdown], and by the kernel when the process exits, however it
// exits.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// SyncMode says when the JetStream file store flushes writes to disk.
type SyncMode int

const (
	// SyncAlways syncs every write before it is acknowledged. The default.
	SyncAlways SyncMode = iota
	// UnsafeSyncInterval acknowledges writes before they are on disk and syncs
	// them every [Config.SyncInterval]. An OS crash or power loss can lose
	// acknowledged grants and hand out a fencing token twice. Opt-in only.
	UnsafeSyncInterval
)

// String returns the mode's flag spelling.
func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case UnsafeSyncInterval:
		return "unsafe-interval"
	default:
		return "SyncMode(" + strconv.Itoa(int(m)) + ")"
	}
}

// ErrConfig is wrapped by every configuration error [Start] returns.
var ErrConfig = errors.New("embedded: invalid config")

// ErrLocked is wrapped by the error [Start] returns when another server
// holds the data directory's lock. A [*LockedError] carries the details.
var ErrLocked = errors.New("embedded: data directory in use")

// LockedError says which directory is locked and, when the lock file
// names one, by which process.
type LockedError struct {
	Dir string // the data directory
	PID int    // the holder's process id; 0 if unknown
}

func (e *LockedError) Error() string {
	holder := "another process (pid unknown)"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data directory %s is locked by %s (%s): one server per data directory",
		e.Dir, holder, lockPath(e.Dir))
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Unwrap() error { return ErrLocked }

// Config configures an embedded server. The zero value is not valid: DataDir
// is required.
type Config struct {
	// Name is the server name, unique within a cluster. Default: a name
	// nats-server derives from its key.
	Name string
	// Host is the client listen address. Default "127.0.0.1".
	Host string
	// Port is the client port. 0 picks a free port, as net.Listen does.
	Port int
	// DataDir holds the JetStream store. Required.
	DataDir string
	// Sync is the store's sync policy. Default [SyncAlways].
	Sync SyncMode
	// SyncInterval is the flush interval for [UnsafeSyncInterval]. Default
	// two minutes (nats-server's own default).
	SyncInterval time.Duration
	// ReadyTimeout bounds how long Start waits for the server to accept
	// clients. Default 10 s.
	ReadyTimeout time.Duration
	// ClusterName, if set, makes the server a member of a JetStream
	// cluster of that name; Name is then required and must be unique.
	ClusterName string
	// ClusterHost and ClusterPort are where routes from the other members
	// arrive. Defaults: Host, and a free port.
	ClusterHost string
	ClusterPort int
	// Routes are the other members' route URLs (nats-route://host:port).
	// Listing this server's own route too is harmless, so every member can
	// be given the same list.
	Routes []string
	// Logger receives the server's log. Default: discard.
	Logger *slog.Logger
	// Debug also forwards nats-server debug logs.
	Debug bool
}

// Validate reports the first problem in c, wrapped in [ErrConfig].
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return fmt.Errorf("%w: data directory is required", ErrConfig)
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("%w: port %d out of range 0..65535", ErrConfig, c.Port)
	case c.Sync != SyncAlways && c.Sync != UnsafeSyncInterval:
		return fmt.Errorf("%w: unknown sync mode %v", ErrConfig, c.Sync)
	case c.SyncInterval < 0:
		return fmt.Errorf("%w: negative sync interval", ErrConfig)
	case c.Host != "" && net.ParseIP(c.Host) == nil && c.Host != "localhost":
		return fmt.Errorf("%w: host %q is not an IP address", ErrConfig, c.Host)
	case c.ClusterName != "" && c.Name == "":
		return fmt.Errorf("%w: a cluster member needs a unique name", ErrConfig)
	case c.ClusterName == "" && (len(c.Routes) > 0 || c.ClusterPort != 0):
		return fmt.Errorf("%w: routes and a cluster port need a cluster name", ErrConfig)
	case c.ClusterPort < 0 || c.ClusterPort > 65535:
		return fmt.Errorf("%w: cluster port %d out of range 0..65535", ErrConfig, c.ClusterPort)
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%w: route %q is not a URL like nats-route://host:port", ErrConfig, r)
		}
	}
	return nil
}

// Server is a running embedded nats-server with JetStream.
type Server struct {
	ns         *server.Server
	cfg        Config
	lock       *os.File
	unlockOnce sync.Once
}

// Start validates cfg, locks the data directory, starts the server and waits
// until it accepts clients and JetStream is ready. Errors wrap [ErrConfig] or
// [ErrLocked], or say why the server did not start.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true,
		// No HTTP monitor, no leaf or gateway listeners: only what we use.
	}
	if cfg.ClusterName != "" {
		host, port := cfg.ClusterHost, cfg.ClusterPort
		if host == "" {
			host = cfg.Host
		}
		if port == 0 {
			port = server.RANDOM_PORT
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: port}
		for _, r := range cfg.Routes {
			u, _ := url.Parse(r) // checked by Validate
			opts.Routes = append(opts.Routes, u)
		}
	}
	switch cfg.Sync {
	case SyncAlways:
		opts.SyncAlways = true
	case UnsafeSyncInterval:
		opts.SyncInterval = cfg.SyncInterval
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		unlock(lock)
		return nil, fmt.Errorf("embedded: new server: %w", err)
	}
	if cfg.Logger != nil {
		ns.SetLoggerV2(&logger{l: cfg.Logger}, cfg.Debug, false, false)
	}
	s := &Server{ns: ns, cfg: cfg, lock: lock}
	ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded: server not ready within %v", cfg.ReadyTimeout)
	}
	if !ns.JetStreamEnabled() {
		s.Shutdown()
		return nil, errors.New("embedded: JetStream failed to start (see the server log)")
	}
	return s, nil
}

// ClientURL returns the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr returns the client listener's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.ns.Addr().(*net.TCPAddr).Port))
}

// ClusterAddr returns the route listener's host:port ("" if not clustered).
func (s *Server) ClusterAddr() string {
	if s.cfg.ClusterName == "" {
		return ""
	}
	return s.ns.ClusterAddr().String()
}

// Name returns the server's name.
func (s *Server) Name() string { return s.ns.Name() }

// Sync returns the store's sync policy.
func (s *Server) Sync() SyncMode { return s.cfg.Sync }

// NATS returns the underlying nats-server, for callers that need more than
// this package offers.
func (s *Server) NATS() *server.Server { return s.ns }

// Connect opens a client connection over TCP. TCP, not an in-process pipe,
// so that clients see real socket faults.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(s.ClientURL(), opts...)
}

// Shutdown stops the server, waits until it has stopped, and releases the
// data directory. It may be called more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.unlockOnce.Do(func() { unlock(s.lock) })
}

// logger bridges nats-server's logger to slog.
type logger struct{ l *slog.Logger }

func (g *logger) Noticef(format string, v ...any) { g.l.Info(fmt.Sprintf(format, v...)) }
func (g *logger) Warnf(format string, v ...any)   { g.l.Warn(fmt.Sprintf(format, v...)) }
func (g *logger) Fatalf(format string, v ...any)  { g.l.Error(fmt.Sprintf(format, v...)) }
func (g *logger) Errorf(format string, v ...any)  { g.l.Error(fmt.Sprintf(format, v...)) }
func (g *logger) Debugf(format string, v ...any)  { g.l.Debug(fmt.Sprintf(format, v...)) }
func (g *logger) Tracef(format string, v ...any)  { g.l.Debug(fmt.Sprintf(format, v...)) }
