package embedded_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor/embedded"
)

// One server per data directory, in one process as across processes; the
// directory is free again after Shutdown.
func TestStartLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	if pid, err := embedded.LockHolder(dir); !errors.Is(err, embedded.ErrNotLocked) {
		t.Fatalf("LockHolder before any server: %d, %v; want ErrNotLocked", pid, err)
	}
	first, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := embedded.LockHolder(dir); err != nil || pid != os.Getpid() {
		first.Shutdown()
		t.Fatalf("LockHolder while the server runs: %d, %v; want pid %d", pid, err, os.Getpid())
	}
	_, err = embedded.Start(embedded.Config{DataDir: dir})
	var le *embedded.LockedError
	if !errors.Is(err, embedded.ErrLocked) || !errors.As(err, &le) || le.Dir != dir || le.PID != os.Getpid() {
		first.Shutdown()
		t.Fatalf("second server on %s: %v, want a LockedError naming pid %d", dir, err, os.Getpid())
	}
	first.Shutdown()
	first.Shutdown() // idempotent
	// The lock file stays, naming this process, but no one holds it.
	unlocked(t, dir, "Shutdown")
	again, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("after Shutdown: %v", err)
	}
	again.Shutdown()
}

// unlocked fails t unless no process holds dir's lock after what.
func unlocked(t *testing.T, dir, after string) {
	t.Helper()
	if pid, err := embedded.LockHolder(dir); !errors.Is(err, embedded.ErrNotLocked) {
		t.Fatalf("LockHolder after %s: %d, %v; want ErrNotLocked", after, pid, err)
	}
}

// Each server on a data directory has an instance name of its own, and
// knows the name of the one before it on the directory (a grantor ends
// what that one left held), once it runs. A name the file should not
// hold is no predecessor.
func TestStartNamesThePredecessor(t *testing.T) {
	dir := t.TempDir()
	start := func() *embedded.Server {
		t.Helper()
		srv, err := embedded.Start(embedded.Config{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		return srv
	}
	first := start()
	if first.Instance() == "" || first.Predecessor() != "" {
		t.Fatalf("first server: instance %q, predecessor %q; want a name and none", first.Instance(), first.Predecessor())
	}
	// A start that fails (its port taken) names no one: the next one's
	// predecessor is still the last that ran.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: ln.Addr().(*net.TCPAddr).Port}); err == nil {
		srv.Shutdown()
		t.Fatal("a server started on a port in use")
	}
	second := start()
	if second.Predecessor() != first.Instance() || second.Instance() == first.Instance() {
		t.Errorf("second server: instance %q, predecessor %q; want a new name after %q", second.Instance(), second.Predecessor(), first.Instance())
	}
	if err := os.WriteFile(filepath.Join(dir, embedded.InstanceFile), []byte("../../etc/passwd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if third := start(); third.Predecessor() != "" {
		t.Errorf("after a file that names no instance: predecessor %q, want none", third.Predecessor())
	}
}

// Non-loopback listeners without authentication are refused before
// anything is bound or locked.
func TestStartRefusesUnauthenticatedExposure(t *testing.T) {
	users := &server.Options{Users: []*server.User{{Username: "u", Password: "p"}}}
	for _, tc := range []struct {
		name string
		cfg  embedded.Config
	}{
		{"client port", embedded.Config{Host: "0.0.0.0"}},
		{"client port from base", embedded.Config{Base: &server.Options{Host: "::"}}},
		{"cluster port", embedded.Config{Name: "n1", ClusterName: "c", ClusterHost: "0.0.0.0"}},
		{"cluster port, clients authorized", embedded.Config{Base: users, Host: "0.0.0.0", Name: "n1", ClusterName: "c"}},
		// Users, but a client without credentials is let in as one of them.
		{"client port, no_auth_user", embedded.Config{Base: &server.Options{Host: "0.0.0.0",
			Users: []*server.User{{Username: "u", Password: "p"}}, NoAuthUser: "u"}}},
		// A user without a password lets in anyone who names it (found
		// by an outside client).
		{"client port, a user without a password", embedded.Config{Base: &server.Options{Host: "0.0.0.0",
			Users: []*server.User{{Username: "u", Password: "p"}, {Username: "leased"}}}}},
		{"gateway port", embedded.Config{Base: &server.Options{Users: users.Users,
			Gateway: server.GatewayOpts{Name: "gw", Host: "0.0.0.0", Port: -1}}, Name: "n1", ClusterName: "gw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			srv, err := embedded.Start(tc.cfg)
			if err == nil {
				srv.Shutdown()
			}
			if !errors.Is(err, embedded.ErrInsecure) {
				t.Fatalf("Start: %v, want ErrInsecure", err)
			}
			if tc.cfg.Base != nil && tc.cfg.Base.NoAuthUser != "" && !strings.Contains(err.Error(), "no_auth_user") {
				t.Errorf("Start: %v; want it to name the no_auth_user", err)
			}
			if strings.Contains(tc.name, "without a password") && !strings.Contains(err.Error(), "a user without a password (leased)") {
				t.Errorf("Start: %v; want it to name the user without a password", err)
			}
			if _, err := os.Stat(tc.cfg.DataDir + "/" + embedded.LockFile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("lock file after refusal: %v", err)
			}
		})
	}
}

// InProcess reaches the server without a socket, and under the same
// authentication as its client port: `leased serve`'s own connection.
func TestInProcess(t *testing.T) {
	// The refusal through a pipe ends at the server's write deadline
	// (cli.connectOwn): a short one here.
	base := &server.Options{Users: []*server.User{{Username: "u", Password: "p"}}, WriteDeadline: 100 * time.Millisecond}
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if nc, err := nats.Connect(srv.ClientURL(), srv.InProcess()); err == nil {
		nc.Close()
		t.Fatal("an in-process client without credentials was let in")
	}
	nc, err := nats.Connect(srv.ClientURL(), srv.InProcess(), nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream through the pipe: %v", err)
	}
	if got := nc.ConnectedUrl(); got != srv.ClientURL() {
		t.Errorf("ConnectedUrl %q, want the server's client URL %q", got, srv.ClientURL())
	}
	cz, err := srv.NATS().Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cz.Conns) != 1 || cz.Conns[0].Port != 0 {
		t.Fatalf("connections %+v, want one, without a TCP port", cz.Conns)
	}
}

// A server that cannot bind its port says so at once, with the cause, and
// leaves its data directory free. ReadyTimeout is long: before, Start
// waited all of it and said only "not ready".
func TestStartReportsPortInUse(t *testing.T) {
	first, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown()
	_, port, _ := net.SplitHostPort(first.Addr())
	p, _ := strconv.Atoi(port)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  embedded.Config
	}{
		{"client port", embedded.Config{Port: p}},
		{"cluster port", embedded.Config{Name: "n1", ClusterName: "c", ClusterPort: p, Routes: []string{"nats-route://127.0.0.1:" + port}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir, tc.cfg.ReadyTimeout = dir, time.Hour
			srv, err := embedded.Start(tc.cfg)
			if err == nil {
				srv.Shutdown()
				t.Fatalf("second server on port %d started", p)
			}
			if !errors.Is(err, embedded.ErrStart) || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("Start: %v, want ErrConfig naming the port in use", err)
			}
		})
	}
	again, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("data directory after the failed starts: %v", err)
	}
	again.Shutdown()
}

// A configuration file nats-server cannot use is an ErrConfig naming each
// problem with its place in the file, on one line (it ended with a stray
// separator, and could carry nats-server's warnings; found by an outside
// client).
func TestLoadConfigFileErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte("tls { cert_file: \"/nonexistent.pem\"\n key_file: \"/nonexistent-key.pem\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := embedded.LoadConfigFile(path)
	if !errors.Is(err, embedded.ErrConfig) || !strings.Contains(err.Error(), path+":1:") ||
		strings.ContainsAny(err.Error(), "\n") || strings.HasSuffix(err.Error(), "; ") {
		t.Fatalf("LoadConfigFile: %q, want one ErrConfig line naming the place", err)
	}
}

// A route refused because the two servers' cluster names differ is
// reported (nats-server logs it once, then retries quietly, and a node
// whose --cluster-name was not its peers' only said it waited for
// JetStream; found by an outside client).
func TestClusterNameMismatchReported(t *testing.T) {
	ports := freePorts(t, 2)
	route := func(i int) string { return "nats-route://127.0.0.1:" + strconv.Itoa(ports[i]) }
	started := make(chan *embedded.Server, 2)
	for i, cluster := range []string{"leased", "other"} {
		go func() {
			srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Name: "n" + strconv.Itoa(i), ClusterName: cluster,
				ClusterHost: "127.0.0.1", ClusterPort: ports[i], Routes: []string{route(0), route(1)}, ReadyTimeout: 30 * time.Second})
			if err != nil {
				t.Error(err)
			}
			started <- srv
		}()
	}
	var servers []*embedded.Server
	for range 2 {
		if srv := <-started; srv != nil {
			servers = append(servers, srv)
			t.Cleanup(srv.Shutdown)
		}
	}
	if len(servers) != 2 {
		t.Fatal("a server did not start")
	}
	for _, srv := range servers {
		select {
		case err := <-srv.ClusterNameMismatches():
			if !errors.Is(err, embedded.ErrClusterNameMismatch) || !strings.Contains(err.Error(), `"other"`) {
				t.Errorf("%s: %v, want ErrClusterNameMismatch naming the other cluster", srv.Name(), err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no cluster name mismatch reported", srv.Name())
		}
	}
}

// A data directory whose streams a server without a cluster made is
// refused as a cluster member's: nats-server does not carry them into the
// cluster, which made the lease bucket anew, its revisions (the fencing
// tokens) starting over, while the old copy served stale leases (found by
// an outside client who added --cluster-name to a single node). The same
// directory still starts without a cluster, and a cluster member's own
// directory starts again as one.
func TestStartRefusesAStandaloneStoreInACluster(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", History: 1}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()

	member, _ := clusterWithABucket(t)
	_, err = embedded.Start(member(dir))
	if !errors.Is(err, embedded.ErrStandaloneStore) || !strings.Contains(err.Error(), "$G > KV_leases") {
		t.Fatalf("cluster member on a standalone store: %v, want ErrStandaloneStore naming $G > KV_leases", err)
	}
	unlocked(t, dir, "the refusal")
	again, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("without a cluster: %v", err)
	}
	again.Shutdown()
}

// A cluster member's data directory is refused to a server without a
// cluster: it served its own copy of the cluster's bucket, behind the
// cluster's, and granted a fencing token the cluster had given (a node
// restarted without --cluster-name; found by an outside client). With its
// cluster it starts again.
func TestStartRefusesAClusterStoreWithoutACluster(t *testing.T) {
	member, dir := clusterWithABucket(t)
	_, err := embedded.Start(embedded.Config{DataDir: dir})
	if !errors.Is(err, embedded.ErrClusterStore) {
		t.Fatalf("a server without a cluster on a cluster member's store: %v, want ErrClusterStore", err)
	}
	unlocked(t, dir, "the refusal")
	m, err := embedded.Start(member(dir))
	if err != nil {
		t.Fatalf("a cluster member restarted on its own store: %v", err)
	}
	m.Shutdown()
}

// clusterWithABucket runs a cluster of three members that makes an R3 KV
// bucket, and stops it. It returns the configuration of its first member
// on a given data directory, and that member's data directory.
func clusterWithABucket(t *testing.T) (func(dir string) embedded.Config, string) {
	t.Helper()
	ports := freePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	config := func(i int, dir string) embedded.Config {
		return embedded.Config{DataDir: dir, Name: "n" + strconv.Itoa(i), ClusterName: "leased", ClusterPort: ports[i],
			Routes: routes, ReadyTimeout: 30 * time.Second}
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	servers := make([]*embedded.Server, 3)
	errs := make(chan error, 3)
	for i := range servers {
		go func() {
			var err error
			servers[i], err = embedded.Start(config(i, dirs[i]))
			errs <- err
		}()
	}
	for range servers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.Shutdown()
			}
		}
	}()
	if t.Failed() {
		t.FailNow()
	}
	nc, err := servers[0].Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(30 * time.Second); ; { // the cluster may still be forming
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", History: 1, Replicas: 3})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func(dir string) embedded.Config { return config(0, dir) }, dirs[0]
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago (kvleasetest.FreePorts, which this package's tests may not
// import: it is above grantor/embedded).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close() // held until all n are found: distinct
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Reload applies a configuration file read again, as nats-server's SIGHUP
// does: a user added can connect, one removed cannot, and the server
// keeps its data and port. A change nats-server cannot make while running
// (the client port) is refused with ErrReload and changes nothing; one
// that Start would refuse (an open port without authorization) with
// ErrInsecure.
func TestReload(t *testing.T) {
	load := configLoader(t)
	cfg := embedded.Config{DataDir: t.TempDir(), Base: load(`authorization { users = [ { user: a, password: a-pw } ] }`)}
	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connects := func(user string) bool {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, user+"-pw"))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	}
	if !connects("a") || connects("b") {
		t.Fatalf("before the reload: a connects %v, b %v; want a only", connects("a"), connects("b"))
	}
	url := srv.ClientURL()

	cfg.Base = load(`authorization { users = [ { user: b, password: b-pw } ] }`)
	if err := srv.Reload(cfg); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if connects("a") || !connects("b") || srv.ClientURL() != url {
		t.Fatalf("after the reload: a connects %v, b %v, URL %s (was %s); want b only, same URL", connects("a"), connects("b"), srv.ClientURL(), url)
	}

	_, port, _ := net.SplitHostPort(srv.Addr())
	other, _ := strconv.Atoi(port)
	moved := cfg
	moved.Port = other + 1
	if err := srv.Reload(moved); !errors.Is(err, embedded.ErrReload) || !strings.Contains(err.Error(), "port") {
		t.Fatalf("Reload with another port: %v, want ErrReload naming the port", err)
	}
	open := cfg
	open.Host, open.Base = "0.0.0.0", load(`max_payload: 1MB`)
	if err := srv.Reload(open); !errors.Is(err, embedded.ErrInsecure) {
		t.Fatalf("Reload to an open port without authorization: %v, want ErrInsecure", err)
	}
	if connects("a") || !connects("b") || srv.ClientURL() != url {
		t.Fatalf("after refused reloads: a connects %v, b %v, URL %s; want b only, at %s", connects("a"), connects("b"), srv.ClientURL(), url)
	}
}

// A reload whose file changes a logging option (debug, trace, logtime,
// log_file, syslog) keeps the server logging through Config.Logger:
// nats-server's reload replaced the logger with one of its own (to
// stderr, in its own format), and with it the watch for another server of
// the same name (NameConflicts) and for a cluster name mismatch.
func TestReloadKeepsTheLogger(t *testing.T) {
	load := configLoader(t)
	var logged lockedBuffer
	cfg := embedded.Config{DataDir: t.TempDir(), Base: load(`max_payload: 1MB`),
		Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	cfg.Base = load("max_payload: 1MB\ndebug: true\ntrace: true\nlogtime: true\n")
	if err := srv.Reload(cfg); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	srv.NATS().Noticef("a notice after the reload")
	if !strings.Contains(logged.String(), "a notice after the reload") {
		t.Errorf("a notice after a reload changing debug and logtime did not reach Config.Logger; it logged:\n%s", logged.String())
	}
	srv.NATS().Errorf("Remote server has a duplicate name: %q", srv.Name())
	select {
	case err := <-srv.NameConflicts():
		if !errors.Is(err, embedded.ErrNameConflict) {
			t.Errorf("NameConflicts: %v, want ErrNameConflict", err)
		}
	default:
		t.Errorf("nats-server's duplicate name error after the reload: NameConflicts delivered nothing")
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A reload that names another cluster is refused, and the server stays in
// its cluster: nats-server's reload renames the cluster at once (its
// routes then refused by the members that kept the old name), where
// Reload's documentation, and serve's SIGHUP, promised to change nothing.
func TestReloadRefusesAnotherClusterName(t *testing.T) {
	port := freePorts(t, 1)[0]
	cfg := embedded.Config{DataDir: t.TempDir(), Name: "n1", ClusterName: "leased", ClusterPort: port,
		Routes: []string{"nats-route://127.0.0.1:" + strconv.Itoa(port)}, ReadyTimeout: 30 * time.Second}
	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	renamed := cfg
	renamed.ClusterName = "other"
	if err := srv.Reload(renamed); !errors.Is(err, embedded.ErrReload) || !strings.Contains(err.Error(), "cluster name") {
		t.Errorf("Reload with another cluster name: %v, want ErrReload naming the cluster name", err)
	}
	if got := srv.NATS().ClusterName(); got != "leased" {
		t.Errorf("after the reload the server's cluster is %q, want leased", got)
	}
}

// configLoader returns a func that writes a configuration file's text to
// one file of t's and loads it, as serve's --config does at start and at
// each SIGHUP.
func configLoader(t *testing.T) func(text string) *server.Options {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	return func(text string) *server.Options {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		base, err := embedded.LoadConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		return base
	}
}

// A write the file system denies turns nats-server's JetStream off, until
// it restarts; StoreWriteFailures says so, as it does a write error (a
// full disk: cmd/leased's TestServeStopsWhenItsStoreFailsAWrite). Its
// block files made immutable (chattr +i), which root cannot write either.
func TestStoreWriteFailuresReportsADeniedWrite(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("needs chattr (e2fsprogs)")
	}
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("1")); err != nil {
		t.Fatal(err)
	}
	blocks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "S", "msgs", "*"))
	if len(blocks) == 0 {
		t.Fatal("no block files")
	}
	if out, err := exec.Command("chattr", append([]string{"+i"}, blocks...)...).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v: %s (not on this file system)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", append([]string{"-i"}, blocks...)...).Run() })
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, _ = js.Publish(pctx, "s", []byte("2")) // unanswered
	select {
	case err := <-srv.StoreWriteFailures():
		if !errors.Is(err, embedded.ErrStoreWrite) || !strings.Contains(err.Error(), "not permitted") {
			t.Errorf("StoreWriteFailures delivered %v, want ErrStoreWrite with the reason", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no store write failure reported for a denied write")
	}
}
