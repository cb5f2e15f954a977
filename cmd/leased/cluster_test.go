package main_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// testCluster is three `leased serve` processes forming one JetStream
// cluster on 127.0.0.1, with the topology `leased dev-cluster` and
// docker-compose.yml use (cli.ClusterServeArgs).
type testCluster struct {
	t     *testing.T
	nodes []cli.ClusterNode
	procs []*server
	net   *privateNet // nil: every node on 127.0.0.1
	bin   string      // the leased binary; "": leasedBin
	// single: one node serving alone (`leased serve` without a cluster,
	// an R1 bucket), not a one-node cluster.
	single bool
	// serveArgs are more flags for every node's serve.
	serveArgs []string
	js        map[int]jetstream.JetStream // streamInfo's connection to each node, made on first use
	logDir    string                      // if set, each node's log is also appended to <logDir>/<name>.log
}

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: clusterNodes(t, nil)}
	c.start()
	return c
}

// startClusterIn starts the three nodes each in its own network namespace
// of net, so that one can be cut off from the others.
func startClusterIn(t *testing.T, net *privateNet) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: net, nodes: clusterNodes(t, net)}
	c.start()
	return c
}

// clusterNodes describes three nodes n1..n3 with data in temporary
// directories: on free ports of 127.0.0.1, or (net not nil) each on the
// standard ports of its namespace's address.
func clusterNodes(t *testing.T, net *privateNet) []cli.ClusterNode {
	t.Helper()
	var nodes []cli.ClusterNode
	ports := []int{4222, 4222, 4222, 6222, 6222, 6222}
	if net == nil {
		ports = kvleasetest.FreePorts(t, 6)
	}
	for i := range 3 {
		host := "127.0.0.1"
		if net != nil {
			host = net.addr(i)
		}
		nodes = append(nodes, cli.ClusterNode{Name: "n" + string(rune('1'+i)), Host: host,
			Port: ports[i], ClusterPort: ports[3+i], Data: t.TempDir()})
	}
	return nodes
}

func (c *testCluster) start() {
	c.procs = make([]*server, len(c.nodes))
	for i := range c.nodes {
		c.procs[i] = c.spawn(i)
	}
	for i := range c.nodes {
		c.waitReady(i)
	}
}

func (c *testCluster) spawn(i int) *server {
	args := cli.ClusterServeArgs(c.nodes, i)
	if c.single {
		n := c.nodes[i]
		args = []string{"serve", "--name", n.Name, "--listen", net.JoinHostPort(n.Host, fmt.Sprint(n.Port)),
			"--data", n.Data, "--log-format", "json"}
	}
	cmd := c.command(i, append(args, c.serveArgs...)...)
	pipe, _ := cmd.StderrPipe()
	stderr := io.Reader(pipe)
	if c.logDir != "" {
		f, err := os.OpenFile(filepath.Join(c.logDir, c.nodes[i].Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { f.Close() })
		stderr = io.TeeReader(pipe, f)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &server{cmd: cmd, data: c.nodes[i].Data, logs: readLines(stderr), url: c.url(i)}
}

// command runs leased with args where node i runs: in its namespace, if
// the cluster has them.
func (c *testCluster) command(i int, args ...string) *exec.Cmd {
	bin := cmp.Or(c.bin, leasedBin)
	if c.net == nil {
		return exec.Command(bin, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", c.net.ns(i), bin}, args...)...)
}

func (c *testCluster) waitReady(i int) {
	c.procs[i].logs.wait(c.t, 60*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
}

func (c *testCluster) url(i int) string { return cli.ClientURLs(c.nodes[i : i+1]) }

// kill stops node i with SIGKILL.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	p := c.procs[i].cmd
	if err := p.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	_ = p.Wait()
}

// restart starts node i again on its data.
func (c *testCluster) restart(i int) {
	c.procs[i] = c.spawn(i)
	c.waitReady(i)
}

func (c *testCluster) index(name string) int {
	return slices.IndexFunc(c.nodes, func(n cli.ClusterNode) bool { return n.Name == name })
}

// streamInfo reads the lease stream's cluster info through node i.
func (c *testCluster) streamInfo(i int) *jetstream.StreamInfo {
	c.t.Helper()
	js, ok := c.js[i]
	if !ok {
		// One connection per node for the test's life: it reconnects,
		// quietly, to that node only (a restart, a pause), never to the
		// other members the server tells it of.
		js = kvleasetest.JetStream(c.t, kvleasetest.Connect(c.t, c.url(i), nats.IgnoreDiscoveredServers(),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
		if c.js == nil {
			c.js = map[int]jetstream.JetStream{}
		}
		c.js[i] = js
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Without a metadata leader API requests go unanswered: a short
		// deadline per attempt.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := js.Stream(ctx, "KV_"+kvlease.DefaultBucket)
		cancel()
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
			return s.CachedInfo()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("lease stream info: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // waiting on an election that has no event to wait on
	}
}

func (c *testCluster) leader(via int) int {
	c.t.Helper()
	return c.index(c.streamInfo(via).Cluster.Leader)
}

// newLeader waits, asking through node via, until the lease stream is led
// by a node other than old (killed or paused), failing after 30 s.
func (c *testCluster) newLeader(via, old int) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if lead := c.leader(via); lead != old {
			return lead
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new stream leader 30 s after losing %s", c.nodes[old].Name)
		}
		time.Sleep(100 * time.Millisecond) // waiting on an election that has no event to wait on
	}
}

// store opens the lease bucket directly through node i only.
func (c *testCluster) store(i int) *kvlease.Store {
	return kvleasetest.OpenStore(c.t, c.url(i), kvlease.WithoutCreate())
}

// keepHolders acquires n leases prefix+a, prefix+b, … through the given
// nodes in turn and keeps them renewed. It returns their keepers, a channel
// that receives the record of each renewal, and the highest token. The
// leases are 20 s: a failover, meta leader included, takes several seconds
// on a loaded 2-core VM.
func (c *testCluster) keepHolders(prefix string, n int, via []int) ([]*kvlease.Keeper, <-chan kvlease.Record, kvlease.Token) {
	c.t.Helper()
	var keepers []*kvlease.Keeper
	var highest kvlease.Token
	renewed := make(chan kvlease.Record, 1024)
	onRenew := kvlease.WithOnRenew(func(rec kvlease.Record, _ time.Time) {
		select {
		case renewed <- rec:
		default:
		}
	})
	for h := range n {
		l, err := kvlease.Acquire(c.t.Context(), c.store(via[h%len(via)]), prefix+string(rune('a'+h)), "holder", 20*time.Second)
		if err != nil {
			c.t.Fatal(err)
		}
		k, err := kvlease.Keep(c.t.Context(), l, onRenew)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(k.Orphan)
		keepers = append(keepers, k)
		highest = max(highest, l.Token())
	}
	return keepers, renewed, highest
}

// waitRenewedSince waits until every keeper has renewed with a record the
// server stored after since, failing if one loses its lease first or 40 s
// pass (two renewal intervals of a 20 s lease and a slow failover).
func waitRenewedSince(t *testing.T, keepers []*kvlease.Keeper, renewed <-chan kvlease.Record, since time.Time) {
	t.Helper()
	pending := map[string]bool{}
	for _, k := range keepers {
		pending[k.Lease().Name()] = true
	}
	timeout := time.After(40 * time.Second)
	for len(pending) > 0 {
		for _, k := range keepers {
			select {
			case <-k.Done():
				t.Fatalf("holder of %s lost its lease: %v", k.Lease().Name(), k.Err())
			default:
			}
		}
		select {
		case rec := <-renewed:
			if rec.StoredAt.After(since) {
				delete(pending, rec.Name)
			}
		case <-timeout:
			t.Fatalf("holders not renewed since %v: %v", since.Format(time.StampMilli), pending)
		}
	}
}

// Leases granted through any node are visible through every node, with the
// bucket replicated three times.
func TestClusterLeasesVisibleThroughEveryNode(t *testing.T) {
	c := startCluster(t)
	if info := c.streamInfo(0); info.Config.Replicas != 3 {
		t.Fatalf("lease bucket has %d replicas, want 3", info.Config.Replicas)
	}
	for i := range c.nodes {
		name := "everywhere." + c.nodes[i].Name
		if r := leased(t, c.url(i), "acquire", name, "--ttl", "30s"); r.code != 0 {
			t.Fatalf("acquire via %s: %s", c.nodes[i].Name, r.stderr)
		}
	}
	for i := range c.nodes {
		// The default 5 s --timeout is a user's; race-built nodes beside
		// other tests on two cores took longer (CI, twice).
		began := time.Now()
		r := leased(t, c.url(i), "ls", "everywhere.", "-o", "json", "--timeout", "30s")
		t.Logf("ls via %s: %v", c.nodes[i].Name, time.Since(began).Round(time.Millisecond))
		if got := strings.Count(r.stdout, `"name":"everywhere.`); r.code != 0 || got != 3 {
			t.Fatalf("ls via %s: %d leases, exit %d: %s%s", c.nodes[i].Name, got, r.code, r.stdout, r.stderr)
		}
	}
	r := leased(t, cli.ClientURLs(c.nodes), "status", "-o", "json")
	var st cli.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Replicas != 3 || st.Leader == "" ||
		len(st.Peers) != 2 || len(st.Grantors) != 3 || st.Leases != 3 {
		t.Fatalf("status: %+v (%v) %s", st, err, r.stderr)
	}
}

// percentile returns the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// SIGKILL the node that leads the lease stream while holders renew through
// the other nodes: no holder loses its lease, leases keep lapsing under the
// new leader (lateness reported), every later token is higher, and the
// killed node catches up when restarted on its data.
func TestClusterStreamLeaderKilled(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	others := []int{(lead + 1) % 3, (lead + 2) % 3}
	t.Logf("stream leader %s", c.nodes[lead].Name)

	keepers, renewed, maxBefore := c.keepHolders("held.", 6, others)
	// Short leases that will lapse during and after the failover.
	observer := c.store(others[0])
	w, err := observer.Watch(ctx, "short.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const short = 12
	for i := range short {
		d := time.Second + time.Duration(i)*250*time.Millisecond
		rec, err := observer.Grant(ctx, kvlease.GrantRequest{Name: "short." + string(rune('a'+i)), Holder: "s", Duration: d})
		if err != nil {
			t.Fatal(err)
		}
		maxBefore = max(maxBefore, rec.Token)
	}

	// One-shot renewal and release from the CLI, sent as the leader dies,
	// through the other nodes: each came back only at its --timeout (20 s,
	// unavailable), while requests sent seconds later took 0.1 s (found by
	// an outside client).
	otherURLs := cli.ClientURLs([]cli.ClusterNode{c.nodes[others[0]], c.nodes[others[1]]})
	files := map[string]string{}
	for _, name := range []string{"cli.renewed", "cli.released"} {
		r := leased(t, otherURLs, "acquire", name, "--ttl", "60s", "-o", "json")
		if r.code != 0 {
			t.Fatal(r.stderr)
		}
		files[name] = filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(files[name], []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	killed := time.Now()
	c.kill(lead)
	var cliWG sync.WaitGroup
	for verb, name := range map[string]string{"renew": "cli.renewed", "release": "cli.released"} {
		cliWG.Go(func() {
			r := leased(t, otherURLs, verb, name, "--lease-file", files[name], "--timeout", "20s")
			switch took := time.Since(killed).Round(time.Millisecond); {
			case r.code != 0:
				t.Errorf("leased %s through the failover: exit %d after %v: %s", verb, r.code, took, r.stderr)
			case took > 15*time.Second:
				t.Errorf("leased %s through the failover took %v, want it done once a new leader is in (5-8 s)", verb, took)
			default:
				t.Logf("leased %s through the failover: done %v after the kill", verb, took)
			}
		})
	}
	newLead := c.newLeader(others[0], lead)
	t.Logf("new stream leader %s after %v", c.nodes[newLead].Name, time.Since(killed).Round(time.Millisecond))
	cliWG.Wait()

	var lateness []time.Duration
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < short {
		select {
		case ev := <-w.Events():
			if ev.Type == kvlease.EventExpired && !seen[ev.Name] {
				seen[ev.Name] = true
				if late, ok := ev.Lateness(); ok {
					lateness = append(lateness, late)
				}
			}
		case <-timeout:
			t.Fatalf("only %d of %d short leases lapsed after the failover", len(seen), short)
		}
	}
	t.Logf("lapse lateness over %d leases across the failover: p50 %v, p90 %v, max %v",
		len(lateness), percentile(lateness, 0.5), percentile(lateness, 0.9), percentile(lateness, 1))

	// Holders kept their leases through the failover: each renews after it.
	waitRenewedSince(t, keepers, renewed, killed)
	// Every token granted now is higher than every token before.
	rec, err := observer.Grant(ctx, kvlease.GrantRequest{Name: "after", Holder: "h", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token <= maxBefore {
		t.Fatalf("token after failover %d, not above %d", rec.Token, maxBefore)
	}

	// The killed node comes back on its data and catches up.
	c.restart(lead)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := c.streamInfo(others[0])
		caught := true
		for _, p := range info.Cluster.Replicas {
			if p.Name == c.nodes[lead].Name && (!p.Current || p.Lag > 0) {
				caught = false
			}
		}
		if info.Cluster.Leader == c.nodes[lead].Name || caught {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not catch up: %+v", c.nodes[lead].Name, info.Cluster)
		}
		time.Sleep(200 * time.Millisecond) // replication progress has no event to wait on
	}
	back := c.store(lead)
	for _, k := range keepers {
		got, err := back.Get(ctx, k.Lease().Name())
		if err != nil || got.Token != k.Lease().Token() {
			t.Fatalf("%s through the restarted node: %+v, %v", k.Lease().Name(), got, err)
		}
	}
	if got, err := back.Get(ctx, "after"); err != nil || got.Token != rec.Token {
		t.Fatalf("lease granted while %s was down: %+v, %v", c.nodes[lead].Name, got, err)
	}
}

// SIGSTOP the node that leads the lease stream while holders renew through
// the other nodes, then SIGCONT it. While it is paused a new leader takes
// over: holders keep their leases, a contender is refused every held lease,
// and new grants get higher tokens. Once resumed, the old leader (which
// does not know it was paused) serves nothing stale: through it, the held
// leases and the grant made during its pause are there, with their tokens,
// and a contender is still refused.
func TestClusterStreamLeaderPaused(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	others := []int{(lead + 1) % 3, (lead + 2) % 3}
	t.Logf("stream leader %s", c.nodes[lead].Name)
	keepers, _, maxBefore := c.keepHolders("paused.", 4, others)
	contender := c.store(others[1])

	resume := kvleasetest.PauseProcess(t, c.procs[lead].cmd.Process)
	paused := time.Now()
	newLead := c.newLeader(others[0], lead)
	t.Logf("new stream leader %s after %v", c.nodes[newLead].Name, time.Since(paused).Round(time.Millisecond))
	var deadline time.Time // how long to ask again while the cluster settles

	// refused asks st for name as holder until it gets an answer other
	// than unavailable (a node just resumed, or a cluster electing, may
	// answer "temporarily unavailable" for a while), and wants ErrHeld.
	refused := func(st *kvlease.Store, via, name, holder string) {
		t.Helper()
		for {
			_, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: holder, Duration: 5 * time.Second})
			if errors.Is(err, kvlease.ErrUnavailable) && time.Now().Before(deadline) {
				continue // the cluster is still settling: ask again
			}
			if !errors.Is(err, kvlease.ErrHeld) {
				t.Fatalf("%s via %s for %s: %v, want ErrHeld", holder, via, name, err)
			}
			return
		}
	}
	tryContend := func(st *kvlease.Store, via string) {
		t.Helper()
		for _, k := range keepers {
			refused(st, via, k.Lease().Name(), "contender")
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	tryContend(contender, "a live node")
	during, err := contender.Grant(ctx, kvlease.GrantRequest{Name: "granted-during-pause", Holder: "h", Duration: 30 * time.Second})
	if err != nil || during.Token <= maxBefore {
		t.Fatalf("grant during the pause: %+v, %v; want a token above %d", during, err, maxBefore)
	}

	resume()
	t.Logf("%s resumed after %v", c.nodes[lead].Name, time.Since(paused).Round(time.Millisecond))
	back := c.store(lead)
	deadline = time.Now().Add(30 * time.Second)
	tryContend(back, "the resumed node")
	refused(back, "the resumed node", "granted-during-pause", "other")
	// The other nodes closed their routes to the paused one (it answered
	// no pings): resumed, it joins again, and may answer "temporarily
	// unavailable" meanwhile.
	settle, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, k := range keepers {
		got, err := kvlease.RetryUnavailable(settle, time.Second, nil, func() (kvlease.Record, error) {
			return back.Get(settle, k.Lease().Name())
		})
		if err != nil || got.Token != k.Lease().Token() {
			t.Fatalf("%s via the resumed node: %+v, %v; want token %d", k.Lease().Name(), got, err, k.Lease().Token())
		}
		select {
		case <-k.Done():
			t.Fatalf("holder of %s lost its lease: %v", k.Lease().Name(), k.Err())
		default:
		}
	}
}

// SIGSTOP a node that does not lead the lease stream, for longer than a
// lease, while holders renew through the lease service (as `leased run`
// does): those connected to the other nodes keep their leases, and so does
// one connected to the paused node, which leaves it for another; reads
// through the other nodes answer. The paused node's service stays in the
// service's queue group, and its server answers JetStream's direct reads,
// until the other members close their routes to it: with nats-server's
// route pings (every 30 s, 2 unanswered) that took 60–90 s and a third of
// the requests waited there until their callers gave up; a holder on the
// paused node kept waiting on it for minutes (nats.go's pings).
func TestClusterPausedNodeServiceHolders(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	paused := (lead + 1) % 3
	others := []int{lead, (lead + 2) % 3}
	t.Logf("stream leader %s, pausing %s", c.nodes[lead].Name, c.nodes[paused].Name)
	const d = 20 * time.Second
	svc := func(url string, opts ...nats.Option) *client.Client {
		cl, err := client.New(kvleasetest.Connect(t, url, append(kvlease.ConnOptions(), opts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	renewed := make(chan kvlease.Record, 1024)
	onRenew := kvlease.WithOnRenew(func(rec kvlease.Record, _ time.Time) {
		select {
		case renewed <- rec:
		default:
		}
	})
	var keepers []*kvlease.Keeper
	hold := func(g kvlease.Grantor, name string) {
		l, err := kvlease.Acquire(ctx, g, name, "holder", d)
		if err != nil {
			t.Fatal(err)
		}
		k, err := kvlease.Keep(ctx, l, onRenew)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Orphan)
		keepers = append(keepers, k)
	}
	readers := make([]*client.Client, len(others))
	for i, n := range others {
		readers[i] = svc(c.url(n), nats.IgnoreDiscoveredServers())
		for h := range 2 {
			hold(svc(c.url(n), nats.IgnoreDiscoveredServers()), fmt.Sprintf("svc.%s.%d", c.nodes[n].Name, h))
		}
	}
	// Connected to the node that pauses first, knowing the others.
	all := cli.ClientURLs([]cli.ClusterNode{c.nodes[paused], c.nodes[others[0]], c.nodes[others[1]]})
	hold(svc(all, nats.DontRandomize()), "svc.roaming")

	kvleasetest.PauseProcess(t, c.procs[paused].cmd.Process)
	pausedAt := time.Now()
	// Every holder renews after a lease's duration of the pause: had none
	// of its renewals got through since the pause began, it would have
	// lost its lease by then.
	waitRenewedSince(t, keepers, renewed, pausedAt.Add(d))
	t.Logf("every holder renewed %v into the pause", time.Since(pausedAt).Round(time.Millisecond))
	for i, cl := range readers {
		for range 10 {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := cl.Get(rctx, "svc.roaming")
			cancel()
			if err != nil {
				t.Fatalf("get through %s while %s is paused: %v", c.nodes[others[i]].Name, c.nodes[paused].Name, err)
			}
		}
	}
}

// SIGKILL the node a holder is connected to: the holder fails over to
// another node and keeps its lease, or reports the loss no later than its
// deadline.
func TestClusterHolderNodeKilled(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	victim := (lead + 1) % 3 // not the stream leader: this is about the holder's own connection
	urls := c.url(victim) + "," + cli.ClientURLs(c.nodes)
	nc := kvleasetest.Connect(t, urls, nats.DontRandomize(), nats.ReconnectBufSize(-1))
	js := kvleasetest.JetStream(t, nc)
	st, err := kvlease.Open(ctx, js, kvlease.WithoutCreate())
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvlease.Acquire(ctx, st, "failover", "h", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan time.Time, 1)
	k, err := kvlease.Keep(ctx, l, kvlease.WithOnLost(func(error) { lost <- time.Now() }))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Orphan()
	before := nc.ConnectedUrl()
	c.kill(victim)
	deadline := l.Deadline()
	// Watch the holder for two lease durations.
	select {
	case at := <-lost:
		if at.After(deadline.Add(50 * time.Millisecond)) {
			t.Fatalf("loss reported at %v, after the deadline %v", at, deadline)
		}
		t.Logf("holder lost its lease (reported %v before its deadline): %v", deadline.Sub(at), k.Err())
	case <-time.After(12 * time.Second):
		if nc.ConnectedUrl() == before || k.Stats().Renewals < 2 {
			t.Fatalf("holder still on %s with %d renewals", nc.ConnectedUrl(), k.Stats().Renewals)
		}
		t.Logf("holder failed over from %s to %s and kept its lease (%d renewals, %d failures)",
			before, nc.ConnectedUrl(), k.Stats().Renewals, k.Stats().Failures)
	}
	if err := l.Check(); err != nil && !errors.Is(err, kvlease.ErrExpired) {
		t.Fatal(err)
	}
}

// Two conflicting grants race across a stream-leader change (nats-server
// issue 8469 reports that both can be acknowledged). The test tries it many
// times, reports what it saw, and shows the fence refusing the lower token
// of any pair. LEASED_LONG=1 runs 200 trials instead of 12.
func TestClusterConflictingGrantsAcrossLeaderChange(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	a, b := c.store(0), c.store(1)
	admin := kvleasetest.Connect(t, cli.ClientURLs(c.nodes))
	js := kvleasetest.JetStream(t, admin)
	fc, err := fence.OpenKV(ctx, js, "fences", fence.WithReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	trials := 12
	if longTests() {
		trials = 200
	}
	var both, one, none int
	for i := range trials {
		name := "race." + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + "." + time.Now().Format("150405.000000")
		type result struct {
			rec kvlease.Record
			err error
		}
		res := make(chan result, 2)
		grant := func(st *kvlease.Store, holder string) {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			rec, err := st.Grant(gctx, kvlease.GrantRequest{Name: name, Holder: holder, Duration: 5 * time.Second})
			res <- result{rec, err}
		}
		go func() { // step the leader down while the grants are in flight
			_, _ = admin.Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_"+kvlease.DefaultBucket, nil, 2*time.Second)
		}()
		go grant(a, "a")
		go grant(b, "b")
		r1, r2 := <-res, <-res
		switch {
		case r1.err == nil && r2.err == nil:
			both++
			lo, hi := min(r1.rec.Token, r2.rec.Token), max(r1.rec.Token, r2.rec.Token)
			t.Logf("trial %d: BOTH grants acknowledged (tokens %d and %d)", i, lo, hi)
			if err := fc.Write(ctx, name, hi, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if err := fc.Write(ctx, name, lo, []byte("lo")); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("fence accepted the lower token %d after %d: %v", lo, hi, err)
			}
		case r1.err == nil || r2.err == nil:
			one++
			ok := r1
			if r1.err != nil {
				ok = r2
			}
			// The winner writes; a forged lower token is refused.
			if err := fc.Write(ctx, name, ok.rec.Token, []byte("winner")); err != nil {
				t.Fatal(err)
			}
			if err := fc.Write(ctx, name, ok.rec.Token-1, []byte("late")); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("fence accepted a lower token: %v", err)
			}
		default:
			none++
		}
		c.leader(0) // wait for a leader before the next trial
	}
	t.Logf("%d trials across leader step-downs: both acknowledged %d, exactly one %d, neither %d", trials, both, one, none)
	if one+both == 0 {
		t.Fatal("no grant succeeded in any trial")
	}
}

func longTests() bool { return os.Getenv("LEASED_LONG") == "1" }

// Issue 10 item 3: a stream leader SIGSTOPped past the election still
// answers, for a few milliseconds after SIGCONT, from its frozen state. A
// lease whose tenure ended during the pause and was granted again by the
// new leader (a higher token) is, in that state, still its old holder's;
// the service must not turn that stale read into not_holder (or expired)
// for the live holder. Each round pauses the leader, ends "w10"'s tenure,
// grants the lease to "w20" through a live node, queues renewals of w20's
// tenure on the paused node (they wait in its socket and are the first
// thing it reads when it resumes), resumes it, and then renews through it
// at once, repeatedly. Every answer must be a renewal, a conflict (another
// renewal won) or unavailable. LEASED_LONG=1 runs 8 rounds instead of 2.
func TestClusterResumedLeaderRefusesNoLiveHolder(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	rounds := 2
	if longTests() {
		rounds = 8
	}
	client := func(i int) (*client.Client, *nats.Conn) {
		nc := kvleasetest.Connect(t, c.url(i))
		cl, err := client.New(nc, client.WithTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return cl, nc
	}
	var wrong, answers, staleRounds int
	for round := range rounds {
		lead := c.leader(0)
		live := (lead + 1) % 3
		// The test's own writes go to the bucket through a live node, not
		// through the service: a request that the queue group hands to the
		// paused node's service would wait there and run when it resumes
		// (a revocation of w20's tenure, say).
		liveStore := c.store(live)
		leadCl, leadNC := client(lead)
		storeNC := kvleasetest.Connect(t, c.url(lead)) // the bucket directly, through the leader's node
		leadStore, err := kvlease.Open(ctx, kvleasetest.JetStream(t, storeNC), kvlease.WithoutCreate())
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("stale.%d", round)
		// The node resumed in the round before rejoins with an election
		// (the others had dropped their routes to it): the bucket may answer
		// "unavailable" for a few seconds.
		settle, cancelSettle := context.WithTimeout(ctx, 30*time.Second)
		old, err := kvlease.RetryUnavailable(settle, time.Second, nil, func() (kvlease.Record, error) {
			gctx, cancel := context.WithTimeout(settle, 5*time.Second)
			defer cancel()
			return liveStore.Grant(gctx, kvlease.GrantRequest{Name: name, Holder: "w10", Duration: 30 * time.Second, Secret: "s10"})
		})
		cancelSettle()
		if err != nil {
			t.Fatal(err)
		}

		resume := kvleasetest.PauseProcess(t, c.procs[lead].cmd.Process)
		paused := time.Now()
		c.newLeader(live, lead)
		// End w10's tenure through the new leader. A lapse would leave the
		// paused node in the same state but keep it paused seconds longer,
		// and a stream leader paused past the raft lost-quorum interval
		// (10 s) steps down as soon as it resumes, leaving no stale window.
		for deadline := time.Now().Add(30 * time.Second); ; {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = liveStore.Revoke(rctx, name, "ended during the pause", kvlease.FreeNow())
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, kvlease.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("round %d: revoke during the pause: %v", round, err)
			}
		}
		var cur kvlease.Record
		for deadline := time.Now().Add(30 * time.Second); ; {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cur, err = liveStore.Grant(gctx, kvlease.GrantRequest{Name: name, Holder: "w20", Duration: 30 * time.Second, Secret: "s20"})
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, kvlease.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("round %d: grant to w20 during the pause: %v", round, err)
			}
		}
		renew := kvlease.RenewRequest{Name: name, Holder: "w20", Token: cur.Token, Revision: cur.Revision,
			Secret: cur.Secret, Duration: 30 * time.Second}
		check := func(rec kvlease.Record, err error) {
			t.Helper()
			answers++
			switch {
			case err == nil:
				if rec.Token != cur.Token {
					t.Fatalf("round %d: renewal returned token %d, want %d", round, rec.Token, cur.Token)
				}
				renew.Revision = max(renew.Revision, rec.Revision)
			case errors.Is(err, kvlease.ErrStaleRevision), errors.Is(err, kvlease.ErrUnavailable):
			default: // not_holder or expired for a live holder
				wrong++
				t.Errorf("round %d: renewal of %s (token %d, revision %d) by its live holder: %v",
					round, name, cur.Token, cur.Revision, err)
			}
		}

		// Renewals through the paused node's service, and through a Store
		// of the test's own on that node (its first read is then a request
		// waiting in the paused node's socket). Without a deadline, as a
		// caller that waits for the answer: with one, those queued in the
		// paused node are rightly not carried out late (too_late), and w20's
		// lease lapses, which is not what this test looks at. The client
		// and the Store bound such a call all the same (WithTimeout; the
		// JetStream context's DefaultTimeout): an unanswered one says
		// unavailable.
		const queued = 16
		results := make(chan error, 2*queued)
		before, beforeStore := leadNC.Stats().OutMsgs, storeNC.Stats().OutMsgs
		for i := range 2 * queued {
			req := renew
			g := kvlease.Grantor(leadCl)
			if i%2 == 1 {
				g = leadStore
			}
			go func() {
				rec, err := g.Renew(ctx, req)
				if err == nil && rec.Token != cur.Token {
					err = fmt.Errorf("renewed with token %d, want %d", rec.Token, cur.Token)
				}
				results <- err
			}()
		}
		// And plain reads of the lease's last entry, to see whether this
		// pause left the node answering from its frozen state at all.
		const reads = 16
		seen := make(chan uint64, reads)
		for range reads {
			go func() {
				body, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + kvlease.DefaultBucket + "." + name})
				var resp struct {
					Message struct {
						Seq uint64 `json:"seq"`
					} `json:"message"`
				}
				if r, err := storeNC.Request("$JS.API.STREAM.MSG.GET.KV_"+kvlease.DefaultBucket, body, 20*time.Second); err == nil {
					_ = json.Unmarshal(r.Data, &resp) // an error reply reads as 0
				}
				seen <- resp.Message.Seq
			}()
		}
		// Resume only once the requests are in the paused node's socket.
		// There is no event for "written": poll the clients' counters.
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, _ := leadNC.Buffered()
			m, _ := storeNC.Buffered()
			if leadNC.Stats().OutMsgs-before >= queued && storeNC.Stats().OutMsgs-beforeStore >= queued+reads && n+m == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("renewals not written to the paused node")
			}
			time.Sleep(time.Millisecond)
		}
		resume()
		pause := time.Since(paused)
		for i := range 20 { // and renew through it while it wakes
			g := kvlease.Grantor(leadCl)
			if i%2 == 1 {
				g = leadStore
			}
			rec, err := g.Renew(ctx, renew)
			check(rec, err)
		}
		for range 2 * queued {
			check(kvlease.Record{Token: cur.Token}, <-results)
		}
		behind := 0
		for range reads {
			if r := <-seen; r > 0 && r < cur.Revision {
				behind++
			}
		}
		if behind > 0 {
			staleRounds++
		}
		t.Logf("round %d: %s token %d (w10) ended, token %d (w20) renewed through %s, resumed after %v; %d of %d reads there showed an older revision",
			round, name, old.Token, cur.Token, c.nodes[lead].Name, pause.Round(time.Millisecond), behind, reads)
		// The lease is still w20's.
		var got kvlease.Record
		for deadline := time.Now().Add(30 * time.Second); ; {
			if got, err = liveStore.Get(ctx, name); !errors.Is(err, kvlease.ErrUnavailable) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || got.Holder != "w20" || got.Token != cur.Token {
			t.Fatalf("round %d: after the pause %s is %+v, %v; want w20 with token %d", round, name, got, err, cur.Token)
		}
		c.leader(0) // wait for the cluster to settle before the next round
	}
	t.Logf("%d wrong answers (not_holder or expired) among %d renewals by a live holder in %d leader pauses; "+
		"the resumed node answered reads from its frozen state after %d of them", wrong, answers, rounds, staleRounds)
}

// SIGKILL a node that serves the consumers of lease watches (not the
// stream's leader): every watch goes on delivering the changes stored
// after it. The server takes a killed node for offline only minutes later
// and meanwhile may place a watch's new consumer on it again; a watch must
// not wait there for the node to come back.
func TestClusterWatchConsumerNodeKilled(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	victim, via := (lead+1)%3, (lead+2)%3
	store := c.store(via)
	c.streamInfo(via) // opens c.js[via]
	stream, err := c.js[via].Stream(ctx, "KV_"+kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Watches, each on its own prefix, until 8 have their consumer on the
	// victim (the server places each at random among the stream's peers).
	var onVictim []*kvlease.Watcher
	var prefixes []string
	for i := 0; len(onVictim) < 8; i++ {
		if i == 100 {
			t.Fatalf("only %d of 100 watch consumers placed on %s", len(onVictim), c.nodes[victim].Name)
		}
		prefix := fmt.Sprintf("w%d.", i)
		w, err := store.Watch(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		<-w.Synced()
		host := ""
		for ci := range stream.ListConsumers(ctx).Info() {
			// one filter comes back as FilterSubject
			if ci.Config.FilterSubject == "$KV."+kvlease.DefaultBucket+"."+prefix+">" && ci.Cluster != nil {
				host = ci.Cluster.Leader
			}
		}
		if host != c.nodes[victim].Name {
			w.Stop()
			continue
		}
		onVictim = append(onVictim, w)
		prefixes = append(prefixes, prefix)
	}
	c.kill(victim)
	killed := time.Now()
	for i, w := range onVictim {
		if _, err := store.Grant(ctx, kvlease.GrantRequest{Name: prefixes[i] + "after", Holder: "h", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(20 * time.Second)
	wait:
		for {
			select {
			case ev := <-w.Events():
				if ev.Type == kvlease.EventGranted && ev.Name == prefixes[i]+"after" {
					t.Logf("watch %s: grant seen %v after the kill", prefixes[i], time.Since(killed).Round(time.Millisecond))
					break wait
				}
			case <-timeout:
				t.Fatalf("watch %s saw no grant 20 s after its consumer's node was killed (err %v)", prefixes[i], w.Err())
			}
		}
	}
}

// A candidate waiting in `leased elect`, connected to the node that leads
// JetStream's meta group, takes over at the leader's release when that
// node is killed as the leader resigns. Its watch, cut off by the kill,
// makes its consumer anew only once another meta leader is elected
// (seconds): it took over 6–9 s after the release (found by an outside
// client, killing the node of a waiting candidate); a candidate whose
// watch is interrupted tries the grant meanwhile.
func TestClusterElectWaiterOnKilledMetaLeaderTakesOverAtTheRelease(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	meta := c.metaLeader()
	via := (meta + 1) % 3
	if c.leader(via) == meta {
		// The release must not wait for the lease stream's failover.
		c.streamInfo(via) // opens c.js[via]
		if _, err := c.js[via].Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_"+kvlease.DefaultBucket, nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c.newLeader(via, meta)
	}
	const name = "leader.meta"
	l, err := kvlease.Acquire(ctx, c.store(via), name, "old", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.command(meta, "elect", name, "--ttl", "20s", "--holder", "waiter", "--url", c.url(meta), "--", "true")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := readLines(pipe)
	logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, "waiting: another candidate leads") })
	// That line is the candidate's observer's; its campaign waits once
	// its own watch is made too (a consumer each), and a grant it has in
	// flight as the node dies is tried again only 2 s later.
	c.streamInfo(via) // opens c.js[via]
	stream, err := c.js[via].Stream(ctx, "KV_"+kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		watches := 0
		for ci := range stream.ListConsumers(ctx).Info() {
			if ci.Config.FilterSubject == "$KV."+kvlease.DefaultBucket+"."+name {
				watches++
			}
		}
		if watches >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers on %s 30 s after the candidate waited, want its observer's and its campaign's", watches, name)
		}
		time.Sleep(50 * time.Millisecond) // no event says a consumer was made
	}
	c.kill(meta)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	_, at := logs.waitAt(t, 30*time.Second, func(l string) bool { return strings.Contains(l, "holding lease; command started") })
	// A meta leader is elected 4 s or more after the kill (6–9 s seen).
	if d := at.Sub(released); d > 3*time.Second {
		t.Fatalf("the waiting candidate led %v after the release (want within 3 s):\n%s", d.Round(time.Millisecond), logs.text())
	} else {
		t.Logf("the waiting candidate led %v after the release", d.Round(time.Millisecond))
	}
}

// metaLeader is the node that leads JetStream's meta group, as the nodes'
// logs say once all three agree, failing after 30 s.
func (c *testCluster) metaLeader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		said, told := map[int]bool{}, 0 // the leader each node names; how many name one
		for i, p := range c.procs {
			lines := strings.Split(p.logs.text(), "\n")
			for j := len(lines) - 1; j >= 0; j-- {
				if strings.Contains(lines[j], "Self is new JetStream cluster metadata leader") {
					said[i], told = true, told+1
					break
				}
				if _, rest, ok := strings.Cut(lines[j], "JetStream cluster new metadata leader: "); ok {
					n, _, _ := strings.Cut(rest, "/")
					said[c.index(n)], told = true, told+1
					break
				}
				if strings.Contains(lines[j], "JetStream cluster no metadata leader") {
					said[-1], told = true, told+1
					break
				}
			}
		}
		if len(said) == 1 && told == len(c.procs) {
			for i := range said {
				if i >= 0 {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the nodes do not agree on a meta leader after 30 s: %v", said)
		}
		time.Sleep(100 * time.Millisecond) // waiting on an election that has no event to wait on
	}
}

// A node started with the name of a node of its cluster stops before it
// is ready, and the cluster goes on granting: JetStream tells its nodes
// apart by name, and a second "n2" (its own data directory, the cluster's
// routes) took part in the raft groups as n2, so that grants it
// acknowledged were lost and their tokens granted again (found by an
// outside client). The node that is already running keeps serving and
// says what it saw.
func TestClusterRefusesADuplicateName(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	cl, err := client.New(kvleasetest.Connect(t, c.url(0), kvlease.ConnOptions()...), client.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before, err := cl.Grant(ctx, kvlease.GrantRequest{Name: "dup.before", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ports := kvleasetest.FreePorts(t, 2)
	args := cli.ClusterServeArgs(c.nodes, 1) // n2's name and the cluster's routes
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen":
			args[i+1] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		case "--cluster-listen":
			args[i+1] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		case "--data":
			args[i+1] = t.TempDir()
		}
	}
	dup := exec.Command(leasedBin, args...)
	var stderr strings.Builder
	dup.Stderr = &stderr
	if err := dup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dup.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- dup.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitError || !strings.Contains(stderr.String(), "another server of the cluster has this name") ||
			strings.Contains(stderr.String(), `"msg":"ready"`) {
			t.Fatalf("second n2: %v, stderr:\n%s\nwant exit %d before ready, naming the conflict", err, stderr.String(), cli.ExitError)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("a second n2 still runs after 60 s; stderr:\n%s", stderr.String())
	}
	// The running n2 said so.
	c.procs[1].logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "another server has this node's name") })
	// The cluster still has what it acknowledged, and grants on from there.
	got, err := cl.Get(ctx, "dup.before")
	if err != nil || got.Token != uint64(before.Token) {
		t.Fatalf("dup.before after the duplicate left: %+v, %v; want token %d", got, err, before.Token)
	}
	after, err := cl.Grant(ctx, kvlease.GrantRequest{Name: "dup.after", Holder: "h", Duration: time.Minute})
	if err != nil || after.Token <= before.Token {
		t.Fatalf("a grant after the duplicate left: %+v, %v; want a token above %d", after, err, before.Token)
	}
}

// A grantor whose bucket is deleted and made anew under it (a NATS server
// restarted on an empty store, a bucket recreated) stops, exit 1, saying
// why, to be started again on the new bucket knowingly: it answered lists
// and counts from its index of the old bucket, and its reads stayed
// unavailable (found by an outside client).
func TestServeStopsWhenItsBucketIsReplaced(t *testing.T) {
	s := startServe(t, "")
	if r := leased(t, s.url, "acquire", "old.a", "--ttl", "60s"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.url))
	if err := js.DeleteKeyValue(t.Context(), kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	kvleasetest.OpenStore(t, s.url) // makes it anew
	err := waitExit(s.cmd, 30*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("serve with its bucket made anew: %v, want exit 1\n%s", err, s.logs.text())
	}
	s.logs.wait(t, time.Second, func(l string) bool {
		return strings.Contains(l, "cannot serve on") && strings.Contains(l, "made anew")
	})
}

// A grantor whose bucket is deleted and stays missing stops too, exit 1,
// saying so: its watch of the bucket ended with the stream gone, and it
// ran on, every list answered "unavailable" and its per-holder counts
// stopped, and went on so once a restarted node made the bucket anew
// (found deleting the bucket under a three-node cluster and restarting
// one node). Started again, it makes the bucket anew above its history.
func TestServeStopsWhenItsBucketIsDeleted(t *testing.T) {
	s := startServe(t, "")
	r := leased(t, s.url, "acquire", "gone.a", "--ttl", "60s", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.url))
	if err := js.DeleteKeyValue(t.Context(), kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	err := waitExit(s.cmd, 30*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("serve with its bucket deleted: %v, want exit 1\n%s", err, s.logs.text())
	}
	s.logs.wait(t, time.Second, func(l string) bool {
		return strings.Contains(l, "cannot serve on") && strings.Contains(l, "lease bucket is missing")
	})
	// Started again, it makes the bucket anew above the tokens its history
	// recorded.
	var before, after struct{ Token uint64 }
	if err := json.Unmarshal([]byte(r.stdout), &before); err != nil || before.Token == 0 {
		t.Fatalf("acquire's output %q: %v", r.stdout, err)
	}
	s = startServe(t, s.data)
	if r = leased(t, s.url, "acquire", "gone.b", "--ttl", "60s", "-o", "json"); r.code != 0 {
		t.Fatalf("acquire on the bucket made anew: %+v", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &after); err != nil || after.Token <= before.Token {
		t.Fatalf("a grant on the bucket made anew: %q, %v; want a token above %d", r.stdout, err, before.Token)
	}
}

// A bucket deleted under a cluster, its history kept: the nodes started
// again together make it anew above the tokens its history recorded.
// They made it at 1: as they started, JetStream did not answer their look
// at the bucket and its history within the one attempt it had (its meta
// group still electing), and they went on without it (found deleting the
// bucket under a three-node cluster, as README describes).
func TestClusterMakesADeletedBucketAnewAboveItsHistory(t *testing.T) {
	c := startCluster(t)
	urls := cli.ClientURLs(c.nodes)
	var before, after struct{ Token uint64 }
	r := leased(t, urls, "acquire", "anew.a", "--ttl", "60s", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &before); r.code != 0 || err != nil || before.Token == 0 {
		t.Fatalf("acquire: %+v, %v", r, err)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, urls))
	h, err := history.Open(t.Context(), js, kvlease.DefaultBucket, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_ = h.Follow(ctx, "anew.a", time.Time{}, func(r history.Record, _ bool) bool { return r.Token != before.Token })
	if last, _, err := h.Last(ctx); err != nil || last.Revision < before.Token {
		t.Fatalf("the history's last revision %d, %v; want it to have recorded token %d", last.Revision, err, before.Token)
	}
	if err := js.DeleteKeyValue(t.Context(), kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	// Stopped at once, as an operator restarting them would (whether
	// they stop by themselves is TestServeStopsWhenItsBucketIsDeleted's).
	for _, p := range c.procs {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	for i := range c.nodes {
		c.procs[i] = c.spawn(i)
	}
	for i := range c.nodes {
		c.waitReady(i)
	}
	r = leased(t, urls, "acquire", "anew.b", "--ttl", "60s", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &after); r.code != 0 || err != nil || after.Token <= before.Token {
		t.Fatalf("a grant on the bucket made anew: %+v, %v; want a token above %d", r, err, before.Token)
	}
}

// A node that joined the cluster and left for good still counts in
// JetStream's meta group: with it gone and one of the first three down,
// the bucket's stream has its majority (grants go through) while the meta
// group has none, and JetStream refuses reads (503, err_code 10008).
// status printed nothing but that 503, exit 1, with the hint to run
// "leased status", itself (found by trying the README's cluster by hand).
// It now shows the stream's leader and followers and the grantors, says
// the lease count is unknown and why, and still exits 1.
func TestClusterStatusWithADepartedNode(t *testing.T) {
	c := startCluster(t)
	ports := kvleasetest.FreePorts(t, 2)
	c.nodes = append(c.nodes, cli.ClusterNode{Name: "n4", Host: "127.0.0.1", Port: ports[0], ClusterPort: ports[1],
		Data: t.TempDir()})
	c.procs = append(c.procs, c.spawn(3))
	c.waitReady(3) // it has joined the meta group: its bucket opened
	c.procs[3].stop(t)
	c.kill(0)

	survivors := cli.ClientURLs(c.nodes[1:3])
	// Grants go through: the stream's own group has its majority, once it
	// has a leader (n1 may have been it).
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := leased(t, survivors, "acquire", "departed.a", "--ttl", "20s")
		if r.code == cli.ExitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquire through n2, n3: exit %d\n%s", r.code, r.stderr)
		}
	}
	var r result
	for {
		r = leased(t, survivors, "status")
		if strings.Contains(r.stdout, "leases    unknown") || time.Now().After(deadline) {
			break
		}
	}
	if r.code != cli.ExitError || !regexp.MustCompile(`(?m)^leader +n[23]$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "leases    unknown") || !strings.Contains(r.stdout, "grantor   n2") {
		t.Fatalf("status through n2, n3: exit %d, want %d with the stream's leader, no count and the grantors\nstdout:\n%s\nstderr:\n%s",
			r.code, cli.ExitError, r.stdout, r.stderr)
	}
	// The meta group is named when JetStream's answer says why (503,
	// "JetStream system temporarily unavailable"); the count's request can
	// also time out in the service first (a CI run), and then status says
	// only that the count could not be read.
	if !strings.Contains(r.stderr, "lease count could not be read") || strings.Contains(r.stderr, "(leased status)") {
		t.Errorf("status's error, want the count said unknown, and no hint to run status:\n%s", r.stderr)
	}
}

// A node's /healthz says whether it can grant: ok while its cluster has a
// majority, unavailable once the other two nodes are gone (nats-server's
// own health: the lease stream not current, its group without a majority;
// or a read through the stream's leader failing).
func TestClusterNodeHealth(t *testing.T) {
	c := &testCluster{t: t, nodes: clusterNodes(t, nil), serveArgs: []string{"--metrics-listen", "127.0.0.1:0"}}
	c.start()
	health := healthURL(t, c.procs[0].logs)
	awaitHealth(t, health, http.StatusOK, 30*time.Second)
	c.kill(1)
	c.kill(2)
	// Whichever sees it first: nats-server's health, or the read.
	if body := awaitHealth(t, health, http.StatusServiceUnavailable, 60*time.Second); !strings.Contains(body, "the embedded NATS server") &&
		!strings.Contains(body, "did not answer a read through its leader") {
		t.Errorf("/healthz with two of three nodes gone says %q, want the embedded server's reason or the read's", body)
	}
}

// awaitHealth waits until GET url answers code, and returns its body
// (bounded poll: nothing announces a change of nats-server's health).
func awaitHealth(t *testing.T, url string, code int, within time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == code {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q after %v, want %d", url, resp.StatusCode, b, within, code)
		}
	}
}

// The same for a serve on a NATS cluster of its own: its /healthz says
// unavailable once the lease stream has no leader (two of three NATS
// servers gone), which its connection, still up, did not say.
func TestServeOnAClusterHealth(t *testing.T) {
	servers := kvleasetest.NewCluster(t, 3)
	logs := serveOn(t, servers[0].ClientURL(), "--replicas", "3", "--metrics-listen", "127.0.0.1:0")
	logs.wait(t, 60*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	health := healthURL(t, logs)
	awaitHealth(t, health, http.StatusOK, 30*time.Second)
	servers[1].Shutdown()
	servers[2].Shutdown()
	if body := awaitHealth(t, health, http.StatusServiceUnavailable, 60*time.Second); !strings.Contains(body, "did not answer a read through its leader") {
		t.Errorf("/healthz with two of three NATS servers gone says %q, want the lease stream's read failing", body)
	}
}
