package cli

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"golang.org/x/crypto/bcrypt"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
	"github.com/leased/leased/membership"
)

type serveFlags struct {
	natsFlags
	gossip        gossipFlags
	threshold     float64
	metrics       metricsFlags
	http          httpFlags
	name          string
	clusterName   string
	clusterListen string
	routes        []string
	listen        string
	data          string
	natsURL       string
	sync          string
	bucket        string
	replicas      int
	firstToken    uint64
	minTTL        time.Duration // the store's range and margin: kvlease options
	maxTTL        time.Duration
	grantorMargin time.Duration
	policy        grantor.Config // the service's own
	logFormat     string
	debug         bool
	config        string
	allowInsecure bool
	base          *server.Options // from --config, less what the flags set
	namePrefixes  []string
	retention     time.Duration // of the history stream
	retentionSet  bool          // --history-retention given: else the stream's stays
	historyMax    string        // --history-max-bytes: "" leaves the stream's bound
	batch         batchFlags

	// reread reads --config again and layers it under the flags, as at the
	// start (nil without --config, or with --nats-url): SIGHUP's reload.
	reread func(log *slog.Logger) (embedded.Config, error)
}

// batchFlags are the store's group-commit limits (kvlease.BatchLimits):
// those given override the defaults for the bucket's replica count.
type batchFlags struct {
	enabled  bool
	min, max int
	inFlight int
	linger   time.Duration
	timeout  time.Duration
	changed  func(name string) bool // set by RunE
}

func (b *batchFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&b.enabled, "batching", true, "commit concurrent writes together as atomic batches, one sync each (--batching=false: one publish per write; durability is the same)")
	fl.IntVar(&b.min, "batch-min", 0, "fewest queued writes sent as one batch, the break-even (default: 24 on R1, 4 on R3)")
	fl.IntVar(&b.max, "batch-max", 0, "most writes in one batch, at most the server's max_batch_size (default: 1000)")
	fl.IntVar(&b.inFlight, "batch-in-flight", 0, "writes in flight at once, well under the server's max_batch_inflight_per_stream (default: 1 on R1, 8 on R3)")
	fl.DurationVar(&b.linger, "batch-linger", 0, "longest wait for the writers a batch just answered, so that they join the next (default: 5ms on R1, ended by a 1ms pause in their arrivals; none on R3; never for a write that finds the store idle)")
	fl.DurationVar(&b.timeout, "batch-timeout", 0, "longest wait for a batch's acknowledgement, at most the server's max_batch_timeout (default: 10s)")
}

// batchLimitFlags are the flags that set a limit of group commit.
var batchLimitFlags = []string{"batch-min", "batch-max", "batch-in-flight", "batch-linger", "batch-timeout"}

// options returns the store option for the flags given (none if none),
// with the defaults for replicas otherwise, or a usage error. srv is
// the embedded server's JetStream limits (nil for a server of --nats-url,
// whose limits are not known here); unsynced says that the embedded
// server acknowledges writes before it syncs them (--sync
// unsafe-interval).
//
// With unsynced on R1, group commit is off unless a flag asks for it:
// there is no sync for a batch to share, while the server still stages
// each R1 batch in a synced store of its own (DESIGN §2, 16), so batches
// only cost (measured: 0.20× raw single writes at 64 clients and 0.38× at
// 256, against 0.78× and 0.92× unbatched; docs/performance.md, "Group commit").
func (b *batchFlags) options(replicas int, unsynced bool, srv *server.JSLimitOpts) ([]kvlease.Option, error) {
	given := func(name string) bool { return b.changed != nil && b.changed(name) }
	if !b.enabled {
		for _, name := range batchLimitFlags {
			if given(name) {
				return nil, usageError{fmt.Errorf("--%s sets a limit of batching, which --batching=false turns off", name)}
			}
		}
		return []kvlease.Option{kvlease.WithoutBatching()}, nil
	}
	if unsynced && replicas == 1 && !given("batching") && !slices.ContainsFunc(batchLimitFlags, given) {
		return []kvlease.Option{kvlease.WithoutBatching()}, nil
	}
	l := kvlease.DefaultBatchLimits(replicas)
	custom := false
	for name, set := range map[string]func(){
		"batch-min":       func() { l.MinMessages = b.min },
		"batch-max":       func() { l.MaxMessages = b.max },
		"batch-in-flight": func() { l.MaxInFlight = b.inFlight },
		"batch-linger":    func() { l.Linger = b.linger },
		"batch-timeout":   func() { l.Timeout = b.timeout },
	} {
		if given(name) {
			set()
			custom = true
		}
	}
	if !custom {
		return nil, nil // kvlease.Open takes the defaults for the bucket's replicas
	}
	if err := l.Validate(); err != nil {
		return nil, usageError{fmt.Errorf("--batch-*: %w", err)}
	}
	if srv != nil {
		if err := withinServer(l, *srv); err != nil {
			return nil, usageError{err}
		}
	}
	return []kvlease.Option{kvlease.WithBatchLimits(l)}, nil
}

// withinServer checks limits against those of the embedded server, which
// would refuse every batch past them (each then goes out as single
// publishes: no error, and no group commit).
func withinServer(l kvlease.BatchLimits, srv server.JSLimitOpts) error {
	size, inflight, timeout := srv.MaxBatchSize, srv.MaxBatchInflightPerStream, srv.MaxBatchTimeout
	if size <= 0 {
		size = kvlease.ServerMaxBatchSize
	}
	if inflight <= 0 {
		inflight = kvlease.ServerMaxBatchInflight
	}
	if timeout <= 0 {
		timeout = kvlease.ServerMaxBatchTimeout
	}
	switch {
	case l.MaxMessages > size:
		return fmt.Errorf("--batch-max %d: above the server's max_batch_size %d (set it in --config to go higher)", l.MaxMessages, size)
	case l.MaxInFlight > inflight:
		return fmt.Errorf("--batch-in-flight %d: above the server's max_batch_inflight_per_stream %d", l.MaxInFlight, inflight)
	case l.Timeout > timeout:
		return fmt.Errorf("--batch-timeout %v: above the server's max_batch_timeout %v", l.Timeout, timeout)
	}
	return nil
}

func newServe(stderr io.Writer) *cobra.Command {
	f := serveFlags{policy: grantor.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a grantor node: the lease service, with an embedded NATS JetStream server",
		Long: `serve starts a NATS server with JetStream on --listen, storing its data in
--data, opens (creating if needed) the lease bucket, and answers the lease
service API (lease.v1.*, lease.admin.v1.revoke; see docs/api.md). Every write
is synced to disk before it is acknowledged unless --sync unsafe-interval is
given. With --nats-url it uses an existing NATS JetStream server or cluster
instead of starting one.

--config loads a nats-server configuration file for the embedded server
(TLS, authorization, users, accounts, cluster TLS and authorization: NATS's
own syntax and parser). Flags given explicitly override the file; the
file's values override the flags' defaults. serve connects to its own server
with --user/--password (or --creds), --inbox-prefix and the --tls-* flags,
so the file must have a user for leased itself (docs/api.md). Listening on an
address other than loopback (client or cluster port) without authorization
is refused unless --allow-insecure is given.

--http-listen serves the timeline page: who held which lease when, read from
the bucket's history stream (any node can serve it), live; /api/tenures has
the same data as JSON, at most 2,000 tenures (the live leases, then the most recently active) unless
it asks ?limit= (at most 50,000), "truncated" saying there were more. It is
read-only and has no authorization of its own: a non-loopback address is
refused unless --allow-public-http is given (a flag of its own, because the
risk is another: not writes to the bucket, as with --allow-insecure, but every lease name, holder and reason shown to
anyone who reaches the port, --config's users and TLS notwithstanding).
On loopback it answers only requests for localhost or an IP address (421
for other Host names: a DNS rebinding defence). --jaeger-ui links each tenure to its grant's trace.

Concurrent writes to the bucket are committed together, as JetStream atomic
batches acknowledged after one sync each (group commit); --batch-* set its
limits (the defaults are for the bucket's replica count, --replicas), and
--batching=false sends every write as one publish. With --sync
unsafe-interval on one node there is no sync to share and batches only cost,
so batching is off there unless --batching or a --batch-* flag is given; a
NATS server of --nats-url that acknowledges before syncing (NATS's default
sync_interval) wants --batching=false on an R1 bucket.

Only one serve may use a data directory: serve locks <data>/leased.lock
(writing its pid into it) before the server opens the store, and a second
serve on the same directory exits at once.

It runs until SIGINT or SIGTERM, then stops taking requests, answers those in
flight, and exits. It releases no lease: leases belong to their holders.
SIGHUP reads --config again and applies it to the embedded server, as
nats-server's own reload does: users, permissions, accounts, TLS certificates,
routes and limits change without a restart; a change that cannot be made while
the server runs (its name, ports, data directory, cluster name), or that would
shut serve out of its own server (its --user removed or given another
password, its --nkey removed, authorization added for a serve started
with no user), is logged and nothing changes (nor does it without --config, or with --nats-url).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.natsURL != "" {
				for _, name := range []string{"listen", "data", "sync", "cluster-name", "cluster-listen", "routes", "config", "allow-insecure"} {
					if name == "allow-insecure" && f.gossip.listen != "" {
						// It allows this grantor's gossip port too: refused
						// here, keyless gossip beyond loopback had no way
						// with --nats-url, whose refusal said to give it
						// (found by an outside client).
						continue
					}
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s configures the embedded server; with --nats-url, configure the NATS servers "+
							"themselves (for durability: jetstream { sync_interval: always })", name)}
					}
				}
			}
			f.batch.changed = cmd.Flags().Changed
			f.retentionSet = cmd.Flags().Changed("history-retention")
			if f.config != "" && f.natsURL == "" {
				given := f
				if err := f.loadConfig(cmd.Flags().Changed); err != nil {
					return err
				}
				f.reread = func(log *slog.Logger) (embedded.Config, error) {
					g := given
					if err := g.loadConfig(cmd.Flags().Changed); err != nil {
						return embedded.Config{}, err
					}
					return g.embeddedConfig(log)
				}
			}
			if cmd.Flags().Changed("cluster-listen") && f.clusterName == "" {
				// It ran standalone, R1, as if the flag were not there
				// (found by an outside client).
				return usageError{errors.New("--cluster-listen needs --cluster-name (and --routes)")}
			}
			return serve(cmd.Context(), f, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client listen address host:port of the embedded server (port 0 picks a free one)")
	fl.StringVar(&f.data, "data", defaultDataDir(), "data directory of the embedded server")
	fl.StringVar(&f.name, "name", "", "node name: the grantor's and its embedded server's, unique in a cluster (default: the host name; gossip with --nats-url names this grantor HOST-PID)")
	fl.StringVar(&f.clusterName, "cluster-name", "", "form or join the embedded JetStream cluster of this name")
	fl.StringVar(&f.clusterListen, "cluster-listen", "127.0.0.1:6222", "route listen address host:port of a cluster member")
	fl.StringSliceVar(&f.routes, "routes", nil, "route URLs of the cluster's members, nats-route://host:port (comma-separated; may include this node)")
	fl.StringVar(&f.config, "config", "", "nats-server configuration file for the embedded server (TLS, authorization, accounts, cluster); flags given explicitly override it")
	fl.BoolVar(&f.allowInsecure, "allow-insecure", false, "allow a client, cluster or gossip port on a non-loopback address without authorization (a gossip key): anyone who can reach it can take or end any lease")
	fl.StringVar(&f.natsURL, "nats-url", "", "use this NATS server or cluster (comma-separated URLs) instead of an embedded one")
	f.natsFlags.register(fl)
	fl.StringVar(&f.sync, "sync", "always", "embedded store sync policy: always (sync before ack) or unsafe-interval (may lose acknowledged grants on power loss)")
	fl.StringVar(&f.bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	fl.IntVar(&f.replicas, "replicas", 0, "replicas of the lease bucket when it is created (default: 3 in a cluster, else 1)")
	fl.Uint64Var(&f.firstToken, "first-token", 0, "the first fencing token of the lease bucket when it is created: for a bucket made anew after its old one was lost, above every token the old one issued, so that fences accept the new ones; serve refuses to start on an existing bucket whose tokens are below it (default: 1; at most 2305843009213693952, 2^61)")
	fl.DurationVar(&f.minTTL, "min-ttl", kvlease.MinDuration, "shortest lease granted (at least 1s)")
	fl.DurationVar(&f.maxTTL, "max-ttl", kvlease.DefaultMaxDuration, "longest lease granted")
	fl.DurationVar(&f.policy.DefaultDuration, "default-ttl", f.policy.DefaultDuration, "duration of a grant that names none")
	fl.DurationVar(&f.grantorMargin, "grantor-margin", kvlease.DefaultGrantorMargin, "added to every duration before rounding up to the server TTL")
	fl.IntVar(&f.policy.MaxLeasesPerHolder, "max-leases-per-holder", f.policy.MaxLeasesPerHolder, "live leases one holder may have (0: no limit)")
	fl.StringSliceVar(&f.policy.ReplyPrefixes, "reply-prefixes", api.DefaultInboxPrefixes, "prefixes a request's reply subject must begin with (your clients' inboxes, comma-separated); a request replying elsewhere is dropped")
	fl.IntVar(&f.policy.MaxLeases, "max-leases", f.policy.MaxLeases, "live leases the bucket may have before new grants are refused (0: no limit; each costs serve about 7 KiB of memory)")
	fl.IntVar(&f.policy.MaxAttributeBytes, "max-attribute-bytes", f.policy.MaxAttributeBytes, "total size of a lease's attributes")
	f.gossip.register(fl, "gossip address host:port of this grantor (enables gossip: suspicion levels in discovery, removal of dead nodes' registrations)")
	fl.Float64Var(&f.threshold, "suspicion-threshold", 8, "suspicion level (phi) at which discovery calls an instance suspect")
	f.metrics.register(fl)
	fl.Lookup("metrics-listen").Usage = "serve Prometheus metrics on http://HOST:PORT/metrics, and the node's health at /healthz (default: off)"
	fl.DurationVar(&f.retention, "history-retention", 0, fmt.Sprintf("how long the history of tenures (leased history) is kept "+
		"(default: as the history stream keeps it, %v for a new one)", history.DefaultRetention))
	fl.StringVar(&f.historyMax, "history-max-bytes", "", "bound the history stream's size, dropping its oldest records past it "+
		"(e.g. 500MiB, 2GB; none: no bound; default: as the history stream has it, none for a new one). "+
		"The history shares the NATS server's storage with the lease bucket, whose every write a full storage refuses")
	f.batch.register(fl)
	f.http.register(fl)
	fl.StringSliceVar(&f.namePrefixes, "metric-name-prefixes", nil, "label the ownership-change metric with the lease name for leases with these name prefixes (comma-separated; each such lease is a series: keep it to a few)")
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
	// The store's durations and margin, checked with the service's policy
	// before anything starts.
	policyOpts := []kvlease.Option{kvlease.WithDurationRange(f.minTTL, f.maxTTL), kvlease.WithGrantorMargin(f.grantorMargin)}
	if err := kvlease.CheckOptions(policyOpts...); err != nil {
		return usageError{err}
	}
	if err := kvlease.CheckOptions(kvlease.WithFirstToken(kvlease.Token(f.firstToken))); err != nil {
		return usageError{fmt.Errorf("--first-token: %w", err)}
	}
	if err := f.policy.ValidateFor(f.minTTL, f.maxTTL); err != nil {
		return usageError{err}
	}
	replicas := f.replicas
	if replicas == 0 {
		replicas = 1
		if f.clusterName != "" {
			replicas = 3
		}
	}
	if f.retentionSet && f.retention < history.MinRetention {
		return usageError{fmt.Errorf("--history-retention %v: want at least %v", f.retention, history.MinRetention)}
	}
	historyMax, err := historyMaxBytes(f.historyMax)
	if err != nil {
		return usageError{err}
	}
	if err := kvlease.ValidateBucket(f.bucket); err != nil {
		return usageError{fmt.Errorf("--bucket: %w", err)}
	}
	f.gossip.allowInsecure = f.allowInsecure
	if err := f.gossip.check(); err != nil {
		return err
	}
	if f.gossip.enabled() && (!(f.threshold > 0) || math.IsInf(f.threshold, 1)) { // before anything starts; NaN too
		return usageError{fmt.Errorf("--suspicion-threshold %v: want a positive, finite number", f.threshold)}
	}
	if f.gossip.enabled() {
		if err := membership.DefaultConfig(gossipName(f)).Validate(); err != nil {
			// It was found once the bucket was made, naming no flag (an
			// outside client).
			return usageError{fmt.Errorf("--name %q (the gossip member name; default the host name): %w", gossipName(f), err)}
		}
	}
	if _, err := f.natsFlags.options(); err != nil { // before the embedded server starts
		return err
	}
	if replicas > 1 && f.natsURL == "" && f.clusterName == "" {
		return usageError{fmt.Errorf("--replicas %d: the embedded NATS server is alone, so the bucket has 1 replica; "+
			"for more, run a cluster (--cluster-name, --cluster-listen, --routes) or use one (--nats-url)", replicas)}
	}
	var limits *server.JSLimitOpts
	if f.natsURL == "" {
		limits = &server.JSLimitOpts{}
		if f.base != nil {
			limits = &f.base.JetStreamLimits
		}
	}
	batchOpts, err := f.batch.options(replicas, f.natsURL == "" && f.sync == "unsafe-interval", limits)
	if err != nil {
		return err
	}
	// The timeline page's flags and port, checked and bound before anything
	// starts.
	httpLn, err := f.http.open(log)
	if err != nil {
		return err
	}
	if httpLn != nil {
		defer httpLn.Close() // until it serves; closing it twice is harmless
	}
	// Traces and metrics: OTLP from the standard OTEL_* variables, and
	// Prometheus on --metrics-listen.
	// Each node's spans and metrics say which node it is: in a cluster,
	// which grantor answered (found by an outside client). With --nats-url
	// and no --name that is HOST-PID, as its gossip name: serves on one
	// host share the host name, and their OTLP exports under one
	// service.instance.id were taken for one process's (found by an
	// operator).
	health := &healthCheck{}
	f.metrics.health = health
	mp, stopTelemetry, err := f.metrics.start(ctx, "leased", log, semconv.ServiceInstanceID(gossipName(f)))
	if err != nil {
		return err
	}
	defer stopTelemetry()

	var nc *nats.Conn
	url := f.natsURL
	var srv *embedded.Server
	if url == "" {
		if srv, err = startEmbedded(f, log); err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
	}
	// A permissions violation (the NATS user may not subscribe to an
	// endpoint, or to the inbox: --inbox-prefix) is otherwise silent. Until
	// the service is ready it ends the start at once (JetStream's replies
	// would never arrive); after that it is logged.
	var startMu sync.Mutex
	started := false
	startCtx, startCancel := context.WithCancelCause(ctx)
	defer startCancel(nil)
	onErr := func(err error) {
		log.Error("nats", "err", err)
		startMu.Lock()
		defer startMu.Unlock()
		if pe := permissionError(err); pe != nil && !started {
			startCancel(pe)
		}
	}
	// startCause returns what ended the start, if something did, in place
	// of err: a permissions violation, another node with this one's name,
	// or a write the embedded server failed.
	startCause := func(err error) error {
		if cause := context.Cause(startCtx); errors.Is(cause, embedded.ErrNameConflict) || errors.Is(cause, embedded.ErrStoreWrite) {
			return cause
		}
		return permissionCause(startCtx, err)
	}
	// A write the embedded server fails ends the start, as it ends
	// serving once started (see the loop below): a node of a cluster,
	// which waits for JetStream however long it takes, waited for good,
	// "starting", after its store had failed a write (found filling the
	// disk of a node whose peers were coming up).
	writeFailures := make(chan error, 1) // once started: nil without an embedded server
	if srv != nil {
		go func() {
			select {
			case err := <-srv.StoreWriteFailures():
				startMu.Lock()
				defer startMu.Unlock()
				if !started {
					log.Error("cannot start: the NATS server failed a write to its store and takes no more writes until it restarts; stopping "+
						"(make room on the disk, or see to it, and start serve again)", "data", srv.DataDir(), "err", err)
					startCancel(err)
				}
				writeFailures <- err
			case <-startCtx.Done(): // serve returned, or its start ended
			}
		}()
	} else {
		writeFailures = nil
	}
	if srv != nil {
		go watchClusterNameMismatches(ctx, srv, log)
		go watchNameConflicts(ctx, srv, log, func(err error) bool {
			startMu.Lock()
			defer startMu.Unlock()
			if !started {
				startCancel(err)
			}
			return !started
		})
	}
	if nc, err = f.connectWaiting(startCtx, url, srv, onErr, log); err != nil {
		return startCause(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if srv != nil && f.clusterName == "" {
		// On its own standalone server an account without JetStream never
		// gets it: serve waited for it for good (found by an outside
		// client, with --config accounts).
		actx, cancel := context.WithTimeout(startCtx, 5*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return usageError{errors.New("the account of serve's user has no JetStream on the embedded server (err_code 10039): " +
				"give it jetstream in --config (accounts { NAME { jetstream: enabled, users: [...] } })")}
		}
	}
	if err := grantor.CheckBucket(nc, f.bucket, ""); err != nil {
		return err // before the bucket is opened, and so made
	}
	octx, cancel := context.WithCancel(startCtx)
	defer cancel()
	if limit := f.jetStreamWaitLimit(srv != nil); limit > 0 {
		octx, cancel = context.WithTimeout(startCtx, limit)
		defer cancel()
	} else {
		log.Info("opening the lease bucket; a node of a cluster waits for a majority of the nodes of --routes (for all of them, the first time), however long they take",
			"cluster", f.clusterName)
	}
	opts := append(policyOpts, kvlease.WithBucketPolicy(), kvlease.WithBucket(f.bucket), kvlease.WithReplicas(replicas), kvlease.WithLogger(log),
		kvlease.WithStoreMeterProvider(mp))
	opts = append(opts, batchOpts...)
	st, err := f.openStore(octx, js, log, opts...)
	if err != nil {
		return startCause(err)
	}
	regOpts := []registry.Option{registry.WithLogger(log)}
	if f.gossip.enabled() {
		gn, err := f.gossip.start(gossipName(f), map[string]string{"role": roleGrantor, "nats_url": redact.URL(url)}, log)
		if err != nil {
			return err
		}
		defer func() { _ = gn.Leave(time.Second); _ = gn.Shutdown() }()
		regOpts = append(regOpts, registry.WithGossip(gn, f.threshold))
	}
	reg, err := registry.New(st, regOpts...)
	if err != nil {
		return usageError{err}
	}
	svcOpts := []grantor.Option{grantor.WithLogger(log), grantor.WithNodeName(nodeName(f)), grantor.WithMeterProvider(mp),
		grantor.WithMetricNamePrefixes(f.namePrefixes...), grantor.WithExtension(reg)}
	if f.retentionSet {
		svcOpts = append(svcOpts, grantor.WithHistoryRetention(f.retention))
	}
	if historyMax != 0 {
		svcOpts = append(svcOpts, grantor.WithHistoryMaxBytes(historyMax))
	}
	if srv != nil {
		// What this node's process before held is ended, not waited out:
		// its observer lease, after an unclean stop.
		svcOpts = append(svcOpts, grantor.WithSuccession(srv.Instance(), srv.Predecessor()))
	}
	svc, err := grantor.New(st, nc, f.policy, svcOpts...)
	if err != nil {
		return usageError{err}
	}
	if err := svc.Start(octx); err != nil {
		return startCause(err)
	}
	// Start flushed its subscriptions: a refusal of one has been read.
	startMu.Lock()
	started = true
	startMu.Unlock()
	var pe *PermissionError
	if pe = permissionError(nc.LastError()); pe != nil {
		svc.Stop()
		return pe
	}
	if err := startCause(nil); err != nil {
		svc.Stop()
		return err
	}
	stopHTTP := func() {}
	if httpLn != nil {
		if stopHTTP, err = f.http.serve(httpLn, svc.History(), st, log); err != nil {
			svc.Stop()
			return err
		}
	}
	var natsHealth func() error // nil: no embedded server
	if srv != nil {
		ours := map[string]bool{kvlease.StreamName(st.Bucket()): true, history.StreamName(st.Bucket()): true}
		natsHealth = func() error { return natsServerHealth(srv.NATS(), ours) }
	}
	health.set(serveHealth(nc, natsHealth, st)) // before "ready": a probe told so finds it
	log.Info("ready", "url", redact.URL(url), "bucket", st.Bucket(), "embedded", f.natsURL == "", "group_commit", st.Batching(),
		"build", grantor.Build())
	var failed error
	for serving := true; serving; {
		select {
		case <-ctx.Done():
			serving = false
		case failed = <-writeFailures:
			// Crash-only, as etcd and PostgreSQL do on a failed write: the
			// server answered no write after it, for good, even once the
			// disk had room again, and serve ran on as if it were up
			// (found filling the disk). Stopped, a supervisor's restart
			// brings the node back once its disk can take writes.
			serving = false
			log.Error("cannot serve on: the NATS server failed a write to its store and takes no more writes until it restarts; stopping "+
				"(make room on the disk, or see to it, and start serve again)", "data", srv.DataDir(), "err", failed)
		case failed = <-svc.Failed():
			serving = false
			if errors.Is(failed, kvlease.ErrBucketReplaced) {
				log.Error("cannot serve on: stopping (start again to serve the new bucket; its tokens began again unless its creator gave a first token (serve --first-token), and fences that saw the old ones refuse them: README, Fenced writes)", "err", failed)
			} else if errors.Is(failed, jetstream.ErrStreamNotFound) {
				log.Error("cannot serve on: the lease bucket is missing (deleted?), and this grantor's watch of it ended; stopping "+
					"(start again: a serve that finds it missing makes it anew, its tokens above those its history recorded: README, Fenced writes)", "err", failed)
			} else {
				log.Error("cannot serve on: stopping", "err", failed)
			}
		case <-hangups: // a SIGHUP while serve started is a reload now
			f.reload(srv, log)
		}
	}
	health.set(func() error { return errShuttingDown })
	log.Info("shutting down: answering requests in flight")
	stopHTTP()
	svc.Stop()
	if err := nc.Drain(); err != nil {
		log.Warn("drain", "err", err)
	}
	return failed
}

// serveHealth is serve's /healthz check once it serves: its connection to
// NATS; for the embedded server, natsHealth, nats-server's own health as
// its /healthz reports it but for other applications' streams (JetStream
// on, the lease and history streams recovered and taking writes; in a
// cluster, a meta leader, and those streams current), asked again while it
// fails (see askAgain); and a read of the bucket through its stream's
// leader, which on NATS of its own is what says a cluster that lost its
// majority (at most one a second: probes share the last answer); and the
// Store's last writes, refused for the server's storage limit
// (storageFull).
func serveHealth(nc *nats.Conn, natsHealth func() error, st *kvlease.Store) func() error {
	var mu sync.Mutex
	var read time.Time
	var readErr error
	return func() error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("the connection to NATS is %s", strings.ToLower(s.String()))
		}
		if natsHealth != nil {
			if err := askAgain(natsHealth, healthRecheckFor, healthRecheckEvery); err != nil {
				return err
			}
		}
		if err := storageFull(st.StorageFull(), time.Now()); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if time.Since(read) >= time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), healthReadTimeout)
			_, err := st.LastRevision(ctx)
			cancel()
			read, readErr = time.Now(), err
			if err != nil {
				readErr = fmt.Errorf("the lease bucket's stream did not answer a read through its leader: %w", err)
			}
		}
		return readErr
	}
}

// storageFull is /healthz's answer for a Store whose last write was
// refused at refused (the zero time: none) for the NATS server's storage
// limit, at now: the node can grant nothing, though its reads answer (it
// said 200 ok while every grant and renewal was refused). It says so for
// storageFullFor after the refusal unless a write is accepted first (a
// node in use writes again within that, renewals at least): a node no one
// writes to whose limit was raised is healthy again after it.
func storageFull(refused, now time.Time) error {
	if refused.IsZero() || now.Sub(refused) >= storageFullFor {
		return nil
	}
	return fmt.Errorf("the NATS server's storage is full: a write to the lease bucket was refused %v ago, and none was accepted since "+
		"(raise JetStream's max_file_store or the account's limit, or free the disk)", now.Sub(refused).Round(time.Millisecond))
}

// storageFullFor is how long after a write refused for the storage limit
// /healthz says so, if no write is accepted in between.
const storageFullFor = time.Minute

// natsServerHealth is nats-server's own health check of s, but for
// another stream's trouble (or its consumers'): what the server says of
// itself, of JetStream and its meta layer, and of the streams named in
// ours. A stream of another application on the embedded server that
// failed to recover answered this node's /healthz 503, and a probe takes
// a grantor out, or restarts it, for what it cannot mend.
func natsServerHealth(s *server.Server, ours map[string]bool) error {
	h := s.Healthz(&server.HealthzOptions{Details: true})
	var msgs []string
	for _, e := range h.Errors {
		if (e.Type == server.HealthzErrorStream || e.Type == server.HealthzErrorConsumer) && !ours[e.Stream] {
			continue
		}
		msgs = append(msgs, e.Error)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("the embedded NATS server: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// askAgain returns check's error only if it fails each time it is asked,
// every `every` until `within` has passed since its first answer (at
// least twice): nats-server's health check fails one look now and then
// on a healthy node under load, and a probe told so took the node out.
// Found polling /healthz of a three-node cluster under leased bench
// (64-128 clients, 0 errors): each node answered 503 one poll in a few
// hundred, "stream … is not current: group node unhealthy" (a follower
// whose applies had not moved for 10 ms, nats-server's raft Healthy) or
// "failed to be ready for connections after 1ms:" (its readiness loop
// not run once in its millisecond), each gone at the next poll.
func askAgain(check func() error, within, every time.Duration) error {
	err := check()
	for end := time.Now().Add(within); err != nil && time.Now().Before(end); {
		time.Sleep(every)
		err = check()
	}
	return err
}

// healthRecheckFor and healthRecheckEvery are how long, and how often,
// serveHealth asks nats-server's health check again while it fails.
const (
	healthRecheckFor   = 300 * time.Millisecond
	healthRecheckEvery = 50 * time.Millisecond
)

// healthReadTimeout bounds serveHealth's read: a probe's own timeout is
// usually a second or more.
const healthReadTimeout = 800 * time.Millisecond

// errShuttingDown is /healthz's answer once serve stops.
var errShuttingDown = errors.New("shutting down")

func nodeName(f serveFlags) string {
	if f.name != "" {
		return f.name
	}
	h, _ := os.Hostname()
	return h
}

// gossipName is the grantor's gossip member name, which memberlist needs
// unique among members: --name, or the node name where that is the
// embedded server's (unique in its NATS cluster); with --nats-url, the
// host name and the process ID, since grantors on one host share the host
// name (memberlist refused the second of two under one name: "Conflicting
// address"). Its OTLP service.instance.id is the same, for the same
// reason.
func gossipName(f serveFlags) string {
	if f.name != "" || f.natsURL == "" {
		return nodeName(f)
	}
	return fmt.Sprintf("%s-%d", nodeName(f), os.Getpid())
}

// openStore opens the lease bucket with opts. A bucket it creates begins
// at --first-token, or above the last revision its history recorded if
// that is higher (aboveHistory).
func (f *serveFlags) openStore(ctx context.Context, js jetstream.JetStream, log *slog.Logger, opts ...kvlease.Option) (*kvlease.Store, error) {
	return kvlease.Open(ctx, js, append(opts, kvlease.WithFirstToken(kvlease.Token(f.firstToken)),
		kvlease.WithNewBucketFirstToken(f.aboveHistory(js, log)))...)
}

// aboveHistory is the first token of a lease bucket made anew under its
// history: above the history's last record. A bucket deleted and made anew
// by a serve began again at 1 under a history that had recorded its
// tokens: the tokens repeated, and the observer, which takes the history's
// last record as reported, left the new tenures out of it. Open asks for
// it only once JetStream has said that the bucket is missing, and again
// while the history's JetStream is unavailable: read before Open waited
// for JetStream, as a cluster's serves started at once must, a read that
// failed was taken for no history (found in review). A history that cannot
// be read otherwise (refused) is said, and passed over. The tenures the
// history shows live ended with the bucket: their ends are recorded first
// (history.Stream.EndLive), or they showed held for the whole retention.
func (f *serveFlags) aboveHistory(js jetstream.JetStream, log *slog.Logger) func(context.Context) (kvlease.Token, error) {
	return func(ctx context.Context) (kvlease.Token, error) {
		last, ended, err := endHistoryTenures(ctx, js, f.bucket)
		switch {
		case errors.Is(err, kvlease.ErrUnavailable):
			return 0, err // Open tries again
		case err != nil:
			log.Warn("could not read the lease bucket's history, to begin the new bucket above the tokens it recorded", "bucket", f.bucket, "err", err)
			return 0, nil
		case ended > 0:
			log.Warn("the lease bucket is missing: the tenures its history showed held ended with it, and the history now says so",
				"bucket", f.bucket, "tenures", ended)
		}
		if last == 0 || kvlease.Token(last) < kvlease.Token(f.firstToken) {
			return 0, nil
		}
		log.Warn("the lease bucket is missing but its history is not: the new bucket's tokens begin above those the history recorded",
			"bucket", f.bucket, "first_token", last+1)
		return kvlease.Token(last + 1), nil
	}
}

// endHistoryTenures records the end of the tenures bucket's history shows
// live, the bucket being missing, and returns the revision of the
// history's last record before them (0 if it has none, or no stream).
func endHistoryTenures(ctx context.Context, js jetstream.JetStream, bucket string) (last uint64, ended int, err error) {
	h, err := history.Open(ctx, js, bucket, history.Options{})
	switch {
	case errors.Is(err, kvlease.ErrNotFound):
		return 0, 0, nil
	case err != nil:
		return 0, 0, err
	}
	r, ok, err := h.Last(ctx)
	if err != nil || !ok {
		return 0, 0, err
	}
	ended, err = h.EndLive(ctx, r.Revision, r.Revision, time.Now())
	return r.Revision, ended, err
}

// loadConfig reads --config and layers it under the flags: a flag given
// explicitly wins, then the file's value, then the flag's default. What the
// flags then carry is removed from f.base, so that embedded.Config's fields
// (set from the flags) are the only source of those options.
func (f *serveFlags) loadConfig(changed func(string) bool) error {
	base, err := embedded.LoadConfigFile(f.config)
	if err != nil {
		return usageError{fmt.Errorf("--config: %w", err)}
	}
	if !changed("name") && base.ServerName != "" {
		f.name = base.ServerName
	}
	if !changed("data") && base.StoreDir != "" {
		f.data = base.StoreDir
	}
	layerAddr := func(flag string, dst *string, host string, port int) {
		if changed(flag) || (host == "" && port <= 0) {
			return
		}
		h, p, err := net.SplitHostPort(*dst)
		if err != nil {
			return // the flag's default is well-formed
		}
		if host != "" {
			h = host
		}
		if port > 0 {
			p = strconv.Itoa(port)
		}
		*dst = net.JoinHostPort(h, p)
	}
	layerAddr("listen", &f.listen, base.Host, base.Port)
	if !changed("cluster-name") && base.Cluster.Name != "" {
		f.clusterName = base.Cluster.Name
	}
	layerAddr("cluster-listen", &f.clusterListen, base.Cluster.Host, base.Cluster.Port)
	if !changed("routes") && len(base.Routes) > 0 {
		f.routes = nil
		for _, u := range base.Routes {
			f.routes = append(f.routes, u.String())
		}
	}
	base.ServerName, base.StoreDir, base.Host, base.Port = "", "", "", 0
	base.Cluster.Name, base.Cluster.Host, base.Cluster.Port, base.Routes = "", "", 0, nil
	f.base = base
	return nil
}

// connectOwn connects serve to the NATS server at url; to srv, its own
// embedded server, if not nil, through a pipe, not the kernel's loopback
// (5–8% less CPU per renewal: docs/performance.md). It connects over TCP
// first, and closes that connection: a refusal (a wrong password, say)
// then reads as the server's error at once. Through a pipe, both sides
// write as the server refuses, and nats.go reports "read/write on closed
// pipe" only at the server's write deadline, 10 s later
// (TestServeOwnCredentialsRefused).
func (f serveFlags) connectOwn(url string, srv *embedded.Server, onErr func(error)) (*nats.Conn, error) {
	const name, timeout = "leased-serve", 10 * time.Second
	if srv == nil {
		return f.natsFlags.connect(url, name, timeout, onErr)
	}
	probe, err := f.natsFlags.connect(url, name, timeout, nil)
	if err != nil {
		return nil, err
	}
	probe.Close()
	return f.natsFlags.connect(url, name, timeout, onErr, srv.InProcess())
}

// connectWaiting is connectOwn that, for a NATS server of --nats-url,
// waits while no server of url listens yet (started beside this one, as
// in a compose file), up to natsWaitLimit, as [kvlease.Open] then waits for
// JetStream; a refusal (a wrong password, TLS) ends it at once.
func (f serveFlags) connectWaiting(ctx context.Context, url string, srv *embedded.Server, onErr func(error), log *slog.Logger) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, natsWaitLimit)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		nc, err := f.connectOwn(url, srv, onErr)
		if err == nil && srv == nil {
			// Said in the log: a server of --nats-url that goes away
			// leaves every request unavailable until it is back (found
			// killing one by hand: serve said nothing either way).
			nc.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
				if !nc.IsClosed() {
					log.Warn("lost the connection to NATS; reconnecting", "err", err)
				}
			})
			nc.SetReconnectHandler(func(nc *nats.Conn) {
				log.Info("reconnected to NATS", "url", redact.URL(nc.ConnectedUrl()), "server", nc.ConnectedServerName(),
					"server_id", nc.ConnectedServerId())
			})
		}
		if err == nil || srv != nil || !errors.Is(err, nats.ErrNoServers) {
			return nc, err
		}
		log.Info("waiting for NATS", "url", redact.URL(url), "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// natsWaitLimit is how long serve waits for a NATS server of --nats-url
// to listen, and then for its JetStream to answer.
const natsWaitLimit = time.Minute

// jetStreamWaitLimit is how long serve waits for JetStream to answer before
// it gives up (0: no limit). A node of an embedded cluster waits as long as
// its peers take: its JetStream answers only once a quorum of them is up,
// and the machines of a cluster come up in their own time (one that gave
// up after a minute left its peers short of a quorum when the last came
// later). Otherwise natsWaitLimit.
func (f serveFlags) jetStreamWaitLimit(embedded bool) time.Duration {
	if embedded && f.clusterName != "" {
		return 0
	}
	return natsWaitLimit
}

// watchNameConflicts passes to starting each error of another server of
// the cluster with srv's name, until starting says the node has started:
// then the node keeps serving (the node that joined last stops, before it
// is ready) and says so in the log, at most every 10 s (nats-server reports
// each of the many routes it refuses).
func watchNameConflicts(ctx context.Context, srv *embedded.Server, log *slog.Logger, starting func(error) bool) {
	var logged time.Time
	for {
		select {
		case err := <-srv.NameConflicts():
			if !starting(err) && time.Since(logged) >= 10*time.Second {
				logged = time.Now()
				log.Error("another server has this node's name: it should stop (a node that finds one as it starts does)",
					"name", srv.Name(), "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// watchClusterNameMismatches logs, at most every 10 s, that a route was
// refused for a different cluster name: nats-server says so once per
// route, and a node whose --cluster-name is not its peers' then only
// logged "waiting for JetStream" (found by an outside client).
func watchClusterNameMismatches(ctx context.Context, srv *embedded.Server, log *slog.Logger) {
	var logged time.Time
	for {
		select {
		case err := <-srv.ClusterNameMismatches():
			if time.Since(logged) >= 10*time.Second {
				logged = time.Now()
				log.Error("a route between this node and another was refused: their cluster names differ", "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// reload applies --config, read again, to the embedded server srv: SIGHUP,
// as nats-server reloads its configuration file.
func (f serveFlags) reload(srv *embedded.Server, log *slog.Logger) {
	if srv == nil || f.reread == nil {
		log.Warn("SIGHUP: nothing to reload (serve reloads the --config of its embedded server); still serving: SIGINT or SIGTERM stops it")
		return
	}
	cfg, err := f.reread(log)
	if err == nil {
		err = f.lockedOut(cfg.Base)
	}
	if err == nil {
		err = srv.Reload(cfg)
	}
	if err != nil {
		log.Error("SIGHUP: configuration not reloaded; serving on as before", "config", f.config, "err", err)
		return
	}
	log.Info("SIGHUP: configuration reloaded", "config", f.config)
}

// lockedOut returns an error if o, --config read again, would no longer
// let serve's own connection in: a user (--user) it does not list, or
// lists with another password, an nkey (--nkey) it does not list, or
// authorization at all for a serve that connects with no user.
// serve's credentials come from its flags and environment, which a SIGHUP
// does not change: nats-server disconnected serve's own connection on such
// a reload, which then reconnected in vain, and the service answered
// nothing until a restart (found by an operator rotating the leased user's
// password). Where something else may let it in (operator JWTs, an auth
// callout, users mapped from TLS certificates) it cannot tell, and returns
// nil.
func (f serveFlags) lockedOut(o *server.Options) error {
	if o == nil || o.AuthCallout != nil || len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.TLSMap ||
		o.CustomClientAuthentication != nil {
		return nil
	}
	authRequired := o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0
	switch {
	case f.user != "":
		password := cmp.Or(f.password, os.Getenv("LEASED_PASSWORD"))
		users := o.Users
		if o.Username != "" {
			users = append(slices.Clip(users), &server.User{Username: o.Username, Password: o.Password})
		}
		for _, u := range users {
			if u.Username == f.user {
				if !samePassword(u.Password, password) {
					return fmt.Errorf("%w: it gives serve's own user %q another password than serve's (--password or "+
						"LEASED_PASSWORD, which a reload does not change): serve would be disconnected from its own server; "+
						"restart serve with the new password instead", embedded.ErrReload, f.user)
				}
				return nil
			}
		}
		if authRequired {
			return fmt.Errorf("%w: it has no user %q, serve's own (--user): serve would be disconnected from its own server",
				embedded.ErrReload, f.user)
		}
	case f.nkey != "":
		seed, err := os.ReadFile(f.nkey)
		if err != nil {
			return nil // serve connected with it: gone since, it cannot tell
		}
		kp, err := nkeys.ParseDecoratedNKey(seed)
		if err != nil {
			return nil
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil
		}
		for _, u := range o.Nkeys {
			if u.Nkey == pub {
				return nil
			}
		}
		if authRequired {
			return fmt.Errorf("%w: it does not list serve's own nkey (--nkey %s, %s): serve would be disconnected from its own server",
				embedded.ErrReload, f.nkey, pub)
		}
	case f.creds == "" && authRequired && o.NoAuthUser == "":
		// serve started without authorization, and connected with no
		// user: a reload that adds some shut it out as one that removes
		// its user does (found in review).
		return fmt.Errorf("%w: it requires authorization, and serve connects to its own server with no user (--user, --nkey or --creds, "+
			"which a reload does not change; or the file's no_auth_user): serve would be disconnected from its own server; "+
			"restart serve with a user of the file instead", embedded.ErrReload)
	}
	return nil
}

// bcryptHash is nats-server's test for a password given as a bcrypt hash.
var bcryptHash = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

// samePassword says whether nats-server, with configured as a user's
// password, accepts given, comparing them as it does: configured is a
// bcrypt hash or the password itself.
func samePassword(configured, given string) bool {
	if strings.HasPrefix(configured, "$") && bcryptHash.MatchString(configured) {
		return bcrypt.CompareHashAndPassword([]byte(configured), []byte(given)) == nil
	}
	return subtle.ConstantTimeCompare([]byte(configured), []byte(given)) == 1
}

// embeddedConfig is the embedded server's configuration from the flags
// (and --config, once loadConfig has layered it under them).
func (f serveFlags) embeddedConfig(log *slog.Logger) (embedded.Config, error) {
	host, portStr, err := net.SplitHostPort(f.listen)
	if err != nil {
		return embedded.Config{}, usageError{fmt.Errorf("--listen %q: %v", f.listen, err)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return embedded.Config{}, usageError{fmt.Errorf("--listen %q: bad port", f.listen)}
	}
	cfg := embedded.Config{Name: nodeName(f), Host: host, Port: port, DataDir: f.data,
		Logger: log.With("component", "nats"), Debug: f.debug, Base: f.base, AllowInsecure: f.allowInsecure}
	if f.clusterName != "" && len(f.routes) == 0 {
		// nats-server's own words: "JetStream cluster requires configured
		// routes", exit 1, as if the server had failed.
		return embedded.Config{}, usageError{errors.New("--cluster-name needs --routes: the route URL of every node of the cluster, this one's too")}
	}
	if f.clusterName != "" {
		chost, cport, err := net.SplitHostPort(f.clusterListen)
		if err != nil {
			return embedded.Config{}, usageError{fmt.Errorf("--cluster-listen %q: %v", f.clusterListen, err)}
		}
		if cfg.ClusterPort, err = strconv.Atoi(cport); err != nil {
			return embedded.Config{}, usageError{fmt.Errorf("--cluster-listen %q: bad port", f.clusterListen)}
		}
		cfg.ClusterName, cfg.ClusterHost, cfg.Routes = f.clusterName, chost, f.routes
	} else if len(f.routes) > 0 {
		return embedded.Config{}, usageError{errors.New("--routes needs --cluster-name")}
	}
	switch f.sync {
	case "always":
		cfg.Sync = embedded.SyncAlways
	case "unsafe-interval":
		cfg.Sync = embedded.UnsafeSyncInterval
	default:
		return embedded.Config{}, usageError{fmt.Errorf("--sync %q: want always or unsafe-interval", f.sync)}
	}
	if err := cfg.Validate(); err != nil {
		return embedded.Config{}, usageError{err}
	}
	return cfg, nil
}

func startEmbedded(f serveFlags, log *slog.Logger) (*embedded.Server, error) {
	cfg, err := f.embeddedConfig(log)
	if err != nil {
		return nil, err
	}
	if f.sync == "unsafe-interval" {
		log.Warn("store acknowledges writes before syncing them: a power loss can hand out a fencing token twice")
	}
	srv, err := embedded.Start(cfg)
	switch {
	case errors.Is(err, embedded.ErrInsecure):
		return nil, usageError{fmt.Errorf("%w; configure authorization with --config, bind a loopback address, "+
			"or, on a network you trust, give --allow-insecure", err)}
	case errors.Is(err, embedded.ErrConfig):
		return nil, usageError{err}
	case err != nil:
		return nil, err // embedded.ErrLocked: another serve has the directory
	}
	if f.allowInsecure {
		log.Warn("--allow-insecure: ports on non-loopback addresses may accept clients and routes without authorization")
	}
	log.Info("embedded NATS server started", "name", srv.Name(), "url", redact.URL(srv.ClientURL()), "cluster", srv.ClusterAddr(),
		"data", f.data, "sync", srv.Sync().String())
	return srv, nil
}

// historyMaxBytes parses --history-max-bytes: a size in bytes, with an
// optional unit (KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB:
// powers of 1024), "none" (-1: no bound), or "" (0: the stream's bound).
func historyMaxBytes(v string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return 0, nil
	case "none":
		return -1, nil
	}
	num := strings.TrimRightFunc(v, unicode.IsLetter)
	unit := strings.ToLower(strings.TrimSpace(v[len(num):]))
	mult, ok := map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[unit]
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || !(n*mult >= 0 && n*mult <= math.MaxInt64) { // NaN fails both
		return 0, fmt.Errorf("--history-max-bytes %q: want a size such as 500MiB or 2GB, or none", v)
	}
	b := int64(n * mult)
	if b < history.MinMaxBytes {
		return 0, fmt.Errorf("--history-max-bytes %s: want at least %d bytes (1MiB), or none", v, history.MinMaxBytes)
	}
	return b, nil
}
