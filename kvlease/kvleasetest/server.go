package kvleasetest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leased/leased/grantor/embedded"
)

// Server is a nats-server with JetStream running in the test's process,
// listening on 127.0.0.1. It is a test server: no authorization, no lock on
// its data directory, no configuration file. Programs run
// [github.com/leased/leased/grantor/embedded] instead.
type Server struct {
	ns  *server.Server
	cfg serverConfig
}

type serverConfig struct {
	name        string
	port        int
	dataDir     string
	unsafeSync  bool
	clusterName string
	clusterPort int
	routes      []string
	maxPayload  int32
	maxStore    int64
	users       []*server.User
}

// ServerOption adjusts a test server's config. Options reject values they
// cannot take: [NewServer] fails the test then.
type ServerOption func(*serverConfig) error

var errNilOption = errors.New("kvleasetest: nil server option")

// WithUnsafeSync makes the server acknowledge before syncing (for the
// benchmarks that compare both modes). The default syncs every write before
// acknowledging it, as a lease store must.
func WithUnsafeSync() ServerOption {
	return func(c *serverConfig) error { c.unsafeSync = true; return nil }
}

// WithMaxPayload sets the server's max_payload (bytes): tests of replies
// that must fit in one message use a small one.
func WithMaxPayload(n int32) ServerOption {
	return func(c *serverConfig) error {
		if n < 1024 {
			return fmt.Errorf("kvleasetest: max payload %d: want at least 1 KiB", n)
		}
		c.maxPayload = n
		return nil
	}
}

// WithMaxStore sets the server's JetStream max_file_store (bytes): tests
// of a full store use a small one.
func WithMaxStore(n int64) ServerOption {
	return func(c *serverConfig) error {
		if n < 1 {
			return fmt.Errorf("kvleasetest: max store %d: want at least a byte", n)
		}
		c.maxStore = n
		return nil
	}
}

// WithUsers makes the server require one of users to connect: tests of
// what a user with restricted permissions sees (see [PublishExcept]).
func WithUsers(users ...*server.User) ServerOption {
	return func(c *serverConfig) error {
		if len(users) == 0 || slices.Contains(users, nil) {
			return errors.New("kvleasetest: WithUsers wants at least one user, none nil")
		}
		c.users = users
		return nil
	}
}

// PublishExcept is the permissions of a user that may publish to any
// subject but deny (a user who may create streams but not update them:
// "$JS.API.STREAM.UPDATE.>"), and subscribe to any.
func PublishExcept(deny ...string) *server.Permissions {
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}}
}

// WithDataDir reuses a data directory (to restart a server on its data).
func WithDataDir(dir string) ServerOption {
	return func(c *serverConfig) error {
		if dir == "" {
			return errors.New("kvleasetest: empty data directory")
		}
		c.dataDir = dir
		return nil
	}
}

// WithPort fixes the client port (to restart a server where clients expect it).
func WithPort(port int) ServerOption {
	return func(c *serverConfig) error {
		if port < 1 || port > 65535 {
			return fmt.Errorf("kvleasetest: port %d out of range 1..65535", port)
		}
		c.port = port
		return nil
	}
}

// NewServer starts a JetStream server on 127.0.0.1 with a free port and its
// store in t.TempDir(), syncing before every ack. It shuts down on cleanup.
func NewServer(tb testing.TB, opts ...ServerOption) *Server {
	tb.Helper()
	cfg := serverConfig{dataDir: tb.TempDir()}
	for _, opt := range opts {
		if opt == nil {
			tb.Fatal(errNilOption)
		}
		if err := opt(&cfg); err != nil {
			tb.Fatal(err)
		}
	}
	s, err := start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// Start starts a server as [NewServer] does, outside a test (in an Example,
// say), with its store in dataDir. The caller shuts it down.
func Start(dataDir string, opts ...ServerOption) (*Server, error) {
	cfg := serverConfig{dataDir: dataDir}
	for _, opt := range append([]ServerOption{WithDataDir(dataDir)}, opts...) {
		if opt == nil {
			return nil, errNilOption
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	return start(cfg)
}

// NewCluster starts n servers on 127.0.0.1 routed into one JetStream
// cluster (named n1…nn, each with its store in t.TempDir()), without
// waiting for the cluster to elect its leaders. They shut down on cleanup.
//
// Each binds its cluster port itself and routes to the ones started before
// it (route gossip tells those of it): ports reserved first and bound later
// could be taken meanwhile, as the source port of the first servers'
// connections to each other (CI saw "address already in use").
func NewCluster(tb testing.TB, n int, opts ...ServerOption) []*Server {
	tb.Helper()
	var routes []string
	var servers []*Server
	for i := range n {
		cfg := serverConfig{name: fmt.Sprintf("n%d", i+1), dataDir: tb.TempDir(),
			clusterName: "kvleasetest", clusterPort: server.RANDOM_PORT, routes: slices.Clone(routes)}
		for _, o := range opts {
			if err := o(&cfg); err != nil {
				tb.Fatal(err)
			}
		}
		s, err := start(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(s.Shutdown)
		addr := s.ns.ClusterAddr()
		s.cfg.clusterPort = addr.Port // a restart binds it again
		routes = append(routes, "nats-route://"+addr.String())
		servers = append(servers, s)
	}
	for _, s := range servers {
		s.cfg.routes = routes // a restarted node knows them all
	}
	return servers
}

func start(cfg serverConfig) (*Server, error) {
	opts := &server.Options{ServerName: cfg.name, Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: cfg.dataDir, NoSigs: true, NoLog: true,
		SyncAlways: !cfg.unsafeSync}
	if cfg.port != 0 {
		opts.Port = cfg.port
	}
	if cfg.maxStore != 0 {
		opts.JetStreamMaxStore = cfg.maxStore
	}
	if cfg.maxPayload != 0 {
		opts.MaxPayload = cfg.maxPayload
	}
	opts.Users = cfg.users
	if cfg.clusterName != "" {
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = cfg.clusterName, "127.0.0.1", cfg.clusterPort
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.routes, ","))
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("kvleasetest: start server: %w", err)
	}
	s := &Server{ns: ns, cfg: cfg}
	if err := embedded.Run(ns, nil, false, 10*time.Second); err != nil {
		s.Shutdown()
		return nil, fmt.Errorf("kvleasetest: start server: %w", err)
	}
	return s, nil
}

// ClientURL returns the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr returns the client listener's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ns.Addr().(*net.TCPAddr).Port))
}

// Name returns the server's name.
func (s *Server) Name() string { return s.ns.Name() }

// DataDir returns the server's store directory.
func (s *Server) DataDir() string { return s.cfg.dataDir }

// NATS returns the underlying nats-server.
func (s *Server) NATS() *server.Server { return s.ns }

// LimitAccountStore sets the JetStream file storage the global account
// may use to bytes (-1: no limit); one under what is stored refuses every
// new message, as a full account does.
func (s *Server) LimitAccountStore(tb testing.TB, bytes int64) {
	tb.Helper()
	err := s.ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{
		"": {MaxMemory: -1, MaxStore: bytes, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1}})
	if err != nil {
		tb.Fatal(err)
	}
}

// Restart starts a server that has been shut down again, with the same
// name, store and routes (and a new client port unless [WithPort] chose
// one): a node coming back.
func (s *Server) Restart() error {
	n, err := start(s.cfg)
	if err != nil {
		return err
	}
	s.ns = n.ns
	return nil
}

// Shutdown stops the server and waits until it has stopped. It may be
// called more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
