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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// ClusterNode is one member of a leased cluster.
type ClusterNode struct {
	Name        string
	Host        string // where clients and routes reach it
	Port        int    // client port
	ClusterPort int    // route port
	Data        string // data directory
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
	if ip := net.ParseIP(n.Host); ip == nil || !ip.IsLoopback() {
		// Containers (and the partition test's private network) listen
		// beyond loopback without authorization: the compose set-up is for
		// one trusted host (README, "Security").
		args = append(args, "--allow-insecure")
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
	var n, port, clusterPort int
	var host, data string
	cmd := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run a local JetStream cluster of leased nodes as processes (R3 lease bucket)",
		Long: `dev-cluster starts --nodes "leased serve" processes on 127.0.0.1 that form one
JetStream cluster (the topology of docker-compose.yml, without Docker), prints
the client URLs, and runs until interrupted, then stops them all. Node i
listens for clients on --port+i-1 and for routes on --cluster-port+i-1, and
keeps its data in --data/n<i>, so a restart finds it again.

The nodes have no TLS and no authorization: dev-cluster is for one trusted
host, and --host must be a loopback address. See README "Security" for a
secured cluster.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 3 {
				return usageError{fmt.Errorf("--nodes %d: a replicated bucket needs at least 3", n)}
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return usageError{fmt.Errorf("--host %q: dev-cluster runs without authorization, for one trusted host: "+
					"give a loopback address (for a secured cluster run serve --config, README \"Security\")", host)}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return devCluster(cmd.Context(), exe, LocalCluster(n, host, port, clusterPort, data), stdout, stderr)
		},
	}
	cmd.Flags().IntVar(&n, "nodes", 3, "number of nodes")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "loopback address the nodes listen on")
	cmd.Flags().IntVar(&port, "port", 4222, "client port of the first node")
	cmd.Flags().IntVar(&clusterPort, "cluster-port", 6222, "route port of the first node")
	cmd.Flags().StringVar(&data, "data", filepath.Join(defaultDataDir(), "dev-cluster"), "data directory (one subdirectory per node)")
	return cmd
}

func devCluster(ctx context.Context, exe string, nodes []ClusterNode, stdout, stderr io.Writer) error {
	var wg sync.WaitGroup
	var mu sync.Mutex // serializes log lines
	procs := make([]*exec.Cmd, 0, len(nodes))
	stopAll := func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
	}
	exited := make(chan string, len(nodes))
	for i, n := range nodes {
		p := exec.Command(exe, ClusterServeArgs(nodes, i)...)
		out, err := p.StderrPipe()
		if err != nil {
			stopAll()
			return err
		}
		if err := p.Start(); err != nil {
			stopAll()
			return err
		}
		procs = append(procs, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				fmt.Fprintf(stderr, "%s | %s\n", n.Name, sc.Text())
				mu.Unlock()
			}
			_ = p.Wait()
			exited <- n.Name
		}()
	}
	fmt.Fprintf(stdout, "LEASED_URL=%s\n", ClientURLs(nodes))
	select {
	case <-ctx.Done():
		stopAll()
		return nil
	case name := <-exited:
		stopAll()
		return errors.New("node " + name + " exited; stopped the others")
	case <-time.After(365 * 24 * time.Hour):
		return nil
	}
}
