package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// devClusterProc is a running `leased dev-cluster`.
type devClusterProc struct {
	cmd    *exec.Cmd
	url    string // LEASED_URL, every node
	port   int    // client port of n1; node i+1 listens on port+i
	hport  int    // timeline page port of n1; node i+1 serves it on hport+i
	stderr *lines
	exited chan struct{} // closed when dev-cluster exits
}

// startDevCluster runs `leased dev-cluster` with args on free ports and
// data in a temporary directory, and waits until every node is ready. A
// "--gossip-port" among args is given its free port.
func startDevCluster(t *testing.T, args ...string) *devClusterProc {
	t.Helper()
	// One range for the four kinds of port: ranges picked apart could
	// overlap (a CI run gave n3's timeline page n1's client port).
	port := kvleasetest.ConsecutiveFreePorts(t, 12)
	cport, hport, gport := port+3, port+6, port+9
	if i := slices.Index(args, "--gossip-port"); i >= 0 {
		args = slices.Insert(slices.Clone(args), i+1, strconv.Itoa(gport))
	}
	cmd := exec.Command(leasedBin, append([]string{"dev-cluster", "--data", t.TempDir(),
		"--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(cport), "--http-port", strconv.Itoa(hport)}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devClusterProc{cmd: cmd, port: port, hport: hport, stderr: readLines(stderr), exited: make(chan struct{})}
	out := readLines(stdout)
	go func() { _ = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // dev-cluster stops its nodes
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("dev-cluster did not exit 30 s after SIGTERM")
		}
	})
	line := out.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "LEASED_URL=") })
	d.url = strings.TrimPrefix(line, "LEASED_URL=")
	for i := range 3 {
		d.stderr.wait(t, 90*time.Second, func(l string) bool { return l == fmt.Sprintf("dev-cluster: n%d ready", i+1) })
	}
	return d
}

// pid returns the pid of node name's nth start (1: the first).
func (d *devClusterProc) pid(t *testing.T, name string, nth int) int {
	t.Helper()
	re := regexp.MustCompile(`^dev-cluster: ` + name + ` started \(pid (\d+)\)`)
	seen := 0
	line := d.stderr.wait(t, 60*time.Second, func(l string) bool {
		if re.MatchString(l) {
			seen++
		}
		return seen == nth
	})
	pid, _ := strconv.Atoi(re.FindStringSubmatch(line)[1])
	return pid
}

// nodeURL is the client URL of node name ("n1" …) alone.
func (d *devClusterProc) nodeURL(name string) string {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "n"))
	return "nats://127.0.0.1:" + strconv.Itoa(d.port+i-1)
}

// pageURL is the timeline page of node name.
func (d *devClusterProc) pageURL(name string) string {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "n"))
	return "http://127.0.0.1:" + strconv.Itoa(d.hport+i-1) + "/"
}

// leasedStatus runs `leased status -o json` through url.
func leasedStatus(t *testing.T, url string) (cli.Status, result) {
	t.Helper()
	r := leased(t, url, "status", "-o", "json", "--timeout", "3s")
	var st cli.Status
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status -o json: %v: %s", err, r.stdout)
		}
	}
	return st, r
}

// waitLeasedStatus polls `leased status` until ok holds, failing after timeout.
// It polls: the stream leader's view of a follower has no event to wait on.
func waitLeasedStatus(t *testing.T, url string, timeout time.Duration, what string, ok func(cli.Status) bool) cli.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, r := leasedStatus(t, url)
		if r.code == 0 && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed %s within %v; last: %+v, exit %d: %s", what, timeout, st, r.code, r.stderr)
		}
		time.Sleep(250 * time.Millisecond) // polling interval, see above
	}
}

func peerNamed(st cli.Status, name string) (cli.PeerStatus, bool) {
	i := slices.IndexFunc(st.Peers, func(p cli.PeerStatus) bool { return p.Name == name })
	if i < 0 {
		return cli.PeerStatus{}, false
	}
	return st.Peers[i], true
}

// acquireWithin acquires a lease name.N through url, retrying while the
// cluster cannot answer (a failover has no event the CLI can wait on), each
// time with a new N (an unanswered grant may have been stored), failing
// after timeout.
func acquireWithin(t *testing.T, url, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for try := 1; ; try++ {
		r := leased(t, url, "acquire", name+"."+strconv.Itoa(try), "--ttl", "30s", "--timeout", "3s")
		if r.code == 0 {
			return
		}
		if r.code == cli.ExitUsage || time.Now().After(deadline) { // any other failure may be the failover
			t.Fatalf("acquire %s via %s: exit %d: %s", name, url, r.code, r.stderr)
		}
		time.Sleep(250 * time.Millisecond) // between attempts: no event says the cluster answers again
	}
}

// One dev-cluster node SIGKILLed leaves the others running and serving, says
// so on stderr, and `leased status` shows it unreachable. The stream leader
// is the one killed: the new leader has never heard from it, which is what
// status used to print as "behind by N (seen 0s ago)".
func TestDevClusterNodeKilled(t *testing.T) {
	d := startDevCluster(t)
	st, r := leasedStatus(t, d.url)
	if r.code != 0 || st.Leader == "" {
		t.Fatalf("status: %+v, exit %d: %s\nnode logs:\n%s", st, r.code, r.stderr, d.stderr.text())
	}
	dead := st.Leader
	if err := syscall.Kill(d.pid(t, dead, 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var alive []string
	for i := range 3 {
		if n := "n" + strconv.Itoa(i+1); n != dead {
			alive = append(alive, n)
		}
	}
	d.stderr.wait(t, 10*time.Second, func(l string) bool {
		return l == "dev-cluster: "+dead+" exited (signal: killed); "+strings.Join(alive, ", ")+" keep running"
	})
	acquireWithin(t, d.url, "after.kill", 60*time.Second)
	waitLeasedStatus(t, d.url, 30*time.Second, dead+" unreachable", func(st cli.Status) bool {
		p, ok := peerNamed(st, dead)
		return st.Leader != dead && ok && p.Unreachable
	})
	text := leased(t, d.url, "status")
	if !regexp.MustCompile(`(?m)^follower  ` + dead + ` unreachable \(`).MatchString(text.stdout) {
		t.Errorf("status text does not show %s unreachable:\n%s", dead, text.stdout)
	}
	for _, n := range alive {
		if r := leased(t, d.nodeURL(n), "acquire", "via."+n, "--ttl", "30s"); r.code != 0 {
			t.Errorf("acquire via %s after %s died: exit %d: %s", n, dead, r.code, r.stderr)
		}
		// Each node serves the timeline page and its data: the history's
		// stream may still be electing a leader (503 meanwhile).
		for _, u := range []string{d.pageURL(n), d.pageURL(n) + "api/tenures?since=1h"} {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
				resp, err := http.Get(u)
				if err != nil {
					t.Errorf("%s after %s died: %v", u, dead, err)
					break
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
					continue // no event says the history's stream has a leader again
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s after %s died: %s: %s\nnode logs:\n%s", u, dead, resp.Status, body, d.stderr.text())
				}
				break
			}
		}
	}
	select {
	case <-d.exited:
		t.Fatalf("dev-cluster exited after one node died:\n%s", d.stderr.text())
	default:
	}
}

// With --restart, a SIGKILLed node is started again on its data, rejoins,
// and serves leases granted while it was down.
func TestDevClusterRestartsNode(t *testing.T) {
	d := startDevCluster(t, "--restart")
	st, r := leasedStatus(t, d.url)
	if r.code != 0 || len(st.Peers) != 2 {
		t.Fatalf("status: %+v, exit %d: %s\nnode logs:\n%s", st, r.code, r.stderr, d.stderr.text())
	}
	dead := st.Peers[0].Name // a follower
	if r := leased(t, d.url, "acquire", "before.kill", "--ttl", "60s"); r.code != 0 {
		t.Fatalf("acquire: exit %d: %s", r.code, r.stderr)
	}
	first := d.pid(t, dead, 1)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.stderr.wait(t, 10*time.Second, func(l string) bool {
		return strings.HasPrefix(l, "dev-cluster: "+dead+" exited (signal: killed); ")
	})
	d.stderr.wait(t, 10*time.Second, func(l string) bool { return l == "dev-cluster: restarting "+dead+" on its data in 1s" })
	if again := d.pid(t, dead, 2); again == first {
		t.Fatalf("%s restarted with the same pid %d", dead, again)
	}
	readies := 0
	d.stderr.wait(t, 90*time.Second, func(l string) bool {
		if l == "dev-cluster: "+dead+" ready" {
			readies++
		}
		return readies == 2
	})
	waitLeasedStatus(t, d.url, 60*time.Second, dead+" current again", func(st cli.Status) bool {
		p, ok := peerNamed(st, dead)
		return st.Leader == dead || (ok && p.Current && !p.Unreachable)
	})
	// Through the restarted node alone: it has the lease granted before.
	if r := leased(t, d.nodeURL(dead), "get", "before.kill"); r.code != 0 {
		t.Fatalf("get via restarted %s: exit %d: %s", dead, r.code, r.stderr)
	}
}

// dev-cluster SIGKILLed, with no chance to stop its nodes, takes them with
// it: they kept running, holding their ports, and the next dev-cluster
// could not start.
func TestDevClusterKilledTakesItsNodes(t *testing.T) {
	d := startDevCluster(t)
	var pids []int
	var gone []<-chan struct{}
	for i := range 3 {
		line := d.stderr.wait(t, 10*time.Second, func(l string) bool {
			return strings.HasPrefix(l, fmt.Sprintf("dev-cluster: n%d started (pid ", i+1))
		})
		pid, err := strconv.Atoi(strings.Split(strings.SplitN(line, "(pid ", 2)[1], ")")[0])
		if err != nil {
			t.Fatalf("no pid in %q", line)
		}
		_, data, ok := strings.Cut(line, ", data ")
		if !ok {
			t.Fatalf("no data directory in %q", line)
		}
		pids, gone = append(pids, pid), append(gone, lockReleased(t, data))
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for i, g := range gone {
		select {
		case <-g:
		case <-timeout:
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("node n%d (pid %d) still running 30 s after dev-cluster was killed", i+1, pids[i])
		}
	}
}

// A second dev-cluster on the data of a running one, whose n2 was killed,
// fails at once and stops its nodes (its n1 and n3 exited, locked out,
// and its n2 waited for a quorum for ever), leaving the running one alone.
func TestDevClusterOnDataInUseFails(t *testing.T) {
	d := startDevCluster(t)
	line := d.stderr.wait(t, time.Second, func(l string) bool { return strings.HasPrefix(l, "dev-cluster: n1 started (pid ") })
	_, n1data, _ := strings.Cut(line, ", data ")
	if err := syscall.Kill(d.pid(t, "n2", 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.stderr.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "dev-cluster: n2 exited") })
	port := kvleasetest.ConsecutiveFreePorts(t, 9)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	second := exec.CommandContext(ctx, leasedBin, "dev-cluster", "--data", filepath.Dir(n1data),
		"--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(port+3), "--http-port", strconv.Itoa(port+6))
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "before it was ever ready: stopping the cluster") ||
		!strings.Contains(string(out), "is locked by") {
		t.Fatalf("second dev-cluster on the same data: %v\n%s", err, out)
	}
	acquireWithin(t, d.url, "still-serving", 10*time.Second)
}

// lockReleased is closed when no process holds the lock of data directory
// dir any more: its serve has exited (the kernel drops a flock when its
// holder exits, however it ends).
func lockReleased(t *testing.T, dir string) <-chan struct{} {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, embedded.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	done := make(chan struct{})
	go func() {
		for syscall.Flock(int(f.Fd()), syscall.LOCK_SH) == syscall.EINTR {
		}
		close(done)
	}()
	return done
}

// --first-token reaches every node's serve: the cluster's new bucket
// begins there, whichever node makes it. dev-cluster had no such flag, and
// README's way from a standalone node to a cluster (new data directories,
// --first-token above the old tokens) could not be taken with it. A value
// serve would refuse is refused before any node starts.
func TestDevClusterFirstToken(t *testing.T) {
	out, err := exec.Command(leasedBin, "dev-cluster", "--data", t.TempDir(), "--first-token", "2305843009213693953").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUsage || !strings.Contains(string(out), "--first-token") {
		t.Fatalf("dev-cluster --first-token 2^61+1: %v, want exit %d naming the flag\n%s", err, cli.ExitUsage, out)
	}
	d := startDevCluster(t, "--first-token", "70000")
	r := leased(t, d.url, "acquire", "first.a", "--ttl", "20s", "-o", "json")
	var got struct{ Token uint64 }
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.Token < 70000 {
		t.Fatalf("acquire on dev-cluster --first-token 70000: %+v, %v; want a token of at least 70000", r, err)
	}
}

// dev-cluster --gossip-port gossips between its nodes, each a seed of the
// others: an instance registered through it that dies is removed on
// gossip's word, long before its TTL. Registration with gossip needed
// nodes started by hand (found by an outside client).
func TestDevClusterGossip(t *testing.T) {
	d := startDevCluster(t, "--gossip-port")
	line := d.stderr.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "--gossip-seeds ") })
	seeds := line[strings.LastIndex(line, " ")+1:]
	if strings.Count(seeds, ",") != 2 {
		t.Fatalf("gossip seeds %q (from %q), want the three nodes'", seeds, line)
	}
	st := kvleasetest.OpenStore(t, d.nodeURL("n1"), kvlease.WithoutCreate())
	w, err := st.Watch(t.Context(), api.RegistrationPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	reg := startRegister(t, d.url, seeds, "g1", "60s")
	if in, ok := instance(discover(t, d.url), "g1"); !ok || !in.Gossip {
		t.Fatalf("discovery: %+v (found %v), want g1 a gossip member", in, ok)
	}
	if err := reg.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ev := nextEventOf(t, w, 40*time.Second, "svc.web.g1"); ev.Type != kvlease.EventRevoked || !strings.HasPrefix(ev.Reason, "gossip") {
		t.Fatalf("registration ended by %v (%q), want a gossip revocation", ev.Type, ev.Reason)
	}
}
