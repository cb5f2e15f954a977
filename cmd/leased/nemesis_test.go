package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/cmd/leased/internal/faultcheck"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The randomized fault suite: real `leased serve` nodes, holder processes
// competing for a few short leases through the service API, a nemesis
// injecting faults with quiet periods between them, and faultcheck over
// the whole history afterwards. TestNemesis runs a short variant of each
// topology (one fault of each kind, in random order); with LEASED_LONG=1 a
// long one (README, "Reliability"). LEASED_NEMESIS_SEED=N repeats a run's
// random choices (not its timing); LEASED_NEMESIS_KEEP=1 keeps the
// histories and node logs of a short run that passed (those of a failed
// or a long run are always kept).

// nemesisConfig sizes one run.
type nemesisConfig struct {
	nodes   int // 3: a cluster (R3 bucket); 1: one serve alone (R1)
	leases  int
	holders int           // processes
	loops   int           // holders in each process (holderSpec.Loops)
	rounds  int           // each round injects every fault kind once, in random order
	d       time.Duration // the holders' D
	quiet   [2]time.Duration
	// minTenures is what a run must reach to count: a harness that
	// grants nothing would pass every check.
	minTenures int
	// plain runs the nodes without the race detector (timing closer to
	// production; the short variant keeps it, to catch races under faults).
	plain bool
	// load is how many clients of a background `leased bench --op
	// grant-release` (one node only) write other leases through the
	// service all along, so that group commit batches the holders' writes
	// with theirs: a few holders alone never queue behind each other.
	load int
}

func TestNemesis(t *testing.T) {
	for _, tc := range []struct {
		name        string
		short, long nemesisConfig
	}{
		{"cluster", nemesisConfig{nodes: 3, leases: 3, holders: 4, rounds: 1, d: 3 * time.Second,
			quiet: [2]time.Duration{1500 * time.Millisecond, 3 * time.Second}, minTenures: 8},
			nemesisConfig{nodes: 3, leases: 16, holders: 10, loops: 4, rounds: 17, d: 3 * time.Second,
				quiet: [2]time.Duration{2 * time.Second, 4 * time.Second}, minTenures: 1000, plain: true}},
		{"single", nemesisConfig{nodes: 1, leases: 2, holders: 3, rounds: 1, d: 3 * time.Second,
			quiet: [2]time.Duration{1500 * time.Millisecond, 3 * time.Second}, minTenures: 4, load: 4},
			nemesisConfig{nodes: 1, leases: 4, holders: 6, rounds: 8, d: 3 * time.Second,
				quiet: [2]time.Duration{2 * time.Second, 4 * time.Second}, minTenures: 100, plain: true, load: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.short
			if longTests() {
				cfg = tc.long
			}
			runNemesis(t, cfg)
		})
	}
}

type nemesis struct {
	t       *testing.T
	cfg     nemesisConfig
	c       *testCluster
	proxies []*kvleasetest.Proxy // one per node: the holders' way in
	rnd     *rand.Rand
	dir     string // the histories
	kinds   []faultcheck.FaultKind

	holders  []*nemesisHolder // live, by start
	started  int
	faults   *faultcheck.Writer
	stream   []faultcheck.Record // the faults, as written
	onLeader map[faultcheck.FaultKind]int
	metrics  string // the single node's /metrics URL (its port is the same across restarts)

	loadMu       sync.Mutex
	load         *exec.Cmd // the background load's current process
	loadStopping bool
	loadDone     chan struct{} // closed when the load has stopped
}

type nemesisHolder struct {
	proc  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func runNemesis(t *testing.T, cfg nemesisConfig) {
	seed := rand.Uint64()
	if s := os.Getenv("LEASED_NEMESIS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LEASED_NEMESIS_SEED: %v", err)
		}
	}
	dir, err := os.MkdirTemp("", "leased-nemesis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || longTests() || os.Getenv("LEASED_NEMESIS_KEEP") == "1" {
			t.Logf("histories kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	t.Logf("seed %d (LEASED_NEMESIS_SEED=%d repeats its choices)", seed, seed)
	n := &nemesis{t: t, cfg: cfg, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), dir: dir,
		onLeader: map[faultcheck.FaultKind]int{}}
	n.startNodes()
	f, err := os.Create(filepath.Join(dir, "faults.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n.faults = faultcheck.NewWriter(f)
	for range cfg.holders {
		n.startHolder()
	}
	n.startLoad()

	from := monotonic()
	for round := range cfg.rounds {
		order := slices.Clone(n.kinds)
		n.rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, kind := range order {
			n.sleep(cfg.quiet[0], cfg.quiet[1])
			n.inject(kind)
		}
		t.Logf("round %d of %d done", round+1, cfg.rounds)
	}
	n.sleep(2*cfg.d, 2*cfg.d)
	to := monotonic()
	n.stopHolders()
	batches := n.stopLoad()

	rep := n.check(from, to)
	t.Logf("%d nodes, %d leases, %d holder processes of %d holders, D %v:\n%s", cfg.nodes, cfg.leases, cfg.holders,
		max(cfg.loops, 1), cfg.d, rep.Summary())
	if !n.c.single {
		t.Logf("faults on the stream leader: %v", n.onLeader)
	}
	if cfg.load > 0 {
		t.Logf("the node's writes since its last start: %s", batches)
		if batches.batches == 0 {
			t.Errorf("no atomic batch since the node's last start: group commit was not under test")
		}
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Figures.FalseLosses != 0 {
		t.Errorf("%d renewals refused inside their live window (false losses)", rep.Figures.FalseLosses)
	}
	// The holders' grants are idempotent (kvlease.Acquire retries with
	// one request id): a tenure whose reply was lost is recovered by the
	// retry, unless the caller gave up first, or its retries reached the
	// grantor only when the tenure may have lapsed (a holder connected to
	// a stopped node, whose retries fail until it reconnects).
	if n := rep.Figures.RetriedOrphans - rep.Figures.LapsedOrphans; n != 0 { // the summary lists them
		t.Errorf("%d orphan tenures of callers that retried and stopped on an answer before the tenure could have lapsed (%d surely stored after it), want 0",
			n, rep.Figures.LateOrphans)
	}
	if rep.Figures.Tenures < cfg.minTenures {
		t.Errorf("only %d tenures, want at least %d: the run tested too little", rep.Figures.Tenures, cfg.minTenures)
	}
	for _, k := range n.kinds {
		if rep.Figures.FaultsByKind[k] != cfg.rounds {
			t.Errorf("%d faults of kind %s, want %d", rep.Figures.FaultsByKind[k], k, cfg.rounds)
		}
	}
}

// startNodes starts the nodes, in network namespaces of their own where
// the machine allows (a partition can then cut the stream leader off),
// and a proxy in front of each.
func (n *nemesis) startNodes() {
	t := n.t
	n.kinds = []faultcheck.FaultKind{faultcheck.FaultKillNode, faultcheck.FaultStopNode,
		faultcheck.FaultStopHolder, faultcheck.FaultKillHolder, faultcheck.FaultDropReply}
	bin := leasedBin
	if n.cfg.plain {
		bin = timingBin(t)
	}
	if n.cfg.nodes == 1 {
		// Batches from 2 writes (and the linger, 1 ms on R1), under the
		// background load (startLoad), so that group commit is under the
		// faults too; the metrics show that it batched.
		ports := kvleasetest.FreePorts(t, 2)
		port, mport := ports[0], ports[1]
		n.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)
		n.c = &testCluster{t: t, bin: bin, single: true, logDir: n.dir,
			serveArgs: []string{"--batch-min", "2", "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", mport)},
			nodes:     []cli.ClusterNode{{Name: "n1", Host: "127.0.0.1", Port: port, Data: t.TempDir()}}}
		n.c.start()
	} else {
		n.kinds = append(n.kinds, faultcheck.FaultKillAll)
		pn, err := buildPrivateNet(t, 3)
		if err == nil {
			n.kinds = append(n.kinds, faultcheck.FaultPartition)
		} else {
			t.Logf("the run has no partition: %v", err)
		}
		n.c = &testCluster{t: t, net: pn, bin: bin, logDir: n.dir, nodes: clusterNodes(t, pn)}
		n.c.start()
	}
	for _, node := range n.c.nodes {
		n.proxies = append(n.proxies, kvleasetest.NewProxy(t, net.JoinHostPort(node.Host, strconv.Itoa(node.Port))))
	}
}

// startLoad starts the background load (cfg.load clients), and starts it
// again whenever it exits on its own (a node killed under it may end it).
func (n *nemesis) startLoad() {
	if n.cfg.load == 0 {
		return
	}
	n.loadDone = make(chan struct{})
	go func() {
		defer close(n.loadDone)
		for {
			cmd := exec.Command(n.c.bin, "bench", "--op", "grant-release", "--clients", strconv.Itoa(n.cfg.load),
				"--duration", "2h", "--prefix", "load", "--ttl", "5s", "--url", n.c.url(0))
			n.loadMu.Lock()
			if n.loadStopping {
				n.loadMu.Unlock()
				return
			}
			err := cmd.Start()
			n.load = cmd
			n.loadMu.Unlock()
			if err != nil {
				n.t.Errorf("load: %v", err)
				return
			}
			_ = cmd.Wait()
		}
	}()
}

// loadCount is what the node's write metric says.
type loadCount struct{ singles, batches, batched int64 }

func (c loadCount) String() string {
	return fmt.Sprintf("%d single publishes, %d atomic batches of %d messages", c.singles, c.batches, c.batched)
}

// storeWrites reads a serve's write metric (leased.store.write.messages)
// from its /metrics URL.
func storeWrites(url string) (loadCount, error) {
	var c loadCount
	resp, err := http.Get(url)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return c, err
	}
	re := regexp.MustCompile(`(?m)^leased_store_write_messages_(count|sum)\{[^}]*write_kind="(single|batch)"[^}]*\} (\d+)`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseInt(m[3], 10, 64)
		switch m[1] + " " + m[2] {
		case "count single":
			c.singles = v
		case "count batch":
			c.batches = v
		case "sum batch":
			c.batched = v
		}
	}
	return c, nil
}

// stopLoad reads the node's write metric, then stops the load.
func (n *nemesis) stopLoad() loadCount {
	if n.cfg.load == 0 {
		return loadCount{}
	}
	c, err := storeWrites(n.metrics)
	if err != nil {
		n.t.Errorf("node metrics: %v", err)
	}
	n.loadMu.Lock()
	n.loadStopping = true
	if n.load != nil && n.load.Process != nil {
		_ = n.load.Process.Kill()
	}
	n.loadMu.Unlock()
	<-n.loadDone
	return c
}

// startHolder starts a new holder process, with a name of its own.
func (n *nemesis) startHolder() {
	t := n.t
	n.started++
	proc := fmt.Sprintf("h%d", n.started)
	urls := make([]string, len(n.proxies))
	for i, p := range n.proxies {
		urls[i] = p.URL()
	}
	spec, _ := json.Marshal(holderSpec{Proc: proc, URLs: urls, Leases: n.leases(), D: n.cfg.d,
		Log: filepath.Join(n.dir, proc+".jsonl"), Seed: n.rnd.Uint64(), Loops: n.cfg.loops})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envNemesisHolder+"="+string(spec))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	n.holders = append(n.holders, &nemesisHolder{proc: proc, cmd: cmd, stdin: stdin})
}

func (n *nemesis) leases() []string {
	names := make([]string, n.cfg.leases)
	for i := range names {
		names[i] = "nemesis." + strconv.Itoa(i+1)
	}
	return names
}

// stopHolders closes every holder's stdin (it releases what it holds and
// exits) and waits, killing any that takes longer than 10 s.
func (n *nemesis) stopHolders() {
	for _, h := range n.holders {
		h.stdin.Close()
	}
	for _, h := range n.holders {
		if err := waitExit(h.cmd, 10*time.Second); err != nil {
			n.t.Errorf("holder %s: %v", h.proc, err)
		}
	}
	n.holders = nil
}

func (n *nemesis) sleep(from, to time.Duration) {
	time.Sleep(from + time.Duration(n.rnd.Int64N(int64(to-from)+1))) // the nemesis's own pacing: nothing to wait on
}

// node picks a node for a fault of kind: the stream leader half the time,
// else any (the leader again, perhaps), counting faults on the leader.
func (n *nemesis) node(kind faultcheck.FaultKind) int {
	lead, i := n.leader(), n.rnd.IntN(len(n.c.nodes))
	if n.rnd.IntN(2) == 0 {
		i = lead
	}
	if i == lead {
		n.onLeader[kind]++
	}
	return i
}

func (n *nemesis) leader() int {
	if n.c.single {
		return 0
	}
	return n.c.leader(n.rnd.IntN(len(n.c.nodes)))
}

func (n *nemesis) signal(cmd *exec.Cmd, sig syscall.Signal) {
	if err := cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("%v to %d: %v", sig, cmd.Process.Pid, err)
	}
}

// inject carries out one fault, from its start to its end, and logs it.
func (n *nemesis) inject(kind faultcheck.FaultKind) {
	t, d := n.t, n.cfg.d
	rec := faultcheck.Record{Type: faultcheck.TypeFault, Fault: kind}
	switch kind {
	case faultcheck.FaultKillNode:
		i := n.node(kind)
		rec.Target, rec.TStart = n.c.nodes[i].Name, monotonic()
		n.c.kill(i)
		n.sleep(500*time.Millisecond, 2*time.Second)
		n.c.restart(i)
	case faultcheck.FaultStopNode:
		// Past the election (a few seconds), and half the time past the
		// raft lost-quorum interval (10 s), after which a resumed leader
		// steps down at once.
		i := n.node(kind)
		rec.Target, rec.TStart = n.c.nodes[i].Name, monotonic()
		n.signal(n.c.procs[i].cmd, syscall.SIGSTOP)
		n.sleep(5*time.Second, 12*time.Second)
		n.signal(n.c.procs[i].cmd, syscall.SIGCONT)
	case faultcheck.FaultKillAll:
		rec.Target, rec.TStart = "all", monotonic()
		for i := range n.c.nodes {
			n.c.kill(i)
		}
		n.sleep(500*time.Millisecond, 2*time.Second)
		for i := range n.c.nodes {
			n.c.procs[i] = n.c.spawn(i)
		}
		for i := range n.c.nodes {
			n.c.waitReady(i)
		}
	case faultcheck.FaultPartition:
		i := n.leader()
		n.onLeader[kind]++
		rec.Target, rec.TStart = n.c.nodes[i].Name, monotonic()
		n.c.net.cut(i)
		n.sleep(5*time.Second, 10*time.Second)
		n.c.net.heal(i)
	case faultcheck.FaultDropReply:
		i := n.rnd.IntN(len(n.proxies))
		rec.Target, rec.TStart = n.c.nodes[i].Name, monotonic()
		n.proxies[i].DropReplies()
		n.sleep(time.Second, 3*time.Second)
		n.proxies[i].Heal()
	case faultcheck.FaultStopHolder:
		h := n.holders[n.rnd.IntN(len(n.holders))]
		rec.Target, rec.TStart = h.proc, monotonic()
		n.signal(h.cmd, syscall.SIGSTOP)
		n.sleep(2*d, 3*d)
		n.signal(h.cmd, syscall.SIGCONT)
	case faultcheck.FaultKillHolder:
		at := n.rnd.IntN(len(n.holders))
		h := n.holders[at]
		rec.Target, rec.TStart = h.proc, monotonic()
		n.signal(h.cmd, syscall.SIGKILL)
		_ = h.cmd.Wait()
		n.holders = slices.Delete(n.holders, at, at+1)
		n.startHolder()
	default:
		t.Fatalf("no such fault %q", kind)
	}
	rec.TEnd = monotonic()
	if err := n.faults.Write(rec); err != nil {
		t.Fatal(err)
	}
	n.stream = append(n.stream, rec)
}

// check reads every history and runs faultcheck over [from, to].
func (n *nemesis) check(from, to int64) *faultcheck.Report {
	t := n.t
	streams := [][]faultcheck.Record{n.stream}
	for i := 1; i <= n.started; i++ {
		b, err := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("h%d.jsonl", i)))
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := faultcheck.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("h%d's history: %v", i, err)
		}
		streams = append(streams, recs)
	}
	h, err := faultcheck.NewHistory(streams...)
	if err != nil {
		t.Fatal(err)
	}
	p := faultcheck.DefaultParams()
	p.HolderMargin = kvlease.DefaultHolderMargin // the holders' own
	p.From, p.To = from, to
	// In a cluster a read (the holder a held error names) may come from a
	// node that is behind: counted as a stale read, not a lost write. On
	// one node there is no such excuse.
	p.IgnoreReads = !n.c.single
	rep, err := faultcheck.Check(h, p)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
