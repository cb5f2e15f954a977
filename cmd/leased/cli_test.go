package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Every client subcommand against a real `leased serve` process.
func TestCLI(t *testing.T) {
	s := startServe(t, "")
	url := s.url

	// watch runs throughout and must see each kind of event.
	watch := exec.Command(leasedBin, "watch", "-o", "json", "--url", url)
	out, _ := watch.StdoutPipe()
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	events := readLines(out)
	event := func(typ, name string) map[string]any {
		t.Helper()
		line := events.wait(t, 10*time.Second, func(l string) bool {
			return strings.Contains(l, `"type":"`+typ+`"`) && strings.Contains(l, `"name":"`+name+`"`)
		})
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}

	r := leased(t, url, "acquire", "jobs.a", "--ttl", "5m", "--holder", "alice", "--attr", "role=primary", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire: %d %s", r.code, r.stderr)
	}
	var grant api.Lease
	if err := json.Unmarshal([]byte(r.stdout), &grant); err != nil || grant.Secret == "" || grant.Token == 0 {
		t.Fatalf("acquire output %q: %v", r.stdout, err)
	}
	if ev := event("granted", "jobs.a"); ev["holder"] != "alice" || ev["token"] != float64(grant.Token) {
		t.Fatalf("granted event %v", ev)
	}
	tok, rev := strconv.FormatUint(grant.Token, 10), strconv.FormatUint(grant.Revision, 10)

	for _, c := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"held by someone else", []string{"acquire", "jobs.a", "--holder", "bob"}, 3, ""},
		{"get", []string{"get", "jobs.a"}, 0, "alice"},
		{"get missing", []string{"get", "jobs.none"}, 4, ""},
		{"ls", []string{"ls"}, 0, "jobs.a"},
		{"ls other prefix", []string{"ls", "svc."}, 0, ""},
		{"renew wrong secret", []string{"renew", "jobs.a", "--holder", "alice", "--token", tok, "--revision", rev, "--secret", "nope"}, 6, ""},
		{"renew as another holder", []string{"renew", "jobs.a", "--holder", "bob", "--token", tok, "--revision", rev, "--secret", grant.Secret}, 6, ""},
		{"renew missing flags", []string{"renew", "jobs.a"}, 2, ""},
		{"invalid name", []string{"acquire", "bad name"}, 2, ""},
		{"ttl too short", []string{"acquire", "jobs.b", "--ttl", "100ms"}, 2, ""},
		// Refused by the service as too large: bad arguments (it was exit 1).
		{"attributes too large", []string{"acquire", "jobs.c", "--attr", "k=" + strings.Repeat("x", 20000)}, 2, ""},
		// The last was kept, silently (found by an outside client).
		{"an attribute given twice", []string{"acquire", "jobs.c", "--attr", "k=1", "--attr", "k=2"}, 2, ""},
		{"bad output format", []string{"ls", "-o", "xml"}, 2, ""},
		{"unknown flag", []string{"get", "jobs.a", "--frob"}, 2, ""},
		{"revoke missing", []string{"revoke", "jobs.none"}, 4, ""},
		// No tenure has token 0: it revoked whatever held the lease.
		{"revoke token 0", []string{"revoke", "jobs.a", "--token", "0"}, 2, ""},
		// The grantor's own leases, which elect (on the bucket, not
		// through the service) campaigned for (found by an outside client).
		{"elect for the observer's lease", []string{"elect", "_leased.observer", "--", "true"}, 2, ""},
		{"run under the observer's lease", []string{"run", "--lease", "_leased.observer", "--", "true"}, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := leased(t, url, c.args...)
			if r.code != c.code || !strings.Contains(r.stdout, c.out) {
				t.Fatalf("leased %v: exit %d, stdout %q, stderr %q; want exit %d and %q",
					c.args, r.code, r.stdout, r.stderr, c.code, c.out)
			}
		})
	}
	if r := leased(t, url, "ls", "svc."); strings.Contains(r.stdout, "jobs.a") {
		t.Fatalf("ls svc. listed jobs.a: %s", r.stdout)
	}
	// Scripts keep the grant in a file and hand it back.
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	behindFile := filepath.Join(t.TempDir(), "behind.json") // the grant, left behind by the renewal
	if r := leased(t, url, "acquire", "jobs.f", "--ttl", "5m", "-o", "json"); r.code != 0 {
		t.Fatal(r.stderr)
	} else if err := errors.Join(os.WriteFile(leaseFile, []byte(r.stdout), 0o600), os.WriteFile(behindFile, []byte(r.stdout), 0o600)); err != nil {
		t.Fatal(err)
	}
	var renewedF api.Lease
	if r := leased(t, url, "renew", "jobs.f", "--lease-file", leaseFile, "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &renewedF) != nil {
		t.Fatalf("renew --lease-file: %d %s", r.code, r.stderr)
	} else if err := os.WriteFile(leaseFile, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file behind its tenure (a renewal whose answer was lost) is
	// refused, with the revision to give: the lease is not lost.
	giveRevision := "give --revision " + strconv.FormatUint(renewedF.Revision, 10)
	if r := leased(t, url, "renew", "jobs.f", "--lease-file", behindFile); r.code != 6 || !strings.Contains(r.stderr, giveRevision) {
		t.Fatalf("renew with a file behind its tenure: exit %d %s; want 6 and %q", r.code, r.stderr, giveRevision)
	}
	if r := leased(t, url, "release", "jobs.g", "--lease-file", leaseFile); r.code != 2 {
		t.Fatalf("release of another lease with this file: exit %d", r.code)
	}
	if r := leased(t, url, "release", "jobs.f", "--lease-file", behindFile, "--revision", strconv.FormatUint(renewedF.Revision, 10)); r.code != 0 {
		t.Fatalf("release --lease-file (behind) --revision: %d %s", r.code, r.stderr)
	}

	r = leased(t, url, "renew", "jobs.a", "--holder", "alice", "--token", tok, "--revision", rev, "--secret", grant.Secret, "-o", "json")
	var renewed api.Lease
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &renewed) != nil || renewed.Revision <= grant.Revision || renewed.Token != grant.Token {
		t.Fatalf("renew: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	event("renewed", "jobs.a")
	// The old revision is stale now.
	if r := leased(t, url, "release", "jobs.a", "--holder", "alice", "--token", tok, "--revision", rev, "--secret", grant.Secret); r.code != 6 {
		t.Fatalf("release with a stale revision: exit %d %s", r.code, r.stderr)
	}
	r = leased(t, url, "release", "jobs.a", "--holder", "alice", "--token", tok,
		"--revision", strconv.FormatUint(renewed.Revision, 10), "--secret", grant.Secret)
	if r.code != 0 {
		t.Fatalf("release: exit %d %s", r.code, r.stderr)
	}
	event("released", "jobs.a")
	if r := leased(t, url, "get", "jobs.a"); r.code != 4 {
		t.Fatalf("get after release: exit %d", r.code)
	}

	// revoke, with its reason in the event.
	if r := leased(t, url, "acquire", "jobs.c", "--holder", "carol"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := leased(t, url, "revoke", "jobs.c", "--reason", "stuck"); r.code != 0 || !strings.Contains(r.stdout, "carol") {
		t.Fatalf("revoke: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if ev := event("revoked", "jobs.c"); ev["reason"] != "stuck" || ev["holder"] != "carol" {
		t.Fatalf("revoked event %v", ev)
	}
	// Held until carol's deadline (she may not have heard): a grant is
	// refused, saying so; revoke --now frees a lease at once.
	if r := leased(t, url, "acquire", "jobs.c", "--holder", "dan"); r.code != cli.ExitHeld ||
		!strings.Contains(r.stderr, `revoked from "carol"`) || !strings.Contains(r.stderr, "deadline has passed") {
		t.Fatalf("acquire of a revoked lease: exit %d %s, want %d saying it stays held until carol's deadline", r.code, r.stderr, cli.ExitHeld)
	}
	if r := leased(t, url, "acquire", "jobs.n", "--holder", "nora"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := leased(t, url, "revoke", "jobs.n", "--now"); r.code != 0 || !strings.Contains(r.stdout, "free now") {
		t.Fatalf("revoke --now: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	event("revoked", "jobs.n")
	if r := leased(t, url, "acquire", "jobs.n", "--holder", "dan"); r.code != 0 {
		t.Fatalf("acquire after revoke --now: exit %d %s", r.code, r.stderr)
	}

	// expiry by TTL, seen by the watcher with no one polling.
	if r := leased(t, url, "acquire", "jobs.d", "--ttl", "1s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	event("expired", "jobs.d")

	// acquire --hold keeps renewing until SIGTERM, then releases.
	hold := exec.Command(leasedBin, "acquire", "jobs.e", "--ttl", "3s", "--hold", "--holder", "dave", "--url", url)
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		event("renewed", "jobs.e")
		events.mu.Lock() // consume: the next wait must find a later renewal
		events.all = dropFirst(events.all, `"type":"renewed"`, `"name":"jobs.e"`)
		events.mu.Unlock()
	}
	if err := hold.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(hold, 10*time.Second); err != nil {
		t.Fatalf("acquire --hold after SIGTERM: %v", err)
	}
	event("released", "jobs.e")
	// The grantor's own leases (its observer's, renewed every 1.7 s) are
	// left out, as ls leaves them out.
	if strings.Contains(events.text(), grantor.ReservedPrefix) {
		t.Fatalf("watch printed the grantor's own leases:\n%s", events.text())
	}
}

// dropFirst removes the first line containing all of subs.
func dropFirst(all []string, subs ...string) []string {
	for i, l := range all {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return append(all[:i:i], all[i+1:]...)
		}
	}
	return all
}

// runProcess starts `leased run --verbose` and follows the deadline it logs:
// the time by which the command must be gone, moved on by every renewal.
type runProcess struct {
	cmd  *exec.Cmd
	logs *lines
}

func startRun(t *testing.T, url string, args ...string) *runProcess {
	t.Helper()
	cmd := exec.Command(leasedBin, append([]string{"run", "--verbose", "--url", url}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &runProcess{cmd: cmd, logs: readLines(stderr)}
	p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
	return p
}

// deadline is the latest deadline logged so far.
func (p *runProcess) deadline(t *testing.T) time.Time {
	t.Helper()
	var last time.Time
	for _, l := range strings.Split(p.logs.text(), "\n") {
		if i := strings.Index(l, "deadline="); i >= 0 {
			v := strings.Fields(l[i+len("deadline="):])[0]
			d, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				t.Fatalf("deadline in %q: %v", l, err)
			}
			last = d
		}
	}
	if last.IsZero() {
		t.Fatal("no deadline logged")
	}
	return last
}

func TestRunPassesTokenAndExitCode(t *testing.T) {
	s := startServe(t, "")
	r := leased(t, s.url, "run", "--lease", "once", "--ttl", "3s", "--", "sh", "-c", `echo "token=$LEASED_TOKEN lease=$LEASED_LEASE"; exit 7`)
	if r.code != 7 || !strings.Contains(r.stdout, "lease=once") || strings.Contains(r.stdout, "token= ") {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The lease was released when the command exited.
	if r := leased(t, s.url, "get", "once"); r.code != 4 {
		t.Fatalf("lease after run: exit %d", r.code)
	}
	// A held lease: the command never starts.
	if r := leased(t, s.url, "acquire", "busy", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r = leased(t, s.url, "run", "--lease", "busy", "--", "sh", "-c", "echo started")
	if r.code != 3 || strings.Contains(r.stdout, "started") {
		t.Fatalf("run on a held lease: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := leased(t, s.url, "run", "--lease", "x", "--ttl", "2s", "--grace", "5s", "--", "true"); r.code != 2 {
		t.Fatalf("grace longer than the lease: exit %d", r.code)
	}
}

// The release run sends as its command ends is tried again while the
// lease would be held anyway, not only for --timeout: one sent while the
// grantor did not answer for longer (a stream-leader failover took 5.5–7.7
// s in the cluster tests, the default --timeout is 5 s) failed, and the
// next holder waited out the TTL (found by an outside client). The
// server is paused from the command's end until run says, past
// --timeout, that it is still trying.
func TestRunReleaseOutlastsAGrantorPause(t *testing.T) {
	s := startServe(t, "")
	const timeout = 800 * time.Millisecond // below slowRelease (1 s): the notice comes after --timeout has run out
	cmd, stdin, out, logs := startCLI(t, "run", "--verbose", "--url", s.url, "--timeout", timeout.String(), "--lease", "paused",
		"--ttl", "30s", "--", "sh", "-c", "read x; echo ended")
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
	resume := s.pause(t)
	fmt.Fprintln(stdin, "end")
	out.wait(t, 10*time.Second, func(l string) bool { return l == "ended" })
	// The notice comes a second into the release, past --timeout: a
	// release bounded by --timeout had failed by then.
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "release unanswered; trying again") })
	resume()
	if err := waitExit(cmd, 30*time.Second); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.text())
	}
	if strings.Contains(logs.text(), "release failed") {
		t.Fatalf("run gave up its release:\n%s", logs.text())
	}
	if r := leased(t, s.url, "get", "paused"); r.code != 4 {
		t.Fatalf("the lease after run: exit %d (4: none), %s%s", r.code, r.stdout, r.stderr)
	}
}

// acquire --hold stopped while its grantor does not answer says that it
// is still trying to release, and a second stop ends it at once (the
// lease lapses, unless the server still takes the release sent): its
// release tries again while the lease would be held (up to 30 s here),
// and the second stop was swallowed.
func TestHoldEndsAtASecondStopWhileReleasing(t *testing.T) {
	s := startServe(t, "")
	hold, _, out, logs := startCLI(t, "acquire", "unanswered", "--hold", "--ttl", "30s", "--url", s.url)
	out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "unanswered") })
	defer s.pause(t)()
	_ = hold.Process.Signal(syscall.SIGTERM)
	logs.wait(t, 10*time.Second, func(l string) bool {
		return strings.Contains(l, "releasing unanswered: no answer yet") && strings.Contains(l, "stop again")
	})
	_ = hold.Process.Signal(syscall.SIGTERM)
	var exit *exec.ExitError
	if err := waitExit(hold, 5*time.Second); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("acquire --hold after a second SIGTERM: %v, want killed by it\n%s", err, logs.text())
	}
}

// The command is not given run's secrets (it was: LEASED_PASSWORD, the
// way the README recommends to give the NATS password, reached it).
func TestRunKeepsItsSecretsFromTheCommand(t *testing.T) {
	s := startServe(t, "")
	t.Setenv("LEASED_PASSWORD", "nats-password-1")
	t.Setenv("LEASED_SECRET", "lease-secret-0123456789")
	t.Setenv("LEASED_GOSSIP_KEY", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=") // it reached the command (an outside client)
	// A token in the URL (the server takes no authentication: it is
	// ignored) must not reach the command either.
	url := strings.Replace(s.url, "nats://", "nats://url-token-42@", 1)
	r := leased(t, url, "run", "--lease", "env", "--ttl", "3s", "--", "env")
	if r.code != 0 || !strings.Contains(r.stdout, "LEASED_TOKEN=") || !strings.Contains(r.stdout, "LEASED_URL="+s.url+"\n") {
		t.Fatalf("run env: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, secret := range []string{"LEASED_PASSWORD", "nats-password-1", "LEASED_SECRET", "lease-secret-0123456789", "url-token-42",
		"LEASED_GOSSIP_KEY", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="} {
		if strings.Contains(r.stdout, secret) {
			t.Errorf("the command's environment has %s", secret)
		}
	}
}

// startWatch starts `leased watch prefix` on url, killed on cleanup, and
// returns its stdout's and stderr's lines.
func startWatch(t *testing.T, url, prefix string) (out, errs *lines) {
	t.Helper()
	cmd := exec.Command(leasedBin, "watch", prefix)
	cmd.Env = append(os.Environ(), "LEASED_URL="+url)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return readLines(stdout), readLines(stderr)
}

// watch says on stderr when the server goes away and when it is back (it
// said nothing, and a user could not tell a quiet bucket from a dead
// server), and goes on with the changes made meanwhile.
func TestWatchSaysWhenTheServerIsAway(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, dir)
	out, errs := startWatch(t, s.url, "away.")
	if r := leased(t, s.url, "acquire", "away.before", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "away.before") })
	s.stop(t)
	// With the time it was lost, and no promise of every change: the
	// catch-up gives each lease's latest (found by an outside client).
	lost := errs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "connection to the server lost") })
	if !regexp.MustCompile(`^leased: watch: \d{4}-\d\d-\d\dT[0-9:.]+Z: `).MatchString(lost) || !strings.Contains(lost, "each lease's latest change") {
		t.Errorf("stderr line %q: want the time it was lost, and what the catch-up gives", lost)
	}
	s = startServe(t, dir, "--listen", strings.TrimPrefix(s.url, "nats://"))
	errs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "reconnected to") })
	if r := leased(t, s.url, "acquire", "away.after", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "away.after") })
	// The consumer lost with the connection is said once, as the
	// connection's loss.
	errs.mu.Lock()
	defer errs.mu.Unlock()
	for _, l := range errs.all {
		if strings.Contains(l, "lost its consumer") {
			t.Errorf("stderr line %q: the loss of the connection said twice", l)
		}
	}
}

// watch says on stderr when it lost its consumer with its connection up
// (the consumer's node died, two heartbeats missed, the consumer
// deleted): what was stored meanwhile comes as each lease's latest
// change, as after a reconnect, but it said nothing then, and a user
// could not tell that a tenure begun and ended meanwhile was not printed
// (found by an outside client: a consumer node SIGKILLed in a cluster, a
// connection blackholed for 2 s).
func TestWatchSaysWhenItLostItsConsumer(t *testing.T) {
	s := startServe(t, "")
	out, errs := startWatch(t, s.url, "gap.")
	if r := leased(t, s.url, "acquire", "gap.before", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "gap.before") })

	deleteWatchConsumer(t, s.url, "gap.")
	lost := errs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lost") })
	if !regexp.MustCompile(`^leased: watch: \d{4}-\d\d-\d\dT[0-9:.]+Z: `).MatchString(lost) || !strings.Contains(lost, "each lease's latest change") {
		t.Errorf("stderr line %q: want the time it was lost, and what the catch-up gives", lost)
	}
	if r := leased(t, s.url, "acquire", "gap.after", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "gap.after") })
}

// deleteWatchConsumer deletes the consumers of the one watch of prefix
// on the server at url, as the death of their node does: the one it
// reads, and any it gave up whose deletion was lost (cut off, it left
// them to the server's inactive threshold).
func deleteWatchConsumer(t *testing.T, url, prefix string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "KV_leases")
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for ci := range stream.ListConsumers(ctx).Info() {
		if ci.Config.FilterSubject == "$KV.leases."+prefix+">" {
			if err := stream.DeleteConsumer(ctx, ci.Name); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	if deleted == 0 {
		t.Fatal("found no consumer of the watch")
	}
}

// watch says each loss of its consumer with the connection up, whatever
// came before. Blackholed, it missed its consumer's heartbeats first
// (said as a lost consumer), then the connection's pings (said as a lost
// connection) while it was making another consumer; the reconnect then
// gave it no interrupt to match the disconnect with, and the disconnect,
// counted as waiting for one, swallowed the next real loss of its
// consumer: it said nothing of it (found in review). A lost connection
// now interrupts the watch as it is lost.
func TestWatchSaysEachLossOfItsConsumer(t *testing.T) {
	s := startServe(t, "")
	p := kvleasetest.NewProxy(t, strings.TrimPrefix(s.url, "nats://"))
	out, errs := startWatch(t, p.URL(), "loss.")
	consumerLost := func() int {
		errs.mu.Lock()
		defer errs.mu.Unlock()
		n := 0
		for _, l := range errs.all {
			if strings.Contains(l, "lost its consumer") {
				n++
			}
		}
		return n
	}
	if r := leased(t, s.url, "acquire", "loss.before", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "loss.before") })
	p.Cut()
	errs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "connection to the server lost") })
	p.Heal()
	errs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "reconnected to") })
	if r := leased(t, s.url, "acquire", "loss.after", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	out.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "loss.after") })
	said := consumerLost()
	deleteWatchConsumer(t, s.url, "loss.")
	for deadline := time.Now().Add(10 * time.Second); consumerLost() == said; {
		if time.Now().After(deadline) {
			errs.mu.Lock()
			defer errs.mu.Unlock()
			t.Fatalf("no stderr line 10 s after its consumer was deleted, the connection up; stderr:\n%s", strings.Join(errs.all, "\n"))
		}
		select {
		case <-errs.added:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Revoked: the command is stopped before the holder's deadline.
func TestRunStopsCommandOnRevoke(t *testing.T) {
	s := startServe(t, "")
	// The command starts a process of its own, which must be stopped too.
	pidFile := filepath.Join(t.TempDir(), "pid")
	// A 30 s lease is renewed every 10 s: the revocation, just after the
	// grant, must stop the command at once (the service announces it), not
	// at the first renewal.
	p := startRun(t, s.url, "--lease", "revoked", "--ttl", "30s", "--", "sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")
	if r := leased(t, s.url, "revoke", "revoked"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	revoked := time.Now()
	// Every renewal is logged before the loss is: then the last deadline
	// logged is the one in force.
	p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lease lost") })
	if took := time.Since(revoked); took > 3*time.Second {
		t.Fatalf("lease lost %v after the revocation, want at once (the first renewal was due 10 s after the grant)", took)
	}
	deadline := p.deadline(t)
	err := waitExit(p.cmd, 10*time.Second)
	exited := time.Now()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+15 {
		t.Fatalf("run exit: %v, want 143 (the command's SIGTERM)", err)
	}
	if !exited.Before(deadline) {
		t.Fatalf("command gone at %v, after the holder's deadline %v", exited, deadline)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	grandchild, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if grandchild == 0 || running(grandchild) {
		t.Fatalf("the command's own child (pid %q) survived the lease", b)
	}
	t.Logf("command stopped %v before the holder's deadline", deadline.Sub(exited))
	// The revocation held the lease until run's deadline, 30 s away; run,
	// its command stopped, released it: it is free now.
	if r := leased(t, s.url, "acquire", "revoked", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after run stopped its command: exit %d %s, want the lease free", r.code, r.stderr)
	}
}

// run SIGKILLed (or OOM-killed) takes its whole command with it, not just
// the process it started: a shell's own child kept running for good while
// another holder took the lease (found by an outside client, 3 of 3 times:
// the kernel's parent-death signal reaches a direct child only).
func TestRunKilledStopsWhatItsCommandStarted(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "killed", "--ttl", "30s", "--", "sh", "-c", "sleep 60 & echo child-pid=$! >&2; wait")
	grandchild := p.childPID(t)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	waitGone(t, grandchild, "the command's own child, run killed", 5*time.Second)
}

// What the command started is stopped with it also if it left the
// command's process group (setsid; GNU timeout makes a group of its own),
// before run releases the lease, and when run is killed: the guard adopts
// the command's orphans (a child subreaper) and kills every process
// descended from it. They ran on, re-parented to init (found in review).
func TestRunStopsWhatLeftTheCommandsGroup(t *testing.T) {
	s := startServe(t, "")
	for _, tc := range []struct{ how, then string }{{"the command exited", "exit 0"}, {"run killed", "exec sleep 60"}} {
		// The pid is read once its process has left the group (the
		// substitution ends when it execs sleep, its output elsewhere).
		p := startRun(t, s.url, "--lease", "escaped", "--ttl", "30s", "--", "sh", "-c",
			`pid=$(setsid sh -c 'echo $$; exec sleep 60 >/dev/null' &); echo child-pid=$pid >&2; `+tc.then)
		escaped := p.childPID(t)
		if tc.then != "exit 0" {
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
		} else if err := waitExit(p.cmd, 10*time.Second); err != nil {
			t.Fatalf("run: %v, want exit 0", err)
		}
		waitGone(t, escaped, "a process that left the command's group, "+tc.how, 5*time.Second)
	}
}

// childPID waits for the line "child-pid=N" the command writes to its
// stderr, which is run's (its log lines), and returns N.
func (p *runProcess) childPID(t *testing.T) int {
	t.Helper()
	line := p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "child-pid=") })
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "child-pid="))
	if err != nil {
		t.Fatalf("child pid line %q: %v", line, err)
	}
	return pid
}

// waitGone fails t if process pid (what) still runs within from now.
func waitGone(t *testing.T, pid int, what string, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); running(pid); time.Sleep(20 * time.Millisecond) { // bounded poll: not our child, no event for its exit
		if time.Now().After(end) {
			t.Fatalf("%s (pid %d) still runs %v later", what, pid, within)
		}
	}
}

// run stopped (SIGSTOP, a terminal's Ctrl-Z) renews nothing and stops
// nothing: its command ran on past the lease, for as long as run stayed
// stopped, while another holder could take the lease. The guard, another
// process, kills the command's group at the deadline run would have, and
// while run renews it does not.
func TestRunStoppedStopsItsCommandAtItsDeadline(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "stopped", "--ttl", "3s", "--", "sh", "-c", "sleep 60 & echo child-pid=$! >&2; wait")
	grandchild := p.childPID(t)
	// Renewed every second: four renewals take the command past the
	// deadline it started with, and the guard has kept it.
	renewals := 0
	p.logs.wait(t, 20*time.Second, func(l string) bool {
		if strings.Contains(l, "msg=renewed") {
			renewals++
		}
		return renewals == 4
	})
	if !running(grandchild) {
		t.Fatalf("the command's child (pid %d) is gone while run renewed:\n%s", grandchild, p.logs.text())
	}
	kvleasetest.StopProcess(t, p.cmd.Process)
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	if !running(grandchild) {
		t.Fatalf("the command's child (pid %d) is gone as run stopped: the test proves nothing", grandchild)
	}
	// The deadline is at most the TTL away.
	waitGone(t, grandchild, "the command's child, run stopped", 3*time.Second+5*time.Second)
	p.logs.wait(t, 5*time.Second, func(l string) bool { return strings.Contains(l, "deadline passed with no renewal") })
}

// The command's process group's id is the pid of its first process: once
// that process is reaped, the pid can go to another process, and the
// guard's later kill of the group (at the deadline, or as run ends) can
// reach a group that is not the command's. The guard keeps the first
// process a zombie, its pid taken, until it has killed the group for the
// last time; it reaped it at once.
func TestRunKeepsTheCommandsGroupIDUntilItsLastKill(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "zombie", "--ttl", "3s", "--", "sh", "-c",
		"echo leader-pid=$$ >&2; sleep 60 & echo child-pid=$! >&2; wait")
	line := p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "leader-pid=") })
	leader, err := strconv.Atoi(strings.TrimPrefix(line, "leader-pid="))
	if err != nil {
		t.Fatalf("leader pid line %q: %v", line, err)
	}
	member := p.childPID(t)
	kvleasetest.StopProcess(t, p.cmd.Process)
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	if err := syscall.Kill(leader, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The guard kills the group at the deadline, run being stopped: by
	// then it has long seen the first process exit.
	waitGone(t, member, "the command's group's other member, run stopped", 3*time.Second+5*time.Second)
	if _, err := os.Stat("/proc/" + strconv.Itoa(leader)); err != nil {
		t.Fatalf("the command's first process (pid %d, the group's id) was reaped before the guard's last kill: %v", leader, err)
	}
}

// A command whose exit run sees only after the lease's deadline (run and
// the guard stopped meanwhile, the command not) makes run exit 5, not the
// command's 0: it may have worked on without the lease. run exited 0 (found
// by an outside client, 2 of 3 runs) when it saw the exit before it saw the
// lease lost: here 1 of 4 runs before the fix, whichever run takes first.
func TestRunSeesItsCommandExitAfterTheDeadline(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "late", "--ttl", "3s", "--", "sh", "-c", "echo child-pid=$$ >&2; kill -STOP $$; exit 0")
	command := p.childPID(t)
	waitStopped(t, command)
	_, guard, _, ok := procStatOf(command)
	if !ok {
		t.Fatal("the command is gone")
	}
	kvleasetest.StopProcess(t, p.cmd.Process)
	stopped := time.Now()
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	_ = syscall.Kill(guard, syscall.SIGSTOP)
	defer syscall.Kill(guard, syscall.SIGCONT)
	waitStopped(t, guard)
	// No renewal since run stopped: the deadline is a TTL away at most.
	<-time.After(time.Until(stopped.Add(3*time.Second + 500*time.Millisecond)))
	if err := syscall.Kill(command, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitGone(t, command, "the command, continued", 5*time.Second)
	_ = syscall.Kill(guard, syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if err, ee := waitExit(p.cmd, 20*time.Second), (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("run: %v, want exit 5 (lost)\n%s", err, p.logs.text())
	}
}

// run stopping its command waits for the guard's word of its exit; a guard
// stopped on its own (SIGSTOP to its pid, shown in ps as "leased __guard")
// never gave it: run, sent SIGTERM, killed the command and then waited for
// good, its lease neither released nor let go of (found by an outside
// client). run continues the guard as it stops the command, as it does the
// command's group.
func TestRunStopsItsCommandWithItsGuardStopped(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "guardstopped", "--ttl", "30s", "--", "sh", "-c", "echo child-pid=$$ >&2; exec sleep 60")
	command := p.childPID(t)
	_, guard, _, ok := procStatOf(command)
	if !ok {
		t.Fatal("the command is gone")
	}
	_ = syscall.Kill(guard, syscall.SIGSTOP)
	defer syscall.Kill(guard, syscall.SIGCONT)
	waitStopped(t, guard)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	// The grace is 2 s (TTL/10, at most 2 s).
	if err, ee := waitExit(p.cmd, 10*time.Second), (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 128+15 {
		t.Fatalf("run, its guard stopped, sent SIGTERM: %v, want exit 143 (the command's SIGTERM)\n%s", err, p.logs.text())
	}
	if r := leased(t, s.url, "acquire", "guardstopped", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after run stopped: exit %d %s, want the lease released", r.code, r.stderr)
	}
}

// A command that exits on its own while its guard is stopped: run heard
// nothing of the exit and kept renewing the lease of a command that was
// gone, for as long as the guard stayed stopped (found by an outside
// client). run continues the guard at each renewal.
func TestRunSeesItsCommandExitWithItsGuardStopped(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "guardstopped.exit", "--ttl", "3s", "--", "sh", "-c", "echo child-pid=$$ >&2; exec sleep 2")
	command := p.childPID(t)
	_, guard, _, ok := procStatOf(command)
	if !ok {
		t.Fatal("the command is gone")
	}
	_ = syscall.Kill(guard, syscall.SIGSTOP)
	defer syscall.Kill(guard, syscall.SIGCONT)
	waitStopped(t, guard)
	// Renewed every second: the exit is seen within one renewal of it.
	if err := waitExit(p.cmd, 10*time.Second); err != nil {
		t.Fatalf("run, its guard stopped, its command done: %v, want exit 0\n%s", err, p.logs.text())
	}
	if r := leased(t, s.url, "acquire", "guardstopped.exit", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after run's command exited: exit %d %s, want the lease released", r.code, r.stderr)
	}
}

// A command that exits 0 on its own, within its lease, while run is
// stopped, is run's success however late run resumes: the guard saw the
// exit in time. run exited 5 ("the command exited 0 after the lease was
// lost") when, resumed past the deadline, it saw the lease lost before it
// read the exit, and sent SIGTERM to a command long gone (found by an
// outside client: 5 of 8 such runs, run stopped and continued at random).
// Whichever run reads first is chance: several runs, so that one of them
// reads the loss first (a quarter to a half of runs did before the fix).
func TestRunSeesItsCommandExitInTimeWhileStopped(t *testing.T) {
	s := startServe(t, "")
	const n = 6
	runs, commands := make([]*runProcess, n), make([]int, n)
	for i := range runs {
		runs[i] = startRun(t, s.url, "--lease", fmt.Sprintf("intime.%d", i), "--ttl", "3s", "--",
			"sh", "-c", "echo child-pid=$$ >&2; kill -STOP $$; exit 0")
		commands[i] = runs[i].childPID(t)
		waitStopped(t, commands[i])
	}
	for _, p := range runs {
		kvleasetest.StopProcess(t, p.cmd.Process)
		defer p.cmd.Process.Signal(syscall.SIGCONT)
	}
	stopped := time.Now()
	for i, p := range runs {
		if err := syscall.Kill(commands[i], syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		waitGone(t, commands[i], "the command, continued", 5*time.Second)
		if deadline := p.deadline(t); !time.Now().Before(deadline) {
			t.Fatalf("command %d exited at its deadline %v or later: the test proves nothing\n%s", i, deadline, p.logs.text())
		}
	}
	// No renewal since run stopped: the deadline is a TTL away at most.
	<-time.After(time.Until(stopped.Add(3*time.Second + 500*time.Millisecond)))
	for _, p := range runs {
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range runs {
		if err := waitExit(p.cmd, 20*time.Second); err != nil {
			t.Errorf("run %d: %v, want exit 0 (the command's own, seen in time)\n%s", i, err, p.logs.text())
		}
	}
}

// waitStopped waits until every thread of pid, not a child of this
// process, has stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // bounded poll: no event for another's stop
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		all := len(tasks) > 0
		for _, task := range tasks {
			tid, _ := strconv.Atoi(filepath.Base(task))
			if st, _, _, ok := procStatOf(tid); !ok || st != 'T' && st != 't' {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("pid %d did not stop", pid)
		}
	}
}

// procStatOf is pid's state letter, parent and process group.
func procStatOf(pid int) (state byte, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], ppid, pgrp, true
}

// With -o json, run's and elect's log lines are JSON objects, as the flag
// says of every command's output; they were text whatever -o said (found
// by an outside client).
func TestRunLogsJSON(t *testing.T) {
	s := startServe(t, "")
	// The guard's lines too: a command that cannot start (it wrote "leased:
	// start …" as text; found in review).
	if r := leased(t, s.url, "acquire", "json.held", "--ttl", "1m"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--lease", "json.run", "-o", "json", "--", "true"}, 0},
		{[]string{"elect", "json.elect", "-o", "json", "--", "true"}, 0},
		{[]string{"run", "--lease", "json.nostart", "-o", "json", "--", "/nonexistent/command"}, 127},
		// Its own error too: a held lease was "leased: held: …" as text
		// (found by an outside client).
		{[]string{"run", "--lease", "json.held", "--holder", "other", "-o", "json", "--", "true"}, 3},
	} {
		args := c.args
		r := leased(t, s.url, args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != c.code || len(lines) == 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, l := range lines {
			var line struct{ Msg string }
			if err := json.Unmarshal([]byte(l), &line); err != nil || line.Msg == "" {
				t.Errorf("%v -o json: log line %q is no JSON object with a msg", args, l)
			}
		}
	}
}

// onTerminal runs script with bash as the leader of a new session on a new
// pseudo-terminal, with LEASED and URL in its environment, and returns the
// terminal's master side and its output lines.
func onTerminal(t *testing.T, url, script string) (*os.File, *lines) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	shell := exec.Command(bash, "-c", script)
	shell.Env = append(os.Environ(), "LEASED="+leasedBin, "URL="+url)
	shell.Stdin, shell.Stdout, shell.Stderr = pts, pts, pts
	shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-shell.Process.Pid, syscall.SIGKILL); _ = shell.Wait() })
	return ptm, readLines(ptm)
}

// At a terminal, the command has it while it runs: it was in a background
// process group, so a command that read the terminal was stopped (SIGTTIN)
// and run waited for good. Ctrl-Z stops the command and run's job, whose
// shell gets the terminal back (without that, the terminal stayed with a
// stopped group and the shell waited on run); fg gives the command the
// terminal again. The shell is bash with job control, the session's
// leader on a new terminal. And from review: a run that is one member of
// a group among others (a & job of a script without job control) leaves
// the terminal to that group (it took it, and the script's next read
// stopped the script); a run that leads its session (exec), with no shell
// to fg it, has Ctrl-Z discarded, as the kernel does for such a group (the
// command stayed stopped for good).
func TestRunGivesTheCommandTheTerminal(t *testing.T) {
	s := startServe(t, "")
	t.Run("Ctrl-Z and fg", func(t *testing.T) {
		ptm, out := onTerminal(t, s.url, `set -m
"$LEASED" run --url "$URL" --lease tty -- sh -c 'read x; echo got-$x'
echo stopped-status=$?
fg
echo run-exit=$?`)
		started := out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
		pid := regexp.MustCompile(` pid=(\d+)`).FindStringSubmatch(started)
		if pid == nil {
			t.Fatalf("no pid in %q", started)
		}
		// The command has the terminal (bounded poll: no event).
		foreground := func(when string) {
			t.Helper()
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if fg, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPGRP); err == nil && strconv.Itoa(fg) == pid[1] {
					return
				}
				if time.Now().After(end) {
					t.Fatalf("the command (pid %s) did not have the terminal %s", pid[1], when)
				}
			}
		}
		foreground("at its start")
		if _, err := ptm.WriteString("\x1a"); err != nil { // Ctrl-Z
			t.Fatal(err)
		}
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "stopped-status=148") }) // 128+SIGTSTP
		// Typed before fg has given the terminal back, the line went to the
		// shell, and the command waited for its read (a CI run).
		foreground("after fg")
		if _, err := ptm.WriteString("hello\n"); err != nil {
			t.Fatal(err)
		}
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "got-hello") })
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "run-exit=0") })
	})
	t.Run("Ctrl-Z and bg", func(t *testing.T) {
		ptm, out := onTerminal(t, s.url, `set -m
"$LEASED" run --url "$URL" --lease tty.z -- sh -c 'sleep 1; echo cmd-done'
echo stopped-status=$?
bg
wait
echo run-exit=$?`)
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
		if _, err := ptm.WriteString("\x1a"); err != nil { // Ctrl-Z
			t.Fatal(err)
		}
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "stopped-status=148") })
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "cmd-done") })
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "run-exit=0") })
	})
	t.Run("a & job of a script", func(t *testing.T) {
		// The script reads once the command runs (it took the terminal
		// then, and the read of the script's group, orphaned here, failed
		// at once).
		ptm, out := onTerminal(t, s.url, `"$LEASED" run --url "$URL" --lease tty.bg -- sleep 3 &
sleep 1; read x; echo script-got-$x.; wait; echo script-done`)
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
		if _, err := ptm.WriteString("typed\n"); err != nil {
			t.Fatal(err)
		}
		if got := out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "script-got-") }); !strings.Contains(got, "script-got-typed.") {
			t.Fatalf("the script read %q, want what was typed", got)
		}
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "script-done") })
	})
	t.Run("stty tostop and run stopped", func(t *testing.T) {
		// The guard, in a background group, writes its line at the
		// deadline to a terminal that stops such writers: it stopped,
		// and kept nothing to the deadline (found in review).
		_, out := onTerminal(t, s.url, `stty tostop
f=$(mktemp)
"$LEASED" run --url "$URL" --lease tty.tostop --ttl 3s -- sh -c "echo \$\$ > $f; exec sleep 60" &
p=$!
until [ -s $f ]; do sleep 0.05; done
kill -STOP $p
echo cmd-pid=$(cat $f)
sleep 60`)
		line := out.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "cmd-pid=") })
		pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "cmd-pid=")))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		waitGone(t, pid, "the command, run stopped, at a terminal with tostop", 3*time.Second+5*time.Second)
	})
	t.Run("stty tostop and run logging", func(t *testing.T) {
		// run, in the background while the command has the terminal,
		// logs each renewal there: with tostop it stopped at the first,
		// and renewed no more.
		ptm, out := onTerminal(t, s.url, `set -m
stty tostop
"$LEASED" run --verbose --url "$URL" --lease tty.v --ttl 3s -- sh -c 'read x; echo got-$x'
echo run-exit=$?`)
		renewals := 0
		out.wait(t, 20*time.Second, func(l string) bool {
			if strings.Contains(l, "msg=renewed") {
				renewals++
			}
			return renewals == 4
		})
		if _, err := ptm.WriteString("typed\n"); err != nil {
			t.Fatal(err)
		}
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "got-typed") })
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "run-exit=0") })
	})
	t.Run("run leads its session", func(t *testing.T) {
		_, out := onTerminal(t, s.url, `exec "$LEASED" run --url "$URL" --lease tty.exec -- sh -c 'kill -TSTP $$; echo resumed'`)
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "resumed") })
	})
}

// What the command leaves in its group when it exits gets run's grace,
// and the guard stays for it: run SIGKILLed during that grace still takes
// it along (the guard exited with the command, and a child that ignored
// SIGTERM ran on: found in review).
func TestRunKilledWhileReapingStopsWhatItsCommandLeft(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "reaping", "--ttl", "60s", "--grace", "15s", "--",
		"sh", "-c", `trap "" TERM; sleep 60 & echo child-pid=$! >&2; exit 0`)
	left := p.childPID(t)
	if !running(left) {
		t.Fatalf("the command's child (pid %d) is gone before run was killed: the test proves nothing", left)
	}
	if err := p.cmd.Process.Kill(); err != nil { // within the 15 s grace run gives what is left
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	waitGone(t, left, "what the command left, run killed", 5*time.Second)
}

// Descriptors run inherits reach the command at their own numbers (a
// socket-activated server's listener on 3), and the command cannot reach
// the guard's pipes: they took 3 and 4, and a command that wrote a wait
// status on 4 made run exit 0 for its exit 7 (found in review).
func TestRunPassesInheritedDescriptors(t *testing.T) {
	s := startServe(t, "")
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(leasedBin, "run", "--url", s.url, "--lease", "fds", "--", "sh", "-c",
		`echo on-3 >&3
run=$(cut -d' ' -f4 /proc/$PPID/stat) # the guard's parent
[ "$(readlink /proc/$run/fd/3)" = "$(readlink /proc/$$/fd/3)" ] && echo run-kept-3 >&3
exec >&3; ls /proc/$$/fd; echo 0 >&4; exit 7`)
	cmd.ExtraFiles = []*os.File{f} // 3; 4 is closed
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("run: %v; want exit 7, the command's", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if lines[0] != "on-3" {
		t.Errorf("descriptor 3: %q; want what the command wrote on it", b)
	}
	// run keeps it too: nats.go reads --creds /dev/fd/3 again at each
	// reconnect (run closed it, and lost its lease at the first one:
	// found in review).
	if len(lines) < 2 || lines[1] != "run-kept-3" {
		t.Errorf("run does not have descriptor 3 open while its command runs: %q", b)
	}
	// The command's descriptors, one a line: listed with no pipeline or
	// redirection of the ls, whose pipe or saved descriptor the shell may
	// hold as ls reads its descriptors (a run saw 4 open that way).
	lines = append(lines[:1], lines[2:]...)
	// Besides 0-3, only what this test process passes on (inherited
	// without close-on-exec from what started it).
	passed := map[string]bool{"0": true, "1": true, "2": true, "3": true}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); errno == 0 && flags&syscall.FD_CLOEXEC == 0 {
			passed[e.Name()] = true
		}
	}
	if len(lines) == 2 {
		for _, fd := range strings.Fields(lines[1]) {
			if !passed[fd] {
				t.Errorf("the command has descriptor %s open (%s); want only 0-3 and those passed on to run", fd, strings.Join(strings.Fields(lines[1]), " "))
			}
		}
	}
}

// A command that catches the SIGTERM and exits 0 when the lease is lost
// makes run exit 5, lost the lease (it exited 0, and a caller took the cut
// short work for done).
func TestRunLostLeaseIsNotSuccess(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "trapped", "--ttl", "30s", "--", "sh", "-c", `trap "exit 0" TERM; sleep 60 & wait`)
	if r := leased(t, s.url, "revoke", "trapped"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	err := waitExit(p.cmd, 10*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Fatalf("run exit: %v, want 5 (lost the lease)\n%s", err, p.logs.text())
	}
}

// Server stopped: renewals get no answer; the command is stopped before the
// holder's deadline.
func TestRunStopsCommandWhenServerStops(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "orphan", "--ttl", "3s", "--", "sleep", "60")
	s.stop(t)
	p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lease lost") })
	deadline := p.deadline(t)
	err := waitExit(p.cmd, 10*time.Second)
	exited := time.Now()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+15 {
		t.Fatalf("run exit: %v (%s), want 143", err, p.logs.text())
	}
	if !exited.Before(deadline) {
		t.Fatalf("command gone at %v, after the holder's deadline %v", exited, deadline)
	}
	t.Logf("command stopped %v before the holder's deadline", deadline.Sub(exited))
}

// run whose server is paused (no answer, the connection up) exits as soon
// as its command has stopped: it waited out its release's attempt, about
// 3 s past the deadline, where acquire --hold waits 100 ms (s14c).
func TestRunExitsAtOnceAfterALossToAPausedServer(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "paused.srv", "--ttl", "3s", "--", "sleep", "60")
	resume := kvleasetest.PauseProcess(t, s.cmd.Process)
	defer resume()
	p.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lease lost") })
	deadline := p.deadline(t) // the command's: run's own plus the grace
	err := waitExit(p.cmd, 10*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+15 {
		t.Fatalf("run exit: %v (%s), want 143", err, p.logs.text())
	}
	if late := time.Since(deadline); late > time.Second {
		t.Fatalf("run exited %v after its command's deadline, want at once", late.Round(time.Millisecond))
	}
}

// running reports whether pid is a live process (not gone, not a zombie
// waiting for init to reap it).
func running(pid int) bool {
	state, _, _, ok := procStatOf(pid)
	return ok && state != 'Z'
}

// `leased elect`: the second candidate's command starts only when the first
// leader steps down, with a higher token.
func TestElectHandsOver(t *testing.T) {
	s := startServe(t, "")
	start := func(holder string) (*exec.Cmd, *lines, *lines) {
		cmd := exec.Command(leasedBin, "elect", "leader.cli", "--ttl", "3s", "--url", s.url, "--holder", holder, "--",
			"sh", "-c", `echo "leading $LEASED_TOKEN"; exec sleep 60`)
		out, _ := cmd.StdoutPipe()
		errs, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, readLines(out), readLines(errs)
	}
	first, firstOut, _ := start("cand-1")
	l1 := firstOut.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "leading") })
	_, secondOut, secondLog := start("cand-2")
	// The second says who leads while it waits (it said nothing).
	secondLog.wait(t, 10*time.Second, func(l string) bool {
		return strings.Contains(l, `msg="waiting: another candidate leads"`) && strings.Contains(l, "leader=cand-1")
	})
	// The second waits; the first steps down (SIGTERM: stop the command, release).
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now()
	l2 := secondOut.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "leading") })
	var t1, t2 int
	if _, err := fmt.Sscanf(l1, "leading %d", &t1); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(l2, "leading %d", &t2); err != nil {
		t.Fatal(err)
	}
	if t2 <= t1 {
		t.Fatalf("second leader's token %d, first's %d", t2, t1)
	}
	t.Logf("hand-over %v after the first leader was told to step down", time.Since(stepped).Round(time.Millisecond))
}

// startElect starts `leased elect NAME ARGS... -- sh -c 'echo leading …;
// exec sleep 60'` against url, and returns its stdout and stderr lines.
func startElect(t *testing.T, url, name string, args ...string) (*exec.Cmd, *lines, *lines) {
	t.Helper()
	cmd := exec.Command(leasedBin, append(append([]string{"elect", name, "--url", url}, args...),
		"--", "sh", "-c", `echo "leading $LEASED_TOKEN"; exec sleep 60`)...)
	out, _ := cmd.StdoutPipe()
	errs, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, readLines(out), readLines(errs)
}

// A candidate started with the leader's own --holder (a second instance
// of the same name) says so as it waits: it waited without a word, its
// line of who leads kept for other names, so as not to name itself once
// it won (found by an outside client).
func TestElectSaysTheLeaderHasItsOwnName(t *testing.T) {
	s := startServe(t, "")
	_, firstOut, _ := startElect(t, s.url, "leader.twin", "--holder", "twin")
	firstOut.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "leading") })
	_, _, secondLog := startElect(t, s.url, "leader.twin", "--holder", "twin")
	secondLog.wait(t, 10*time.Second, func(l string) bool {
		return strings.Contains(l, "level=WARN") && strings.Contains(l, "this candidate's own name") && strings.Contains(l, "leader=twin")
	})
}

// A waiting candidate that said it waits for the grantor, which does not
// answer (its server paused), says when it answers again: it said the
// first alone, and nothing while it went on waiting for the leader
// (found by an outside client).
func TestElectSaysTheGrantorAnswersAgain(t *testing.T) {
	s := startServe(t, "")
	_, firstOut, _ := startElect(t, s.url, "leader.silent", "--holder", "cand-1", "--ttl", "1m")
	firstOut.wait(t, 10*time.Second, func(l string) bool { return strings.HasPrefix(l, "leading") })
	_, _, secondLog := startElect(t, s.url, "leader.silent", "--holder", "cand-2", "--ttl", "1m")
	secondLog.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "another candidate leads") })
	resume := kvleasetest.PauseProcess(t, s.cmd.Process)
	secondLog.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, "waiting for the grantor, which does not answer") })
	resume()
	secondLog.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, "the grantor answers again") })
}

// SIGHUP (a terminal or ssh session closed) stops run as SIGTERM does:
// its command gets SIGTERM, then run releases the lease. It killed run
// outright, its command got SIGKILL with no SIGTERM, and the lease stayed
// held for its TTL (found in review).
func TestRunHangUpStopsTheCommandAndReleases(t *testing.T) {
	s := startServe(t, "")
	p := startRun(t, s.url, "--lease", "hungup", "--ttl", "30s", "--", "sh", "-c",
		`trap 'echo got-term >&2; exit 0' TERM; echo child-pid=$$ >&2; while :; do sleep 0.1; done`)
	p.childPID(t)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(p.cmd, 10*time.Second); err != nil {
		t.Fatalf("run after SIGHUP: %v, want exit 0 (the command's)\n%s", err, p.logs.text())
	}
	p.logs.wait(t, time.Second, func(l string) bool { return l == "got-term" })
	if r := leased(t, s.url, "get", "hungup"); r.code != cli.ExitNotFound {
		t.Fatalf("get after run's SIGHUP: exit %d %s, want %d: released", r.code, r.stdout, cli.ExitNotFound)
	}
}

// A candidate stopped (SIGTERM) while another leads says it never led
// and its command never ran, not "context canceled".
func TestElectStoppedWhileWaiting(t *testing.T) {
	s := startServe(t, "")
	leader := exec.Command(leasedBin, "elect", "leader.wait", "--url", s.url, "--", "sh", "-c", `echo leading; exec sleep 60`)
	out, _ := leader.StdoutPipe()
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Process.Kill(); _ = leader.Wait() })
	readLines(out).wait(t, 10*time.Second, func(l string) bool { return l == "leading" })
	waiting := exec.Command(leasedBin, "elect", "leader.wait", "--url", s.url, "--verbose", "--", "true")
	errPipe, _ := waiting.StderrPipe()
	if err := waiting.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiting.Process.Kill(); _ = waiting.Wait() })
	logs := readLines(errPipe)
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "taking the lease") })
	if err := waiting.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := waitExit(waiting, 10*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("waiting candidate stopped: %v, stderr %q; want exit 1", err, logs.text())
	}
	logs.wait(t, 10*time.Second, func(l string) bool {
		return strings.Contains(l, "stopped before leader.wait was held: the command did not run")
	})
}

// `leased advise` prints the documented scenario's advice (golden file in
// kvlease/testdata) and refuses incomplete input.
func TestAdvise(t *testing.T) {
	r := leased(t, "", "advise", "--work-p99", "45s", "--rtt-p99", "180ms", "--pause-p99", "1500ms")
	want, err := os.ReadFile("../../kvlease/testdata/advise-wan-worker.golden")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || r.stdout != string(want) {
		t.Fatalf("advise: exit %d\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	if r := leased(t, "", "advise", "--work-p99", "1s"); r.code != 2 {
		t.Fatalf("advise without --rtt-p99: exit %d", r.code)
	}
	// A negative measurement is refused naming its flag (it said only
	// "measurements cannot be negative"; found by an outside client).
	for flag, v := range map[string]string{"--work-p99": "-1s", "--pause-p99": "-1ms"} {
		if r := leased(t, "", "advise", "--rtt-p99", "3ms", flag, v); r.code != 2 || !strings.Contains(r.stderr, flag+": ") {
			t.Errorf("advise %s %s: exit %d, stderr %q; want 2 naming the flag", flag, v, r.code, r.stderr)
		}
	}
	// A clock-rate error is signed (Clock().Estimate's rate is negative
	// for a grantor clock slower than the holder's): it is advised on as
	// the error it is, as kvlease.Advise does, not refused as a negative
	// measurement (found by an outside client).
	slow := leased(t, "", "advise", "--rtt-p99", "1ms", "--pause-p99", "740ms", "--clock-rate", "-0.009", "-o", "json")
	fast := leased(t, "", "advise", "--rtt-p99", "1ms", "--pause-p99", "740ms", "--clock-rate", "0.009", "-o", "json")
	figures := func(out string) map[string]any {
		var m map[string]any
		if json.Unmarshal([]byte(out), &m) != nil {
			return nil
		}
		delete(m, "reasons")
		return m
	}
	if slow.code != 0 || fast.code != 0 || figures(slow.stdout) == nil || !reflect.DeepEqual(figures(slow.stdout), figures(fast.stdout)) {
		t.Errorf("advise --clock-rate -0.009: exit %d\n%s%s\nwant the advice for 0.009:\n%s", slow.code, slow.stdout, slow.stderr, fast.stdout)
	}
	if r := leased(t, "", "advise", "--rtt-p99", "3ms", "--clock-rate", "-0.01"); r.code != 2 || !strings.Contains(r.stderr, "--clock-rate -0.01:") {
		t.Errorf("advise --clock-rate -0.01: exit %d, stderr %q; want 2, naming the figure given", r.code, r.stderr)
	}
	// Measurements no lease can absorb give no advice, and a clock rate
	// that is no number is bad input (both were advised: ρ 0.5, "+Inf";
	// found by an outside client). Without --work-p99, nothing is said of
	// a work unit (it said "a work unit (0s)").
	for _, rate := range []string{"0.05", "NaN", "Inf"} {
		if r := leased(t, "", "advise", "--rtt-p99", "3ms", "--clock-rate", rate); r.code != 2 || r.stdout != "" {
			t.Errorf("advise --clock-rate %s: exit %d, stdout %q, stderr %q; want 2 and no advice", rate, r.code, r.stdout, r.stderr)
		}
	}
	// The refusal names the figure given: a measurement of 2 was refused
	// as "clock-rate bound 20" (found by an outside client).
	if r := leased(t, "", "advise", "--rtt-p99", "3ms", "--clock-rate", "2"); r.code != 2 || !strings.Contains(r.stderr, "--clock-rate 2:") ||
		strings.Contains(r.stderr, "20") {
		t.Errorf("advise --clock-rate 2: exit %d, stderr %q; want 2, naming the figure given", r.code, r.stderr)
	}
	if r := leased(t, "", "advise", "--rtt-p99", "3ms"); r.code != 0 || strings.Contains(r.stdout, "work unit") {
		t.Errorf("advise without --work-p99: exit %d\n%s", r.code, r.stdout)
	}
	// From an outside client: -o took any value and printed text; a round
	// trip of 500,000 h overflowed to advice of 1 s; measurements a longer
	// D absorbs were refused at the first D tried.
	for _, args := range [][]string{{"--rtt-p99", "3ms", "-o", "yaml"}, {"--rtt-p99", "500000h"}, {"--rtt-p99", "3ms", "--pause-p99", "2h"}} {
		if r := leased(t, "", append([]string{"advise"}, args...)...); r.code != 2 || r.stdout != "" {
			t.Errorf("advise %v: exit %d, stdout %q, stderr %q; want 2 and no advice", args, r.code, r.stdout, r.stderr)
		}
	}
	// The figure over the bound is the one named: a --work-p99 over it
	// was refused as "--rtt-p99 and --pause-p99 over 1h0m0s" (found by
	// an outside client, s25d).
	for _, args := range [][]string{{"--rtt-p99", "2h"}, {"--rtt-p99", "3ms", "--pause-p99", "2h"}, {"--rtt-p99", "3ms", "--work-p99", "1000000h"}} {
		flag := args[len(args)-2]
		if r := leased(t, "", append([]string{"advise"}, args...)...); r.code != 2 || !regexp.MustCompile(`leased: `+flag+` \S+: over `).MatchString(r.stderr) {
			t.Errorf("advise %v: exit %d, stderr %q; want 2, naming %s", args, r.code, r.stderr, flag)
		}
	}
	if r := leased(t, "", "advise", "--rtt-p99", "1ms", "--pause-p99", "740ms", "--clock-rate", "0.009"); r.code != 0 ||
		!strings.Contains(r.stdout, "more for ρ") {
		t.Errorf("advise with ρ 0.09: exit %d\n%s%s\nwant a D grown for ρ", r.code, r.stdout, r.stderr)
	}
}

// Bad input to client commands is exit 2 with a message that names it,
// before anything is sent (the URL here leads nowhere) and without a
// password from the URL.
func TestClientBadInputNeedsNoServer(t *testing.T) {
	const nowhere = "nats://127.0.0.1:1"
	// Files nats.go cannot use: junk, and credentials with a JWT but no
	// seed (refused only when the server asked for a signature).
	junk, noSeed := filepath.Join(t.TempDir(), "junk"), filepath.Join(t.TempDir(), "noseed.creds")
	if err := os.WriteFile(junk, []byte("not a PEM file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noSeed, []byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.c2ln\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url  string
		args []string
		want string
	}{
		{"nats://me:s3cret@::bad::url", []string{"ls"}, "NATS URL nats://me:xxxxx@::bad::url"},
		// A URL parser ends the host at '#', '?' or '/', and its error
		// quoted the password's pieces (found by an outside client).
		{"tls://app:s3cret#1@127.0.0.1:1", []string{"ls"}, "write them %23"},
		{"tls://app:Pa@s3cret/Wd1@127.0.0.1:1", []string{"ls"}, "write them %23"},
		// A file the command cannot use is named, as bad input (exit 2),
		// not "grantor unavailable".
		{nowhere, []string{"ls", "--tls-ca", junk}, "--tls-ca"},
		{nowhere, []string{"ls", "--tls-ca", junk + ".missing"}, "--tls-ca"},
		{nowhere, []string{"ls", "--tls-cert", junk, "--tls-key", junk}, "--tls-cert/--tls-key"},
		{nowhere, []string{"ls", "--creds", junk}, "--creds"},
		{nowhere, []string{"ls", "--creds", noSeed}, "--creds"},
		{nowhere, []string{"ls", "--creds", noSeed, "--user", "app"}, "--creds is a user's whole credential"},
		{nowhere, []string{"ls", "a b"}, "invalid lease name"},
		{nowhere, []string{"ls", "*"}, "invalid lease name"},
		{nowhere, []string{"get", "a b"}, "invalid lease name"},
		{nowhere, []string{"revoke", "a b"}, "invalid lease name"},
		{nowhere, []string{"acquire", "a b"}, "invalid lease name"},
		{nowhere, []string{"elect", "a b", "--", "true"}, "invalid lease name"},
		{nowhere, []string{"run", "--lease", "a b", "--", "true"}, "invalid lease name"},
		// Not taken for the default holder (it acquired as HOST-PID).
		{nowhere, []string{"acquire", "x", "--holder", ""}, "invalid holder: empty"},
		{nowhere, []string{"elect", "x", "--holder", "", "--", "true"}, "invalid holder: empty"},
		// Nor is one the grant would refuse: refused only by the grant,
		// it said "grantor unavailable", exit 1 (found by an outside client).
		{nowhere, []string{"acquire", "x", "--holder", strings.Repeat("h", 2000)}, "invalid holder: 2000 bytes, at most 255"},
		{nowhere, []string{"run", "--lease", "x", "--holder", strings.Repeat("h", 2000), "--", "true"}, "invalid holder: 2000 bytes, at most 255"},
		{nowhere, []string{"elect", "x", "--holder", strings.Repeat("h", 2000), "--", "true"}, "invalid holder: 2000 bytes, at most 255"},
		{nowhere, []string{"elect", "x", "--holder", " web-1", "--", "true"}, "begins or ends with a space"},
		// The TTL is named, not the grace it leaves no room for.
		{nowhere, []string{"run", "--lease", "x", "--ttl", "0s", "--", "true"}, "--ttl 0s: want a positive"},
		{nowhere, []string{"elect", "x", "--ttl", "-5s", "--", "true"}, "--ttl -5s: want a positive"},
		{nowhere, []string{"run", "--lease", "x", "--ttl", "100ms", "--", "true"}, "--ttl 100ms is too short"},
		{"nats://127.0.0.1:99999", []string{"ls"}, "port"},
		// nats.go dials any scheme but tls and wss in plain TCP: https://
		// connected without TLS, the password in the clear.
		{"https://app:s3cret@127.0.0.1:1", []string{"ls"}, `scheme "https"`},
		{"nats://127.0.0.1:1,http://127.0.0.1:1", []string{"ls"}, `scheme "http"`},
		// A URL without a host, and a registration without its address,
		// are named as such (they said "grantor unavailable", exit 1, and
		// `addr "": want HOST:PORT: missing port`; found by an outside client).
		{"nats://", []string{"ls"}, "no host"},
		{nowhere, []string{"register", "web", "i3"}, "--addr HOST:PORT is required"},
		{nowhere, []string{"register", "web", "i3", "--addr", "127.0.0.1:80", "--gossip-seeds", "nonsense"}, "want host:port"},
		{nowhere, []string{"register", "web", "i3", "--addr", "127.0.0.1:80", "--meta", "novalue"}, `--meta "novalue"`},
		// A grantor elsewhere would probe it at its own 127.0.0.1.
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-seeds", "10.0.0.1:7946"}, "need --gossip-listen"},
		{"", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--gossip-listen", "localhost:7946"}, "want an IP address"},
		{nowhere, []string{"bench", "--prefix", "_leased", "--ops", "1"}, "the grantor's own"},
		// ls and watch leave the grantor's own leases out: under their
		// prefix they printed nothing, watch for good (found by an
		// outside client).
		{nowhere, []string{"watch", "_leased."}, "the grantor's own"},
		{nowhere, []string{"ls", "_leased.obs"}, "the grantor's own"},
		// So does history: it printed an empty table, exit 0 (s21b).
		{nowhere, []string{"history", "_leased."}, "the grantor's own"},
		// A bucket name no stream can have is bad input, as history says
		// (status and bench --compare said "grantor unavailable", exit 1).
		{nowhere, []string{"status", "--bucket", "a b"}, "--bucket: invalid option"},
		{nowhere, []string{"status", "--bucket", ""}, "--bucket: invalid option"},
		{nowhere, []string{"bench", "--compare", "1", "--ops", "1", "--bucket", "x.y"}, "--bucket: invalid option"},
		// Checked once connected, they said "grantor unavailable", exit 1
		// (found by an outside client).
		{nowhere, []string{"watch", "--bucket", "a b"}, "--bucket: invalid option"},
		{nowhere, []string{"watch", "a*"}, `prefix "a*"`},
		{nowhere, []string{"elect", "x", "--bucket", "a b", "--", "true"}, "--bucket: invalid option"},
		{"", []string{"dev-cluster", "--port", "-5", "--data", t.TempDir()}, "--port -5"},
		{"", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--name", "x", "--cluster-name", "solo",
			"--cluster-listen", "127.0.0.1:0"}, "--cluster-name needs --routes"},
		{"", []string{"dev-cluster", "--cluster-port", "70000", "--data", t.TempDir()}, "--cluster-port 70000"},
		// From an outside client: standalone and R1, silently; and run
		// given elect's form.
		{"", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--name", "x",
			"--cluster-listen", "127.0.0.1:0"}, "--cluster-listen needs --cluster-name"},
		{nowhere, []string{"run", "x.two", "--", "echo", "hi"}, "--lease NAME"},
		// An empty command: they took the lease, then could not start
		// it, exit 126 (found by an outside client).
		{nowhere, []string{"run", "--lease", "x", "--", ""}, "empty COMMAND"},
		{nowhere, []string{"elect", "x", "--", "", "arg"}, "empty COMMAND"},
		// Gossip that no grantor would hear of, and a --node that names
		// nothing (they registered all the same; found by an outside
		// client).
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-listen", "127.0.0.1:0"}, "--gossip-listen needs --gossip-seeds"},
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--node", "n1"}, "--node names this instance's gossip member"},
		// Gossip flags it cannot use, gossip off: it registered all the
		// same (serve refuses them; found by an outside client).
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-profile", "wan"}, `--gossip-profile "wan"`},
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-key-file", "/nonexistent/key"}, "--gossip-key-file"},
		// A gossip member name too long, the default one of a long
		// instance name included, names --node (it said "invalid config:
		// node name is 130 bytes", once connected; an outside client).
		// 124 bytes: web-INSTANCE-PID is over 128 whatever the PID (with 120,
		// a PID below 1000, as the machine's PIDs wrap at 32768, made it
		// 128, valid, and the case failed in CI).
		{nowhere, []string{"register", "web", strings.Repeat("y", 124), "--addr", "10.0.0.7:80", "--gossip-seeds", "127.0.0.1:1"}, "give a shorter --node"},
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-seeds", "127.0.0.1:1", "--node", strings.Repeat("n", 129)}, "give a shorter --node"},
		// Not "shorter" for a name of 3 bytes (found by an outside client).
		{nowhere, []string{"register", "web", "i3", "--addr", "10.0.0.7:80", "--gossip-seeds", "127.0.0.1:1", "--node", "a\x1bb"}, "unprintable character: give another --node"},
		{"", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--name", strings.Repeat("g", 129)},
			"(the gossip member name"},
		// The URL's user was used and --user ignored (found by an outside
		// client).
		{"nats://operator:s3cret@127.0.0.1:1", []string{"ls", "--user", "app"}, "carries credentials, and so do --user"},
		{"", []string{"dev-cluster", "--host", "10.1.2.3", "--data", t.TempDir()}, "loopback"},
	} {
		r := leased(t, c.url, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "s3cret") {
			t.Errorf("leased %v (url %q): exit %d, stderr %q; want 2 and %q, no password", c.args, c.url, r.code, r.stderr, c.want)
		}
	}
	// serve checks its client flags before it starts its server (which
	// made the data directory and logged its warnings first).
	data := filepath.Join(t.TempDir(), "data")
	if r := leased(t, "", "serve", "--data", data, "--listen", "127.0.0.1:0", "--tls-cert", junk); r.code != 2 ||
		!strings.Contains(r.stderr, "--tls-cert and --tls-key go together") {
		t.Errorf("serve --tls-cert without --tls-key: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve refused its flags after making its data directory: %v", err)
	}
}

// `leased elect` writes the bucket directly, yet grants as the service
// does: serve records its --grantor-margin and --min-ttl/--max-ttl on the
// bucket, and elect's store follows them (it used its own defaults: a
// shorter margin, and durations the service refuses).
func TestElectFollowsTheServersPolicy(t *testing.T) {
	s := startServe(t, "", "--grantor-margin", "5s", "--min-ttl", "20s", "--default-ttl", "20s")
	if r := leased(t, s.url, "elect", "policy.e", "--ttl", "2s", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "out of range") {
		t.Fatalf("elect --ttl 2s under --min-ttl 20s: exit %d, stderr %q; want 2, out of range", r.code, r.stderr)
	}
	// The command prints the leadership's lease as the grantor stored it.
	r := leased(t, s.url, "elect", "policy.e", "--ttl", "20s", "--", leasedBin, "get", "policy.e", "--url", s.url, "-o", "json")
	var l api.Lease
	if err := json.Unmarshal([]byte(r.stdout), &l); r.code != 0 || err != nil || time.Duration(l.ServerTTL) != 25*time.Second {
		t.Fatalf("elect --ttl 20s: exit %d, stdout %q (%v), stderr %q; want server_ttl 25s (20 s and serve's 5 s margin)", r.code, r.stdout, err, r.stderr)
	}
}

// A duration the grantor's policy refuses names --ttl, with exit 2:
// acquire and register said only "duration out of range" (found by an
// outside client). It says so in the same words whether the service
// refused it or the bucket's policy (elect): run said "ttl_out_of_range:
// duration out of range", elect "duration out of range" (found by an
// outside client).
func TestTTLOutOfRangeNamesTheFlag(t *testing.T) {
	s := startServe(t, "")
	const want = "leased: --ttl: duration out of range: 100h0m0s not in [1s, 1h0m0s]\n"
	for _, args := range [][]string{
		{"acquire", "ttl.flag", "--ttl", "100h"},
		{"register", "web", "ttl1", "--addr", "127.0.0.1:80", "--ttl", "100h"},
		{"run", "--lease", "ttl.flag", "--ttl", "100h", "--", "true"},
		{"elect", "ttl.flag", "--ttl", "100h", "--", "true"},
	} {
		if r := leased(t, s.url, args...); r.code != 2 || r.stderr != want {
			t.Errorf("%v: exit %d, stderr %q; want 2, %q", args, r.code, r.stderr, want)
		}
	}
}

// --timeout bounds the whole wait, connecting included: servers that
// accept connections and never answer (as a paused one does) use it up
// together, not each its own --timeout before the request's.
func TestTimeoutBoundsConnecting(t *testing.T) {
	stuck := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // the kernel accepts; nothing ever answers
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return "nats://" + ln.Addr().String()
	}
	start := time.Now()
	r := leased(t, stuck()+","+stuck(), "ls", "--timeout", "3s")
	if took := time.Since(start); r.code != 1 || took > 4*time.Second || !strings.Contains(r.stderr, "no NATS server answered in time") {
		t.Fatalf("ls against two silent servers: exit %d after %v (stderr %q); want 1 within about 3 s, saying no server answered", r.code, took, r.stderr)
	}
	s := startServe(t, "")
	start = time.Now()
	if r := leased(t, stuck()+","+s.url, "ls", "--timeout", "3s"); r.code != 0 || time.Since(start) > 4*time.Second {
		t.Fatalf("ls with a silent server and a live one: exit %d after %v (stderr %q); want 0 within about 3 s", r.code, time.Since(start), r.stderr)
	}
}

// acquire --hold hears a revocation at once too (the service's change
// events), not at its next renewal 10 s after the grant of a 30 s lease,
// and frees the lease as it exits.
func TestAcquireHoldLosesOnRevokeAtOnce(t *testing.T) {
	s := startServe(t, "")
	hold := exec.Command(leasedBin, "acquire", "held.r", "--hold", "--ttl", "30s", "--url", s.url)
	out, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	readLines(out).wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "held.r") })
	if r := leased(t, s.url, "revoke", "held.r"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	err := waitExit(hold, 3*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitLost {
		t.Fatalf("acquire --hold after a revocation: %v; want exit %d within 3 s", err, cli.ExitLost)
	}
	// The revocation held the lease until the holder's deadline, 30 s
	// away; acquire --hold, which runs nothing under it, released it as it
	// exited: it is free now (it stayed held for the 30 s).
	if r := leased(t, s.url, "acquire", "held.r", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after acquire --hold lost it: exit %d %s, want the lease free", r.code, r.stderr)
	}
}

// revoke says the lease stays held only when the grantor says it does
// (the reply's held_back_ms): a grantor older than the revocation hold
// frees a revoked lease at once, and revoke said "held until that holder's
// deadline has passed" all the same, while the next grant went through at
// once (found trying an upgrade: a new CLI against an older grantor). The
// older grantor is stood in for by its reply, as it answered then.
func TestRevokeThroughAnOlderGrantorClaimsNoHold(t *testing.T) {
	url := kvleasetest.NewServer(t).ClientURL()
	nc := kvleasetest.Connect(t, url)
	kvleasetest.Subscribe(t, nc, api.SubjectRevoke, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"name":"old.r","holder":"zz","token":185,"revision":185,"ttl":"1m0s","server_ttl":"1m1s",` +
			`"stored_at":"2026-12-07T18:28:09.803787045Z","granted_at":"2026-12-07T18:28:09.803787045Z",` +
			`"expires_at":"2026-12-07T18:29:10.803787045Z","server_time":"2026-12-07T18:28:18.002440212Z","node":"vm"}`))
	})
	r := leased(t, url, "revoke", "old.r")
	if r.code != 0 || !strings.Contains(r.stdout, "this grantor did not say whether it holds the lease") {
		t.Fatalf("revoke through a grantor that does not say whether it holds: exit %d, %q %q; want it said it did not say", r.code, r.stdout, r.stderr)
	}
	s := startServe(t, "")
	if r := leased(t, s.url, "acquire", "new.r", "--ttl", "30s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := leased(t, s.url, "revoke", "new.r"); r.code != 0 || !strings.Contains(r.stdout, "held until that holder's deadline has passed") {
		t.Fatalf("revoke through this grantor: exit %d, %q %q; want it said held", r.code, r.stdout, r.stderr)
	}
}

// A run paused past its command's deadline (SIGSTOP of run alone) learns
// of the loss only when it resumes; its command, in a group of its own,
// ran on until then (the guard now kills it at the deadline:
// TestRunStoppedStopsItsCommandAtItsDeadline), and run then killed it at
// once: its deadline long gone, no grace is left (it gave the command a
// full --grace more, during which an outside client saw the old command
// write beside the new leader's).
func TestRunPausedPastItsDeadlineKillsAtOnce(t *testing.T) {
	s := startServe(t, "")
	const grace = 2 * time.Second
	p := startRun(t, s.url, "--lease", "paused", "--ttl", "10s", "--grace", grace.String(), "--",
		"sh", "-c", `trap "" TERM; exec sleep 600`) // ignores SIGTERM: only SIGKILL stops it
	deadline := p.deadline(t)
	kvleasetest.StopProcess(t, p.cmd.Process)
	time.Sleep(time.Until(deadline.Add(500 * time.Millisecond))) // until an instant the lease set, not a hope
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	err := waitExit(p.cmd, 2*grace)
	took := time.Since(resumed)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+9 {
		t.Fatalf("run exit: %v, want 137 (the command's SIGKILL)\n%s", err, p.logs.text())
	}
	if took > grace/2 {
		t.Errorf("command killed %v after run resumed past its deadline, want at once (grace %v)\n%s", took, grace, p.logs.text())
	}
}

// What acquire and renew print is what the next renew needs: a write that
// fails (a full disk, a reader gone) is a failure, not exit 0 with the
// grant's secret gone, and acquire gives back the lease no one can renew or
// release (it stayed held for its TTL). A reader gone is a closed pipe:
// `acquire -o json | (exit 0)` was killed by SIGPIPE, Go's default for a
// write to stdout, before it could release (found by an outside client).
func TestLeaseOutputThatCannotBeWritten(t *testing.T) {
	s := startServe(t, "")
	sinks := map[string]func(t *testing.T) *os.File{
		"full": func(t *testing.T) *os.File {
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Skipf("no /dev/full: %v", err)
			}
			return full
		},
		"closed-pipe": func(t *testing.T) *os.File {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			return w
		},
	}
	for sink, open := range sinks {
		t.Run(sink, func(t *testing.T) {
			toSink := func(args ...string) (int, string) {
				t.Helper()
				out := open(t)
				defer out.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, leasedBin, append(args, "--url", s.url)...)
				var stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = out, &stderr
				err := cmd.Run()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatal(err)
				}
				return cmd.ProcessState.ExitCode(), stderr.String()
			}
			name := func(n string) string { return sink + "." + n }
			if code, stderr := toSink("acquire", name("a"), "--ttl", "30s", "-o", "json"); code != cli.ExitError || !strings.Contains(stderr, "writing the grant") {
				t.Errorf("acquire -o json > %s: exit %d, stderr %q; want %d, writing the grant", sink, code, stderr, cli.ExitError)
			}
			if r := leased(t, s.url, "acquire", name("a"), "--ttl", "30s"); r.code != 0 {
				t.Errorf("acquire after one that could not print its grant: exit %d %s; want the lease free", r.code, r.stderr)
			}
			r := leased(t, s.url, "acquire", name("b"), "--ttl", "30s", "-o", "json")
			if r.code != 0 {
				t.Fatal(r.stderr)
			}
			file := filepath.Join(t.TempDir(), "lease.json")
			if err := os.WriteFile(file, []byte(r.stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, stderr := toSink("renew", name("b"), "--lease-file", file, "-o", "json"); code != cli.ExitError || !strings.Contains(stderr, "to revision") ||
				!strings.Contains(stderr, "and --revision") {
				t.Errorf("renew -o json > %s: exit %d, stderr %q; want %d, naming the new revision", sink, code, stderr, cli.ExitError)
			}
			// --hold too: it held and renewed the lease until interrupted,
			// its token printed nowhere.
			if code, stderr := toSink("acquire", name("c"), "--ttl", "30s", "--hold", "-o", "json"); code != cli.ExitError || !strings.Contains(stderr, "writing the grant") {
				t.Errorf("acquire --hold -o json > %s: exit %d, stderr %q; want %d, writing the grant", sink, code, stderr, cli.ExitError)
			}
			if r := leased(t, s.url, "acquire", name("c"), "--ttl", "30s"); r.code != 0 {
				t.Errorf("acquire after an --hold that could not print its grant: exit %d %s; want the lease free", r.code, r.stderr)
			}
		})
	}
}
