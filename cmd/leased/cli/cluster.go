package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/kvlease"
)

// ClusterNode is one member of a leased cluster.
type ClusterNode struct {
	Name        string
	Host        string // where clients and routes reach it
	Port        int    // client port
	ClusterPort int    // route port
	HTTPPort    int    // timeline page port (serve --http-listen); 0: none
	GossipPort  int    // gossip port (serve --gossip-listen, every member a seed); 0: no gossip
	Data        string // data directory
	FirstToken  uint64 // serve --first-token; 0: none
}

// ClusterName is the JetStream cluster name of `leased dev-cluster` and of
// docker-compose.yml.
const ClusterName = "leased"

// ClusterServeArgs returns the `leased serve` arguments of member i of
// nodes: one place that defines the topology, used by `leased dev-cluster`,
// by the cluster tests, and checked against docker-compose.yml.
func ClusterServeArgs(nodes []ClusterNode, i int) []string {
	n := nodes[i]
	routes := make([]string, 0, len(nodes))
	for _, m := range nodes {
		routes = append(routes, "nats-route://"+net.JoinHostPort(m.Host, strconv.Itoa(m.ClusterPort)))
	}
	args := []string{"serve",
		"--name", n.Name,
		"--cluster-name", ClusterName,
		"--listen", listenAddr(n.Host, n.Port),
		"--cluster-listen", listenAddr(n.Host, n.ClusterPort),
		"--routes", strings.Join(routes, ","),
		"--data", n.Data,
		"--log-format", "json",
	}
	if n.HTTPPort > 0 {
		args = append(args, "--http-listen", listenAddr(n.Host, n.HTTPPort))
	}
	if n.FirstToken > 0 {
		args = append(args, "--first-token", strconv.FormatUint(n.FirstToken, 10))
	}
	if seeds := GossipSeeds(nodes); n.GossipPort > 0 {
		args = append(args, "--gossip-listen", net.JoinHostPort(n.Host, strconv.Itoa(n.GossipPort)), "--gossip-seeds", seeds)
	}
	if ip := net.ParseIP(n.Host); ip == nil || !ip.IsLoopback() {
		// Containers (and the partition test's private network) listen
		// beyond loopback without authorization: the compose set-up is for
		// one trusted host (README, "Security").
		args = append(args, "--allow-insecure")
		if n.HTTPPort > 0 {
			args = append(args, "--allow-public-http")
		}
	}
	return args
}

// listenAddr binds containers to all interfaces, local processes to their
// --host (dev-cluster requires a loopback address).
func listenAddr(host string, port int) string {
	if net.ParseIP(host) == nil { // a container's host name
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// ClientURLs returns the comma-separated client URLs of nodes, for --url
// and LEASED_URL: clients fail over between them.
func ClientURLs(nodes []ClusterNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = "nats://" + net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
	}
	return strings.Join(urls, ",")
}

// GossipSeeds returns the comma-separated gossip addresses of nodes, for
// serve's and register's --gossip-seeds ("" without gossip).
func GossipSeeds(nodes []ClusterNode) string {
	var seeds []string
	for _, n := range nodes {
		if n.GossipPort > 0 {
			seeds = append(seeds, net.JoinHostPort(n.Host, strconv.Itoa(n.GossipPort)))
		}
	}
	return strings.Join(seeds, ",")
}

// LocalCluster describes n members on host with consecutive ports.
func LocalCluster(n int, host string, port, clusterPort int, dataDir string) []ClusterNode {
	nodes := make([]ClusterNode, n)
	for i := range nodes {
		name := "n" + strconv.Itoa(i+1)
		nodes[i] = ClusterNode{Name: name, Host: host, Port: port + i, ClusterPort: clusterPort + i,
			Data: filepath.Join(dataDir, name)}
	}
	return nodes
}

func newDevCluster(stdout, stderr io.Writer) *cobra.Command {
	var n, port, clusterPort, httpPort, gossipPort int
	var firstToken uint64
	var host, data string
	var restart bool
	cmd := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run a local JetStream cluster of leased nodes as processes (R3 lease bucket)",
		Long: `dev-cluster starts --nodes "leased serve" processes on 127.0.0.1 that form one
JetStream cluster (the topology of docker-compose.yml, without Docker), prints
the client URLs, and runs until interrupted, then stops them all. Node i
listens for clients on --port+i-1, for routes on --cluster-port+i-1 and
serves the timeline page (who held which lease when) on
http://127.0.0.1:<--http-port+i-1>/, and keeps its data in --data/n<i>, so a
restart finds it again.

With --gossip-port, node i also gossips on --gossip-port+i-1 (serve
--gossip-listen, every node a --gossip-seeds of the others), and dev-cluster
says the seeds for "leased register --gossip-seeds": a registered instance
that dies is then removed on gossip's word, not at its TTL.

It says on stderr when each node starts (with its pid), is ready and exits,
and when all are ready.
A node that fails (exits non-zero on its own) before it was ever ready, as
on a port or data directory in use, stops them all, and dev-cluster exits
1: that set-up cannot work.
A node that dies later leaves the others running, so a failover can be
tried by killing one; with --restart it is started again on its data after 1 s,
doubling up to 30 s while it keeps dying within a minute, and given up
after 5 such deaths in a row.

--first-token is every node's serve --first-token: a cluster started on
new data directories after a standalone node's (README, "Beyond one
machine") begins its tokens above those the standalone bucket issued, so
that fences that saw them accept the new ones.

The nodes have no TLS and no authorization: dev-cluster is for one trusted
host, and --host must be a loopback address. See README "Security" for a
secured cluster.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 3 {
				return usageError{fmt.Errorf("--nodes %d: a replicated bucket needs at least 3", n)}
			}
			if host == "localhost" { // a loopback address by name (refused as none; found by an outside client)
				host = "127.0.0.1"
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return usageError{fmt.Errorf("--host %q: dev-cluster runs without authorization, for one trusted host: "+
					"give a loopback address (for a secured cluster run serve --config, README \"Security\")", host)}
			}
			if httpPort < 0 || httpPort+n-1 > 65535 {
				return usageError{fmt.Errorf("--http-port %d: want 1..%d for %d nodes, or 0 for no page", httpPort, 65536-n, n)}
			}
			if gossipPort < 0 || gossipPort+n-1 > 65535 {
				return usageError{fmt.Errorf("--gossip-port %d: want 1..%d for %d nodes, or 0 for no gossip", gossipPort, 65536-n, n)}
			}
			for flag, p := range map[string]int{"--port": port, "--cluster-port": clusterPort} {
				if p < 1 || p+n-1 > 65535 {
					return usageError{fmt.Errorf("%s %d: want 1..%d for %d nodes", flag, p, 65536-n, n)}
				}
			}
			if err := kvlease.CheckOptions(kvlease.WithFirstToken(kvlease.Token(firstToken))); err != nil {
				return usageError{fmt.Errorf("--first-token: %w", err)}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			nodes := LocalCluster(n, host, port, clusterPort, data)
			for i := range nodes {
				if httpPort > 0 {
					nodes[i].HTTPPort = httpPort + i
				}
				if gossipPort > 0 {
					nodes[i].GossipPort = gossipPort + i
				}
				nodes[i].FirstToken = firstToken
			}
			return devCluster(cmd.Context(), exe, nodes, restart, stdout, stderr)
		},
	}
	cmd.Flags().IntVar(&n, "nodes", 3, "number of nodes")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "loopback address the nodes listen on")
	cmd.Flags().IntVar(&port, "port", 4222, "client port of the first node")
	cmd.Flags().IntVar(&clusterPort, "cluster-port", 6222, "route port of the first node")
	cmd.Flags().IntVar(&httpPort, "http-port", 8080, "timeline page port of the first node (serve --http-listen; 0: no page)")
	cmd.Flags().IntVar(&gossipPort, "gossip-port", 0, "gossip port of the first node (serve --gossip-listen, each node a seed of the others), "+
		"for service registration whose dead instances gossip removes; 0: no gossip")
	cmd.Flags().StringVar(&data, "data", filepath.Join(defaultDataDir(), "dev-cluster"), "data directory (one subdirectory per node)")
	cmd.Flags().BoolVar(&restart, "restart", false, "restart a node that exits, on its data, with a backoff")
	cmd.Flags().Uint64Var(&firstToken, "first-token", 0, "every node's serve --first-token: the first fencing token of the lease bucket when it is created (default: 1)")
	return cmd
}

// Restarts of `dev-cluster --restart`.
const (
	restartFirstDelay = time.Second      // before the first restart of a node
	restartMaxDelay   = 30 * time.Second // the backoff's cap
	restartStable     = time.Minute      // a node that ran this long starts a new series of failures
	restartMaxFails   = 5                // consecutive short runs after which a node is given up
)

// restartDelay is the wait before restarting a node after its n-th short
// run in a row (n ≥ 1; after a stable run, as after the first short one):
// restartFirstDelay, doubling, at most restartMaxDelay.
func restartDelay(n int) time.Duration {
	d := restartFirstDelay
	for i := 1; i < n && d < restartMaxDelay; i++ {
		d *= 2
	}
	return min(d, restartMaxDelay)
}

// nextFails is the count of consecutive short runs (deaths within
// restartStable of starting) after a run of ran: a death after a stable
// run starts none (it counted as the first, and a node was given up after
// four short runs; found by an outside client).
func nextFails(fails int, ran time.Duration) int {
	if ran >= restartStable {
		return 0
	}
	return fails + 1
}

// errClusterGone is what dev-cluster returns when every node has exited
// and none is to be restarted.
var errClusterGone = errors.New("every node exited")

// errNeverReady is what dev-cluster returns when a node exited before it
// was ever ready: a set-up that cannot work (a port or data directory in
// use, say), for which the others are stopped too.
var errNeverReady = errors.New("a node exited before it was ready")

func devCluster(ctx context.Context, exe string, nodes []ClusterNode, restart bool, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex // serializes lines on stderr
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "dev-cluster: "+format+"\n", args...)
	}
	var live sync.WaitGroup
	var running sync.Map // node name → struct{} while its process runs
	var readied sync.Map // node name → struct{} once it has been ready
	var nready atomic.Int32
	others := func(name string) string {
		var names []string
		for _, m := range nodes {
			if _, ok := running.Load(m.Name); ok && m.Name != name {
				names = append(names, m.Name)
			}
		}
		if len(names) == 0 {
			return "no node is running"
		}
		if len(names) == 1 {
			return names[0] + " keeps running"
		}
		return strings.Join(names, ", ") + " keep running"
	}
	// run runs node i once, until it exits or ctx is cancelled, and says
	// how long it ran, how it ended, and whether it failed on its own (an
	// exit status other than 0, not a signal).
	run := func(i int) (time.Duration, string, bool) {
		n := nodes[i]
		p := exec.CommandContext(ctx, exe, ClusterServeArgs(nodes, i)...)
		p.Cancel = func() error { return p.Process.Signal(syscall.SIGTERM) }
		p.WaitDelay = 15 * time.Second
		// The node is sent SIGTERM if dev-cluster dies, even by SIGKILL
		// (which leaves it no chance to stop its nodes: they kept running,
		// holding their ports). Pdeathsig follows the thread that started
		// the node: keep that thread until the node has exited.
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		out, err := p.StderrPipe()
		if err == nil {
			err = p.Start()
		}
		if err != nil {
			return 0, "could not start: " + err.Error(), true
		}
		started := time.Now()
		running.Store(n.Name, struct{}{})
		page := ""
		if n.HTTPPort > 0 {
			page = ", timeline http://" + net.JoinHostPort(n.Host, strconv.Itoa(n.HTTPPort)) + "/"
		}
		say("%s started (pid %d), %s%s, data %s", n.Name, p.Process.Pid, ClientURLs(nodes[i:i+1]), page, n.Data)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			fmt.Fprintf(stderr, "%s | %s\n", n.Name, line)
			mu.Unlock()
			if strings.Contains(line, `"msg":"ready"`) {
				say("%s ready", n.Name)
				if _, again := readied.LoadOrStore(n.Name, struct{}{}); !again && int(nready.Add(1)) == len(nodes) {
					say("all %d nodes ready", len(nodes))
				}
			}
		}
		_ = p.Wait()
		running.Delete(n.Name)
		ps := p.ProcessState
		return time.Since(started), "exited (" + ps.String() + ")", ps.Exited() && ps.ExitCode() != 0
	}
	fmt.Fprintf(stdout, "LEASED_URL=%s\n", ClientURLs(nodes))
	if seeds := GossipSeeds(nodes); seeds != "" {
		say("gossip on %s: register instances with --gossip-seeds %s", seeds, seeds)
	}
	for i, n := range nodes {
		live.Add(1)
		go func() {
			defer live.Done()
			for fails := 0; ; {
				ran, how, failed := run(i)
				if ctx.Err() != nil {
					return
				}
				if _, ok := readied.Load(n.Name); !ok && failed {
					// Not one killed while starting (a signal), which a
					// failover demo may do, nor one stopped by Ctrl-C.
					say("%s %s before it was ever ready: stopping the cluster (the node's log above says why)", n.Name, how)
					cancel(fmt.Errorf("%w: %s %s", errNeverReady, n.Name, how))
					return
				}
				say("%s %s; %s", n.Name, how, others(n.Name))
				if !restart {
					return
				}
				if fails = nextFails(fails, ran); fails >= restartMaxFails {
					say("%s ended %d times in a row within %v of starting: not restarting it", n.Name, fails, restartStable)
					return
				}
				d := restartDelay(max(fails, 1))
				say("restarting %s on its data in %v", n.Name, d)
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}()
	}
	live.Wait()
	if err := context.Cause(ctx); errors.Is(err, errNeverReady) {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return errClusterGone
}
