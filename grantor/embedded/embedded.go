package embedded

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
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

// ErrNotLocked is returned by [LockHolder] when no running server holds a
// data directory's lock.
var ErrNotLocked = errors.New("embedded: no server holds the data directory")

// ErrInsecure is wrapped by the error [Start] returns when the server would
// listen on a non-loopback address without authentication and
// [Config.AllowInsecure] is not set.
var ErrInsecure = errors.New("embedded: refusing to listen without authentication")

// ErrStart is wrapped by the error [Start] and [Run] return when the server was
// configured but did not come up: a port already in use, a store JetStream
// cannot open. The error carries nats-server's own reason.
var ErrStart = errors.New("embedded: server did not start")

// ErrReload is wrapped by the error [Server.Reload] returns when
// nats-server refuses the new options (one that cannot change while the
// server runs); the server keeps running as it was.
var ErrReload = errors.New("embedded: reload refused")

// ErrNameConflict is wrapped by the error [Start] returns when another
// server of the cluster has this server's name, and by the errors
// [Server.NameConflicts] delivers. JetStream tells the nodes of a cluster
// apart by name: a second node with one takes part in the raft groups as
// the first, and acknowledged writes were lost and fencing tokens handed
// out twice (found by an outside client).
var ErrNameConflict = errors.New("embedded: another server of the cluster has this name")

// ErrClusterNameMismatch is wrapped by what [Server.ClusterNameMismatches]
// delivers: a route between this server and another was refused because
// their cluster names differ. nats-server logs it once per route and
// then retries it quietly, while JetStream waits for a quorum it will not
// get; neither side can tell which name is wrong.
var ErrClusterNameMismatch = errors.New("embedded: a route was refused: the two servers have different cluster names")

// ErrStoreWrite is wrapped by what [Server.StoreWriteFailures] delivers:
// nats-server failed a write to its store (a stream's or a consumer's
// files, a raft log): no space left on the disk, an I/O error. It then
// refuses every later write to that store, answering none of them (its
// clients see timeouts), until the server restarts, even once the disk
// has room again: the node cannot grant or renew a lease on it.
var ErrStoreWrite = errors.New("embedded: the NATS server failed a write to its store")

// ErrStandaloneStore is wrapped by the error [Start] returns when a
// cluster member's data directory holds the JetStream streams of a server
// that ran without a cluster (no JetStream cluster metadata beside them).
// nats-server does not carry such streams into a cluster: the cluster's
// metadata does not know them, so the lease bucket was made anew in the
// cluster, its revisions (the fencing tokens) starting over, while the
// node's old copy served stale leases to some readers (found by an
// outside client who added --cluster-name to a single node).
var ErrStandaloneStore = errors.New("embedded: the data directory holds the streams of a server that ran without a cluster")

// ErrClusterStore is wrapped by the error [Start] returns when a server
// without a cluster is given the data directory of a JetStream cluster's
// member. It would serve its own copy of the cluster's streams, which may
// be behind the cluster's: a node restarted without --cluster-name granted
// a fencing token the cluster had already given, and that grant was gone
// once it rejoined (found by an outside client).
var ErrClusterStore = errors.New("embedded: the data directory is a JetStream cluster member's")

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
// (or Base's store directory) is required.
//
// With a Base, every field of Config that is set (not zero) overrides the
// corresponding option of Base; a zero field keeps Base's value, and falls
// back to the default documented here when Base has none. Sync, JetStream
// (always on) and signal handling (off) are always Config's.
type Config struct {
	// Base holds the options of a nats-server configuration file
	// ([LoadConfigFile]): TLS, authorization, users, accounts, cluster TLS
	// and route authorization, limits. Start does not modify it. Default:
	// none.
	Base *server.Options
	// AllowInsecure allows a client or route listener on an address other
	// than loopback without authentication. Anyone who can reach such a
	// port can write the lease bucket directly. Default false: Start
	// returns [ErrInsecure].
	AllowInsecure bool
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

// withBase returns c with its zero fields taken from c.Base.
func (c Config) withBase() Config {
	b := c.Base
	if b == nil {
		return c
	}
	if c.Name == "" {
		c.Name = b.ServerName
	}
	if c.Host == "" {
		c.Host = b.Host
	}
	if c.Port == 0 && b.Port > 0 {
		c.Port = b.Port
	}
	if c.DataDir == "" {
		c.DataDir = b.StoreDir
	}
	if c.ClusterName == "" {
		c.ClusterName = b.Cluster.Name
	}
	if c.ClusterHost == "" {
		c.ClusterHost = b.Cluster.Host
	}
	if c.ClusterPort == 0 && b.Cluster.Port > 0 {
		c.ClusterPort = b.Cluster.Port
	}
	if c.Routes == nil {
		for _, u := range b.Routes {
			c.Routes = append(c.Routes, u.String())
		}
	}
	return c
}

// LoadConfigFile reads a nats-server configuration file with nats-server's
// own parser, for [Config.Base]. Errors wrap [ErrConfig].
func LoadConfigFile(path string) (*server.Options, error) {
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		// nats-server's error text is its warnings and errors, each on a
		// line of its own: the errors alone, on one line.
		if list, ok := err.(interface{ Errors() []error }); ok && len(list.Errors()) > 0 {
			msgs := make([]string, len(list.Errors()))
			for i, e := range list.Errors() {
				msgs[i] = e.Error()
			}
			return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	return opts, nil
}

// Validate reports the first problem in c, wrapped in [ErrConfig].
func (c Config) Validate() error {
	c = c.withBase()
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

// RoutePingInterval and RouteMaxPingsOut are how a member of an embedded
// cluster finds a peer that has stopped answering (a paused or cut-off
// process): it pings each route every RoutePingInterval and closes one
// that leaves RouteMaxPingsOut pings unanswered, within about 4 s. Until
// the route closes, the other members still send the peer its share of
// the lease service's requests and of JetStream's direct reads, where they
// wait unanswered; with nats-server's defaults (every 30 s, 2 pings) that
// lasted 60–90 s, longer than a lease, and holders renewing through the
// healthy members lost their leases. A configuration file (Config.Base)
// that sets cluster ping_interval or ping_max keeps its own.
const (
	RoutePingInterval = time.Second
	RouteMaxPingsOut  = 3
)

// options validates c and returns it with its defaults, and the
// nats-server options it starts (or reloads) a server with.
func (c Config) options() (Config, *server.Options, error) {
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	c = c.withBase()
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 10 * time.Second
	}
	port := c.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	// Without a Base: no HTTP monitor, no leaf or gateway listeners, only
	// what we use. A Base may add them.
	opts := &server.Options{}
	if c.Base != nil {
		opts = c.Base.Clone()
	}
	// The server logs through c.Logger (SetLoggerV2), never by the
	// file's logging options: they stay unset, so that a reload that
	// changes them does not make nats-server replace that logger with
	// its own (to stderr, in its own format), and with it the watch for
	// fatal errors, name conflicts and cluster name mismatches.
	opts.Debug, opts.Trace, opts.TraceVerbose, opts.TraceHeaders = false, false, false, false
	opts.Logtime, opts.LogtimeUTC, opts.LogFile, opts.LogSizeLimit, opts.LogMaxFiles = false, false, "", 0, 0
	opts.Syslog, opts.RemoteSyslog = false, ""
	opts.ServerName, opts.Host, opts.Port = c.Name, c.Host, port
	opts.JetStream, opts.StoreDir, opts.NoSigs = true, c.DataDir, true
	if c.ClusterName != "" {
		host, port := c.ClusterHost, c.ClusterPort
		if host == "" {
			host = c.Host
		}
		if port == 0 {
			port = server.RANDOM_PORT
		}
		// Only these fields: the Base's cluster TLS and authorization stay.
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = c.ClusterName, host, port
		if opts.Cluster.PingInterval == 0 && opts.Cluster.MaxPingsOut == 0 { // unless the Base sets them
			opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut = RoutePingInterval, RouteMaxPingsOut
		}
		opts.Routes = nil
		for _, r := range c.Routes {
			u, _ := url.Parse(r) // checked by Validate
			opts.Routes = append(opts.Routes, u)
		}
	}
	switch c.Sync {
	case SyncAlways:
		opts.SyncAlways, opts.SyncInterval = true, 0
	case UnsafeSyncInterval:
		opts.SyncAlways, opts.SyncInterval = false, c.SyncInterval
	}
	if !c.AllowInsecure {
		if err := checkExposure(opts); err != nil {
			return c, nil, err
		}
	}
	return c, opts, nil
}

// Server is a running embedded nats-server with JetStream.
type Server struct {
	ns         *server.Server
	cfg        Config
	lock       *os.File
	unlockOnce sync.Once
	log        *logger

	instance, predecessor string // see Instance and Predecessor
}

// Start validates cfg, locks the data directory, starts the server and waits
// until it accepts clients and JetStream is ready. Errors wrap [ErrConfig],
// [ErrInsecure], [ErrLocked], [ErrStandaloneStore] or [ErrClusterStore],
// or say why the server did not start.
func Start(cfg Config) (*Server, error) {
	cfg, opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	member, streams := storeOf(cfg.DataDir)
	if opts.Cluster.Name == "" && member && len(streams) > 0 {
		unlock(lock)
		return nil, fmt.Errorf("%w: %s has %s and JetStream cluster metadata; without a cluster name this server would serve "+
			"its own copy of the cluster's streams, which may be behind, and grant fencing tokens the cluster has given: "+
			"start it with its cluster name and routes, or on a new data directory",
			ErrClusterStore, cfg.DataDir, strings.Join(streams, ", "))
	}
	if opts.Cluster.Name != "" && !member && len(streams) > 0 {
		unlock(lock)
		return nil, fmt.Errorf("%w: %s has %s and no JetStream cluster metadata; a cluster would make the lease "+
			"bucket anew, its revisions (the fencing tokens) starting over: run this node without a cluster name, "+
			"or start the cluster on new data directories (moving the streams there with nats stream backup and restore)",
			ErrStandaloneStore, cfg.DataDir, strings.Join(streams, ", "))
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		unlock(lock)
		return nil, fmt.Errorf("embedded: new server: %w", err)
	}
	s := &Server{ns: ns, cfg: cfg, lock: lock, log: newLogger(cfg.Logger), instance: nuid.Next()}
	if err := run(ns, s.log, cfg.Debug, cfg.ReadyTimeout); err != nil {
		s.Shutdown()
		return nil, err
	}
	// Once it runs: a start that failed (a port in use) named itself the
	// predecessor of the next, in place of the process before it.
	if lock != nil { // without a lock, the process before may still run
		if s.instance, s.predecessor, err = succeed(cfg.DataDir); err != nil {
			s.Shutdown()
			return nil, err
		}
	}
	return s, nil
}

// storeOf says whether the JetStream store in dir has the raft state of a
// cluster's metadata group (<store>/<system account>/_js_/_meta_), which a
// cluster member's has and a server's without a cluster has not, and lists
// its streams ("ACCOUNT > STREAM").
func storeOf(dir string) (member bool, streams []string) {
	store := filepath.Join(dir, server.JetStreamStoreDir)
	metas, _ := filepath.Glob(filepath.Join(store, "*", "_js_", "_meta_"))
	dirs, _ := filepath.Glob(filepath.Join(store, "*", "streams", "*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			streams = append(streams, filepath.Base(filepath.Dir(filepath.Dir(d)))+" > "+filepath.Base(d))
		}
	}
	return len(metas) > 0, streams
}

// NameConflicts delivers an error wrapping [ErrNameConflict] when another
// server of the cluster turns out to have this server's name (nats-server
// refuses each route between the two, and logs it; it neither stops nor
// keeps the other out of the cluster). [Start] returns such an error if
// one comes before the server is ready; one that comes later is for the
// caller to act on (the node that joined last should stop). At most one
// error waits to be received.
func (s *Server) NameConflicts() <-chan error { return s.log.conflict }

// ClusterNameMismatches delivers an error wrapping [ErrClusterNameMismatch]
// when a route to or from this server is refused for a different cluster
// name. At most one error waits to be received.
func (s *Server) ClusterNameMismatches() <-chan error { return s.log.mismatch }

// StoreWriteFailures delivers an error wrapping [ErrStoreWrite] when the
// server fails a write to its store, which it then writes no more until
// it restarts. At most one error waits to be received.
func (s *Server) StoreWriteFailures() <-chan error { return s.log.werr }

// Run starts ns and waits, at most timeout, until it accepts clients with
// JetStream on. nats-server reports why it cannot serve (a port in use, a
// store it cannot open) only through its logger's Fatalf, and then never
// becomes ready: Run always installs a logger, passing the server's log
// to l (nil: none), and returns at once with that reason, wrapping
// [ErrStart]. On an error the caller shuts ns down. Start uses it, and so
// do tests that configure a nats-server of their own.
func Run(ns *server.Server, l *slog.Logger, debug bool, timeout time.Duration) error {
	return run(ns, newLogger(l), debug, timeout)
}

func run(ns *server.Server, log *logger, debug bool, timeout time.Duration) error {
	ns.SetLoggerV2(log, debug, false, false)
	ns.Start()
	return waitReady(ns, log, timeout)
}

// waitReady waits until ns accepts clients with JetStream on, and returns
// at once, with nats-server's reason, if it reports that it cannot, or
// that another server of its cluster has its name.
func waitReady(ns *server.Server, log *logger, timeout time.Duration) error {
	const poll = 50 * time.Millisecond // ReadyForConnections sleeps 25ms between its checks
	for deadline := time.Now().Add(timeout); ; {
		if ns.ReadyForConnections(min(poll, max(time.Until(deadline), time.Millisecond))) {
			break
		}
		select {
		case msg := <-log.fatal:
			return fmt.Errorf("%w: %s", ErrStart, msg)
		case err := <-log.conflict:
			return err
		default:
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: not ready within %v", ErrStart, timeout)
		}
	}
	if !ns.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream failed to start (see the server log)", ErrStart)
	}
	return nil
}

// checkExposure returns an error wrapping [ErrInsecure] if opts listen for
// clients, routes or gateways on a non-loopback address that does not
// require authentication.
func checkExposure(o *server.Options) error {
	if !loopback(o.Host) && (!clientAuth(o) || passwordless(o) != "") {
		what := "no authorization (users, nkeys, token, operator JWTs or verified TLS client certificates)"
		switch {
		case o.NoAuthUser != "":
			what = fmt.Sprintf("a no_auth_user (%s): clients without credentials are let in as that user", o.NoAuthUser)
		case passwordless(o) != "":
			what = fmt.Sprintf("a user without a password (%s): clients that name it are let in", passwordless(o))
		}
		return fmt.Errorf("%w: client port on %s has %s: anyone who can reach it can write the lease bucket directly",
			ErrInsecure, net.JoinHostPort(o.Host, strconv.Itoa(max(o.Port, 0))), what)
	}
	if o.Cluster.Name != "" && !loopback(o.Cluster.Host) && !routeAuth(o) {
		return fmt.Errorf("%w: cluster port on %s has no authorization (cluster authorization or cluster TLS): "+
			"anyone who can reach it can join the cluster as a route",
			ErrInsecure, net.JoinHostPort(o.Cluster.Host, strconv.Itoa(max(o.Cluster.Port, 0))))
	}
	if o.Gateway.Name != "" && !loopback(o.Gateway.Host) && !gatewayAuth(o) {
		return fmt.Errorf("%w: gateway port on %s has no authorization (gateway authorization or gateway TLS): "+
			"anyone who can reach it can connect a cluster of their own and publish into leased's account",
			ErrInsecure, net.JoinHostPort(o.Gateway.Host, strconv.Itoa(max(o.Gateway.Port, 0))))
	}
	return nil
}

// loopback reports whether host only accepts connections from this host.
// "" and unspecified addresses (0.0.0.0, ::) listen everywhere.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientAuth reports whether clients must authenticate: the cases in which
// nats-server itself sets auth_required, or verifies client certificates,
// unless a no_auth_user lets a client without credentials in as that user
// (found by an outside client: with users and no_auth_user, anonymous
// clients wrote the bucket).
func clientAuth(o *server.Options) bool {
	if o.NoAuthUser != "" {
		return false
	}
	return len(o.Users) > 0 || len(o.Nkeys) > 0 || o.Username != "" || o.Authorization != "" ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.CustomClientAuthentication != nil ||
		o.AuthCallout != nil || (o.TLSConfig != nil && o.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert)
}

// passwordless is the name of a user that needs no password, or "": with
// none, anyone who names the user is let in as it (found by an outside
// client: the user the docs name, with all the bucket's permissions).
// Where client certificates are verified, users are those certificates'
// subjects, and need none.
func passwordless(o *server.Options) string {
	if o.TLSConfig != nil && o.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert {
		return ""
	}
	if o.Username != "" && o.Password == "" {
		return o.Username
	}
	for _, u := range o.Users {
		if u.Password == "" {
			return u.Username
		}
	}
	return ""
}

// routeAuth reports whether routes must authenticate. Cluster TLS from a
// configuration file always verifies the peer's certificate.
func routeAuth(o *server.Options) bool {
	return o.Cluster.Username != "" || o.CustomRouterAuthentication != nil ||
		(o.Cluster.TLSConfig != nil && o.Cluster.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert)
}

// gatewayAuth reports whether gateways must authenticate. Gateway TLS from
// a configuration file always verifies the peer's certificate.
func gatewayAuth(o *server.Options) bool {
	return o.Gateway.Username != "" ||
		(o.Gateway.TLSConfig != nil && o.Gateway.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert)
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

// DataDir returns the data directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

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

// InProcess is a connect option that makes nats.Connect reach this server
// through an in-memory pipe, not a socket: for a client in the server's own
// process (`leased serve`'s own connection), whose traffic otherwise pays
// the kernel's loopback twice per message. The URL given to nats.Connect
// still names the server (for logs and on reconnect, which takes a new
// pipe). Authentication and permissions apply as on the client port; TLS
// is optional on the pipe (nats-server accepts an in-process client with
// or without it), so a client certificate still authenticates.
func (s *Server) InProcess() nats.Option { return nats.InProcessServer(s.ns) }

// Instance is a name of this process's use of the data directory, unique
// to it (a [nuid]), kept in the directory's [InstanceFile].
func (s *Server) Instance() string { return s.instance }

// Predecessor is the [Server.Instance] of the process that used the data
// directory before this one, or "" (the first use, or a system without
// flock, where that process may still run). That process has stopped,
// or at least shut its Server down ([Server.Shutdown] releases the lock
// too): this one holds the directory's lock. A program that starts a
// server again on the directory in the same process must first stop what
// it ran on the one before (serve stops its grantor before Shutdown), and
// a data directory copied while its server ran names a process that still
// runs. Whatever it held in the cluster
// and did not give back (a grantor's observer lease, after a SIGKILL or a
// power loss) may be ended at once rather than waited out
// (grantor.WithSuccession).
func (s *Server) Predecessor() string { return s.predecessor }

// Shutdown stops the server, waits until it has stopped, and releases the
// data directory. It may be called more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.unlockOnce.Do(func() { unlock(s.lock) })
}

// Reload applies cfg to the running server as nats-server's own reload
// (its SIGHUP) does: authorization, users and accounts, TLS certificates,
// routes, limits and the like take effect at once, for new connections
// and, where nats-server does so, for those already open (a user removed
// is disconnected). What cannot change while the server runs (its name,
// its ports, its data directory, its cluster's name, JetStream itself) is
// refused with nats-server's reason and nothing changes; so is a cfg
// that Start would refuse ([ErrConfig], [ErrInsecure]). cfg's Logger,
// Debug and ReadyTimeout are not used, nor, as by Start, the logging
// options of cfg.Base (debug, trace, log_file, syslog …): the server
// keeps logging through the Logger it started with.
func (s *Server) Reload(cfg Config) error {
	cfg, opts, err := cfg.options()
	if err != nil {
		return err
	}
	// nats-server's reload renames the cluster, where it refuses a new
	// server name or port: a node renamed is cut off from the members
	// that kept the old name (their routes refused).
	if cfg.ClusterName != s.cfg.ClusterName {
		return fmt.Errorf("%w: the cluster name cannot change while the server runs: old=%q, new=%q",
			ErrReload, s.cfg.ClusterName, cfg.ClusterName)
	}
	if err := s.ns.ReloadOptions(opts); err != nil {
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	return nil
}

// logger bridges nats-server's logger to slog, and passes on the first
// fatal error, which nats-server logs but does not return.
type logger struct {
	l        *slog.Logger
	fatal    chan string // capacity 1
	conflict chan error  // capacity 1: see Server.NameConflicts
	mismatch chan error  // capacity 1: see Server.ClusterNameMismatches
	werr     chan error  // capacity 1: see Server.StoreWriteFailures
}

func newLogger(l *slog.Logger) *logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &logger{l: l, fatal: make(chan string, 1), conflict: make(chan error, 1), mismatch: make(chan error, 1),
		werr: make(chan error, 1)}
}

func (g *logger) Noticef(format string, v ...any) { g.l.Info(fmt.Sprintf(format, v...)) }
func (g *logger) Warnf(format string, v ...any)   { g.l.Warn(fmt.Sprintf(format, v...)) }
func (g *logger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.l.Error(msg)
	select {
	case g.fatal <- msg:
	default:
	}
}

func (g *logger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.l.Error(msg)
	// nats-server's words, on each route between two servers of one name
	// (route.go): the only sign it gives.
	if strings.Contains(format, "Remote server has a duplicate name") {
		select {
		case g.conflict <- fmt.Errorf("%w (nats-server: %s): every node of a cluster needs a name of its own", ErrNameConflict, msg):
		default:
		}
	}
	// route.go's words, logged by the side that refuses the route, and by
	// the refused side as the error it is sent.
	if strings.Contains(msg, "Rejecting connection, cluster name") && strings.Contains(msg, "does not match") {
		select {
		case g.mismatch <- fmt.Errorf("%w (nats-server: %s): every node of a cluster needs the same --cluster-name", ErrClusterNameMismatch, msg):
		default:
		}
	}
	// Its words as a store takes a write error for good: "Critical write
	// error" (filestore.go, raft.go), "critical write error" (a stream's,
	// a consumer's, the meta group's).
	if strings.Contains(msg, "ritical write error") {
		select {
		case g.werr <- fmt.Errorf("%w (nats-server: %s)", ErrStoreWrite, msg):
		default:
		}
	}
}
func (g *logger) Debugf(format string, v ...any) { g.l.Debug(fmt.Sprintf(format, v...)) }
func (g *logger) Tracef(format string, v ...any) { g.l.Debug(fmt.Sprintf(format, v...)) }
