package main_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
)

// privateNet is a network of our own: n namespaces, each joined by a veth
// pair to a bridge in a switch namespace, and the test's own namespace
// joined to the same bridge. Traffic stays in namespaces the test created.
// Cutting node i takes its link to the bridge down: it can no longer reach
// the other nodes or the test, while processes inside its namespace still
// reach it, as on the minority side of a partition.
//
// It needs root and iproute2; without them the test is skipped (and says
// why). Everything is removed on cleanup.
type privateNet struct {
	t      *testing.T
	prefix string // of namespace and interface names (interface names ≤ 15 bytes)
	subnet string // "10.199.N"
	n      int
	setup  bool  // building the network: a failure is the machine's, not the test's
	err    error // the first failure while building
}

// newPrivateNet builds the network, skipping the test on a machine that
// cannot (no root, no iproute2, no namespaces).
func newPrivateNet(t *testing.T, n int) *privateNet {
	t.Helper()
	p, err := buildPrivateNet(t, n)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// buildPrivateNet builds the network or says why this machine cannot.
func buildPrivateNet(t *testing.T, n int) (*privateNet, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("needs iproute2 (ip) to create network namespaces")
	}
	pid := os.Getpid()
	p := &privateNet{t: t, prefix: fmt.Sprintf("ld%d", pid%100000), n: n}
	sw := p.prefix + "sw"
	p.remove() // left by an earlier run with our pid that could not clean up
	addrs, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("cannot list this namespace's addresses: %v", err)
	}
	if p.subnet, err = freeSubnet(string(addrs), pid); err != nil {
		return nil, err
	}
	if out, err := exec.Command("ip", "netns", "add", sw).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(p.remove)
	p.setup = true // a machine that cannot build the network skips the test; one that can must pass it
	p.ip("netns", "exec", sw, "ip", "link", "add", "br0", "type", "bridge")
	p.ip("netns", "exec", sw, "ip", "link", "set", "br0", "up")
	for i := range n {
		p.ip("netns", "add", p.ns(i))
		p.plug(fmt.Sprint(i), p.ns(i), p.addr(i))
		p.ip("netns", "exec", p.ns(i), "ip", "link", "set", "lo", "up")
	}
	p.plug("h", "", p.subnet+".254") // the test's own namespace
	p.setup = false
	if p.err != nil {
		return nil, fmt.Errorf("cannot build the test network: %w", p.err)
	}
	return p, nil
}

// freeSubnet picks a 10.199.N/24 in which none of addrs (`ip -o -4 addr
// show`) is, trying N from 1+seed%250 on: the test's own end of the
// network is in this namespace, and a network left by a run that could not
// clean up (killed) keeps its address here, which a second network in the
// same /24 would collide with (connections to its nodes then fail).
func freeSubnet(addrs string, seed int) (string, error) {
	for k := range 250 {
		subnet := fmt.Sprintf("10.199.%d", 1+(seed+k)%250)
		if !strings.Contains(addrs, " inet "+subnet+".") {
			return subnet, nil
		}
	}
	return "", errors.New("every 10.199.N/24 has an address on this machine: delete the ld* namespaces and links left by killed runs")
}

// plug joins namespace ns ("" for the test's own) to the bridge with address
// addr, through veth <prefix>a<tag> (bridge side) and <prefix>b<tag>.
func (p *privateNet) plug(tag, ns, addr string) {
	a, b := p.prefix+"a"+tag, p.prefix+"b"+tag
	sw := p.prefix + "sw"
	p.ip("link", "add", a, "type", "veth", "peer", "name", b)
	p.ip("link", "set", a, "netns", sw)
	p.ip("netns", "exec", sw, "ip", "link", "set", a, "master", "br0")
	p.ip("netns", "exec", sw, "ip", "link", "set", a, "up")
	in := []string{}
	if ns != "" {
		p.ip("link", "set", b, "netns", ns)
		in = []string{"netns", "exec", ns, "ip"}
	}
	p.ip(append(in, "addr", "add", addr+"/24", "dev", b)...)
	p.ip(append(in, "link", "set", b, "up")...)
}

func (p *privateNet) ip(args ...string) {
	p.t.Helper()
	if p.setup && p.err != nil {
		return
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		err = fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		if p.setup {
			p.err = err
			return
		}
		p.t.Fatal(err)
	}
}

func (p *privateNet) ns(i int) string   { return fmt.Sprintf("%sn%d", p.prefix, i) }
func (p *privateNet) addr(i int) string { return fmt.Sprintf("%s.%d", p.subnet, i+1) }
func (p *privateNet) link(i int) []string {
	return []string{"netns", "exec", p.prefix + "sw", "ip", "link", "set", p.prefix + "a" + fmt.Sprint(i)}
}

// cut isolates node i; heal reconnects it.
func (p *privateNet) cut(i int)  { p.ip(append(p.link(i), "down")...) }
func (p *privateNet) heal(i int) { p.ip(append(p.link(i), "up")...) }

// remove deletes the namespaces (and with them every veth pair).
func (p *privateNet) remove() {
	for i := range p.n {
		_ = exec.Command("ip", "netns", "del", p.ns(i)).Run()
	}
	_ = exec.Command("ip", "netns", "del", p.prefix+"sw").Run()
	_ = exec.Command("ip", "link", "del", p.prefix+"bh").Run() // gone with its peer, unless that was left behind
}

func TestFreeSubnet(t *testing.T) {
	addrs := "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n" +
		"9: ld7930bh    inet 10.199.181.254/24 scope global ld7930bh\\       valid_lft forever\n" +
		"10: ld8100bh    inet 10.199.182.254/24 scope global ld8100bh\\       valid_lft forever\n"
	for _, c := range []struct {
		seed int
		want string
	}{
		{180, "10.199.183"}, // 181 and 182 are taken
		{179, "10.199.180"},
		{249, "10.199.250"},
		{250, "10.199.1"},
		{7930 + 250, "10.199.183"},
	} {
		if got, err := freeSubnet(addrs, c.seed); err != nil || got != c.want {
			t.Errorf("freeSubnet(seed %d) = %q, %v; want %q", c.seed, got, err, c.want)
		}
	}
	var all strings.Builder
	for n := 1; n <= 250; n++ {
		fmt.Fprintf(&all, "9: x    inet 10.199.%d.254/24 scope global x\n", n)
	}
	if got, err := freeSubnet(all.String(), 0); err == nil {
		t.Errorf("freeSubnet of a machine with every subnet taken = %q, want an error", got)
	}
}

// The stream leader is cut off from the other two nodes, with a holder on
// its side of the partition (`leased run` in its namespace, talking to it).
// The isolated leader cannot commit, so the holder's renewals go unanswered
// and it stops its command before its deadline; the majority elects a new
// leader, the lease lapses there by the server's TTL, and only then is a
// contender granted it, with a higher token. Healed, the old leader serves
// the contender's tenure.
func TestClusterPartitionedLeaderLosesItsHolder(t *testing.T) {
	net := newPrivateNet(t, 3)
	c := startClusterIn(t, net)
	ctx := t.Context()
	lead := c.leader(0)
	other := (lead + 1) % 3
	t.Logf("stream leader %s", c.nodes[lead].Name)

	const ttl, grace = 6 * time.Second, 500 * time.Millisecond
	holder := c.command(lead, "run", "--url", c.url(lead), "--lease", "partitioned", "--ttl", ttl.String(),
		"--grace", grace.String(), "--", "sh", "-c", "exec sleep 600")
	stderr, _ := holder.StderrPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	logs := readLines(stderr)
	logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
	majority := c.store(other)
	held, err := majority.Get(ctx, "partitioned")
	if err != nil {
		t.Fatal(err)
	}

	net.cut(lead)
	cutAt := time.Now()
	// A contender on the majority side asks until it is granted.
	var granted kvlease.Record
	var sentAt time.Time
	for deadline := cutAt.Add(60 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("contender not granted the lease within 60 s of the cut: %v", err)
		}
		sentAt = time.Now()
		granted, err = majority.Grant(ctx, kvlease.GrantRequest{Name: "partitioned", Holder: "contender", Duration: 10 * time.Second})
		if err == nil {
			break
		}
		if !errors.Is(err, kvlease.ErrHeld) && !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("contender: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the lapse has no event on this side until the new leader exists
	}
	// The holder logs the loss, then stops its command within the grace:
	// the time the line was read plus the grace bounds the stop.
	_, lostAt := logs.waitAt(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lease lost") })
	stoppedBy := lostAt.Add(grace)
	t.Logf("cut at 0; holder reported the loss at %v (command stopped by %v); contender granted (request sent) at %v with token %d (holder's %d)",
		lostAt.Sub(cutAt).Round(time.Millisecond), stoppedBy.Sub(cutAt).Round(time.Millisecond),
		sentAt.Sub(cutAt).Round(time.Millisecond), granted.Token, held.Token)
	if !stoppedBy.Before(sentAt) {
		t.Fatalf("the holder's command was stopped by %v, not before the contender's successful request was sent at %v", stoppedBy, sentAt)
	}
	if granted.Token <= held.Token {
		t.Fatalf("contender's token %d is not above the holder's %d", granted.Token, held.Token)
	}

	net.heal(lead)
	back := c.store(lead)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := back.Get(ctx, "partitioned")
		if err == nil && got.Token == granted.Token && got.Holder == "contender" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the healed node: %+v, %v; want the contender's tenure", got, err)
		}
		time.Sleep(100 * time.Millisecond) // rejoining has no event to wait on
	}
}
