package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// startGossipServe runs `leased serve` with gossip on a free port (fast
// gossip profile: a silent node is suspect within a second and declared dead
// within about three).
func startGossipServe(t *testing.T) (*server, string) {
	t.Helper()
	gossip := "127.0.0.1:" + itoa(kvleasetest.FreePort(t))
	s := startServeWith(t, timingBin(t), "", "--name", "grantor-1", "--gossip-listen", gossip, "--gossip-profile", "fast")
	return s, gossip
}

func itoa(n int) string { return strconv.Itoa(n) }

// startRegister runs `leased register` for web/inst, joined to gossip (if
// seed is not empty), and waits until discovery shows it.
func startRegister(t *testing.T, url, seed, inst, ttl string) *exec.Cmd {
	t.Helper()
	args := []string{"register", "web", inst, "--addr", "127.0.0.1:8080", "--ttl", ttl, "--url", url, "-o", "json"}
	if seed != "" {
		args = append(args, "--gossip-seeds", seed, "--gossip-profile", "fast")
	}
	return startRegistered(t, args, inst)
}

// startRegistered runs `leased register` with args (-o json among them)
// and waits until it says inst is registered.
func startRegistered(t *testing.T, args []string, inst string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(timingBin(t), args...)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	readLines(out).wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, `"instance":"`+inst+`"`) })
	return cmd
}

func discover(t *testing.T, url string) api.DiscoverReply {
	t.Helper()
	r := leased(t, url, "discover", "web", "-o", "json")
	var rep api.DiscoverReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("discover: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	return rep
}

func instance(rep api.DiscoverReply, inst string) (api.Instance, bool) {
	for _, in := range rep.Instances {
		if in.Instance == inst {
			return in, true
		}
	}
	return api.Instance{}, false
}

// A registered instance process killed with SIGKILL disappears from
// discovery within seconds, removed on gossip's word (cause "gossip"), long
// before its 30 s TTL. LEASED_LONG=1 runs 10 trials instead of 3.
func TestRegistrationRemovedWhenGossipDeclaresDead(t *testing.T) {
	s, gossip := startGossipServe(t)
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	w, err := st.Watch(t.Context(), api.RegistrationPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	trials := 3
	if longTests() {
		trials = 10
	}
	var took []time.Duration
	for i := range trials {
		inst := "k" + itoa(i)
		reg := startRegister(t, s.url, gossip, inst, "30s")
		if in, ok := instance(discover(t, s.url), inst); !ok || !in.Gossip || in.Suspect {
			t.Fatalf("discovery before the kill: %+v (found %v)", in, ok)
		}
		killed := time.Now()
		if err := reg.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ev := nextEventOf(t, w, 10*time.Second, "svc.web."+inst)
		d := time.Since(killed)
		if ev.Type != kvlease.EventRevoked || !strings.HasPrefix(ev.Reason, "gossip") {
			t.Fatalf("registration ended by %v (%q), want a gossip revocation", ev.Type, ev.Reason)
		}
		if _, ok := instance(discover(t, s.url), inst); ok {
			t.Fatal("still in discovery after the gossip revocation")
		}
		took = append(took, d)
	}
	t.Logf("removed after SIGKILL in %v (p50 %v, max %v)", took, percentile(took, 0.5), percentile(took, 1))
	if m := percentile(took, 1); m > 5*time.Second {
		t.Fatalf("slowest removal %v, want within 5 s", m)
	}
}

// A second `register` of a live instance, with the same --node, is
// refused (held) and leaves the live one registered. It joined gossip
// before its grant and left when refused, and the grantor took the node
// for dead and removed the live registration (found by an outside client).
func TestDuplicateRegisterLeavesTheLiveOne(t *testing.T) {
	s, gossip := startGossipServe(t)
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	w, err := st.Watch(t.Context(), "svc.web.d1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	args := []string{"register", "web", "d1", "--addr", "127.0.0.1:8080", "--ttl", "30s", "--url", s.url,
		"--node", "dn", "--gossip-seeds", gossip, "--gossip-profile", "fast"}
	startRegistered(t, append(args, "-o", "json"), "d1")
	if r := leased(t, "", args...); r.code != 3 {
		t.Fatalf("the second register: exit %d %s, want 3 (held)", r.code, r.stderr)
	}
	// The fast profile declares a node dead within about 3 s of its
	// leaving: a removal would come well within 8.
	quiet := time.After(8 * time.Second)
	for {
		select {
		case ev := <-w.Events():
			if ev.Type.Ends() {
				t.Fatalf("the live registration ended (%v, %q) after a refused duplicate", ev.Type, ev.Reason)
			}
		case <-quiet:
			if in, ok := instance(discover(t, s.url), "d1"); !ok || in.Suspect {
				t.Fatalf("d1 in discovery: %+v (found %v), want it trusted", in, ok)
			}
			return
		}
	}
}

// A second register of a live instance on the live one's fixed
// --gossip-listen is held (exit 3), as with a free port: binding gossip
// before the grant made it exit 1 on the taken port (found in review).
func TestDuplicateRegisterOnItsGossipPortIsHeld(t *testing.T) {
	s, gossip := startGossipServe(t)
	listen := "127.0.0.1:" + itoa(kvleasetest.FreePort(t))
	args := []string{"register", "web", "f1", "--addr", "127.0.0.1:8080", "--ttl", "30s", "--url", s.url,
		"--gossip-seeds", gossip, "--gossip-listen", listen, "--gossip-profile", "fast"}
	startRegistered(t, append(args, "-o", "json"), "f1")
	if r := leased(t, "", args...); r.code != 3 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("the second register on the live one's gossip port: exit %d %s, want 3 (held) naming the port in use", r.code, r.stderr)
	}
}

// A register whose gossip address is taken fails before it is granted:
// it bound its gossip port after the grant, so the registration showed in
// discovery until the failure released it.
func TestRegisterWithGossipPortTakenIsNeverGranted(t *testing.T) {
	s, gossip := startGossipServe(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	r := leased(t, s.url, "register", "web", "b1", "--addr", "127.0.0.1:8080", "--ttl", "30s",
		"--gossip-seeds", gossip, "--gossip-listen", taken.Addr().String(), "--gossip-profile", "fast")
	if r.code == 0 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--gossip-listen "+taken.Addr().String()) {
		t.Fatalf("register on a taken gossip port: exit %d %s, want a failure naming --gossip-listen and the port", r.code, r.stderr)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.url))
	stream, err := js.Stream(t.Context(), "KV_leases")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.GetLastMsgForSubject(t.Context(), "$KV.leases.svc.web.b1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the lease was written (%v, %v): granted before gossip failed", m, err)
	}
}

func nextEventOf(t *testing.T, w *kvlease.Watcher, timeout time.Duration, name string) kvlease.Event {
	t.Helper()
	tm := time.After(timeout)
	for {
		select {
		case ev := <-w.Events():
			if ev.Name == name && ev.Type.Ends() {
				return ev
			}
		case <-tm:
			t.Fatalf("%s did not end within %v", name, timeout)
		}
	}
}

// A paused instance (SIGSTOP) becomes suspect in discovery while its lease
// is still valid, and after SIGCONT it is trusted again, with the same
// registration (no re-registering).
func TestPausedInstanceSuspectThenRecovers(t *testing.T) {
	s, gossip := startGossipServe(t)
	reg := startRegister(t, s.url, gossip, "p1", "30s")
	before, _ := instance(discover(t, s.url), "p1")
	if err := reg.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	suspect := waitInstance(t, s.url, "p1", func(in api.Instance) bool { return in.Suspect })
	took := time.Since(stopped)
	if err := reg.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !time.Now().Before(suspect.ExpiresAt) {
		t.Fatal("the lease lapsed before the instance was suspected")
	}
	recovered := waitInstance(t, s.url, "p1", func(in api.Instance) bool { return !in.Suspect })
	if recovered.Token != before.Token {
		t.Fatalf("token %d after recovery, %d before: it re-registered", recovered.Token, before.Token)
	}
	t.Logf("suspect (%.1f ≥ %.0f) %v after SIGSTOP; trusted again after SIGCONT (suspicion %.1f), same token %d",
		suspect.Suspicion, discover(t, s.url).Threshold, took.Round(time.Millisecond), recovered.Suspicion, recovered.Token)
}

// waitInstance asks discovery until inst satisfies ok. Suspicion changes
// continuously inside the grantor; discovery is how a client sees it, so
// this asks every 50 ms (there is no event on the client side to wait on).
func waitInstance(t *testing.T, url, inst string, ok func(api.Instance) bool) api.Instance {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if in, found := instance(discover(t, url), inst); found && ok(in) {
			return in
		} else if !found {
			t.Fatalf("%s left discovery", inst)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: condition not reached", inst)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With a gossip key (LEASED_GOSSIP_KEY, or --gossip-key-file), the
// grantor's gossip is encrypted and authenticated: an instance with the
// key registers and is watched by gossip; one with another key cannot
// join (nor, without one, declare members dead, as an outside client did
// with one UDP packet). A malformed key is bad input, and not printed.
func TestGossipKey(t *testing.T) {
	const key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes
	t.Setenv("LEASED_GOSSIP_KEY", key)
	s, gossip := startGossipServe(t)
	startRegister(t, s.url, gossip, "keyed", "30s")
	if in, ok := instance(discover(t, s.url), "keyed"); !ok || !in.Gossip {
		t.Fatalf("an instance with the key: %+v (found %v), want it watched by gossip", in, ok)
	}
	other := t.TempDir() + "/other.key"
	if err := os.WriteFile(other, []byte("ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := leased(t, s.url, "register", "web", "stranger", "--addr", "127.0.0.1:8080", "--gossip-seeds", gossip,
		"--gossip-profile", "fast", "--gossip-key-file", other)
	if r.code == 0 || !strings.Contains(r.stderr, "join") || !strings.Contains(r.stderr, "--gossip-key-file or LEASED_GOSSIP_KEY") {
		t.Fatalf("register with another key: exit %d, stderr %q; want a failed join, saying the key is not the seeds'", r.code, r.stderr)
	}
	// Without a key, where the seeds have one; and a seed that is not
	// there, whose failure says which flag gave it and nothing of keys.
	t.Setenv("LEASED_GOSSIP_KEY", "")
	r = leased(t, s.url, "register", "web", "keyless", "--addr", "127.0.0.1:8080", "--gossip-seeds", gossip, "--gossip-profile", "fast")
	if r.code == 0 || !strings.Contains(r.stderr, "--gossip-key-file or LEASED_GOSSIP_KEY") {
		t.Fatalf("register without the seeds' key: exit %d, stderr %q; want a failed join, saying the key is not the seeds'", r.code, r.stderr)
	}
	closed := "127.0.0.1:" + itoa(kvleasetest.FreePort(t))
	r = leased(t, s.url, "register", "web", "lonely", "--addr", "127.0.0.1:8080", "--gossip-seeds", closed, "--gossip-profile", "fast")
	if r.code == 0 || !strings.Contains(r.stderr, "--gossip-seeds "+closed) || strings.Contains(r.stderr, "key") {
		t.Fatalf("register with a seed that is not there: exit %d, stderr %q; want a failed join naming --gossip-seeds", r.code, r.stderr)
	}
	t.Setenv("LEASED_GOSSIP_KEY", key)
	t.Setenv("LEASED_GOSSIP_KEY", "secret-not-base64")
	r = leased(t, s.url, "register", "web", "bad", "--addr", "127.0.0.1:8080", "--gossip-seeds", gossip)
	if r.code != 2 || !strings.Contains(r.stderr, "LEASED_GOSSIP_KEY") || strings.Contains(r.stderr, "secret-not-base64") {
		t.Fatalf("a malformed key: exit %d, stderr %q; want 2 naming the variable, not the key", r.code, r.stderr)
	}
}

// Without gossip, a dead instance's registration still lapses by its TTL.
func TestRegistrationLapsesByTTLWithoutGossip(t *testing.T) {
	s := startServe(t, "")
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	w, err := st.Watch(t.Context(), api.RegistrationPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	reg := startRegister(t, s.url, "", "t1", "2s")
	if in, ok := instance(discover(t, s.url), "t1"); !ok || in.Gossip {
		t.Fatalf("discovery: %+v %v", in, ok)
	}
	killed := time.Now()
	_ = reg.Process.Signal(syscall.SIGKILL)
	ev := nextEventOf(t, w, 10*time.Second, "svc.web.t1")
	if ev.Type != kvlease.EventExpired {
		t.Fatalf("registration ended by %v, want expiry by TTL", ev.Type)
	}
	t.Logf("lapsed by TTL %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// A register whose registration is revoked exits lost and releases it as
// it goes, as acquire --hold does: the revocation's hold (until the
// registration's deadline, 30 s away) kept the instance from registering
// again (found in review).
func TestRegisterReleasesWhatItLost(t *testing.T) {
	s := startServe(t, "")
	args := []string{"register", "web", "rv", "--addr", "127.0.0.1:8080", "--ttl", "30s", "--url", s.url, "-o", "json"}
	reg := startRegistered(t, args, "rv")
	if r := leased(t, s.url, "revoke", "svc.web.rv"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	err := waitExit(reg, 5*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitLost {
		t.Fatalf("register after its revocation: %v; want exit %d within 5 s", err, cli.ExitLost)
	}
	if r := leased(t, s.url, "acquire", "svc.web.rv", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after register lost it: exit %d %s, want the lease free", r.code, r.stderr)
	}
}

// A gossip node name may have spaces (--node): register's line and
// discover's table quote it, as they do a holder's, so that each still
// splits into its fields (they printed node=web 7 lease=… and a NODE
// column of two words; found by an outside client).
func TestRegisterAndDiscoverQuoteANodeWithSpaces(t *testing.T) {
	s, gossip := startGossipServe(t)
	cmd := exec.Command(timingBin(t), "register", "web", "q1", "--addr", "127.0.0.1:8080", "--url", s.url,
		"--gossip-seeds", gossip, "--gossip-profile", "fast", "--node", "web 7")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := readLines(out).wait(t, 20*time.Second, func(l string) bool { return strings.HasPrefix(l, "registered ") })
	if !strings.Contains(line, ` node="web 7" lease=`) {
		t.Errorf("register printed %q; want node=\"web 7\"", line)
	}
	r := leased(t, s.url, "discover", "web")
	if r.code != 0 || !strings.Contains(r.stdout, `  "web 7"  `) {
		t.Fatalf("discover: exit %d, stdout %q, stderr %q; want q1's NODE as \"web 7\"", r.code, r.stdout, r.stderr)
	}
}

// A register whose line cannot be written (its reader gone: `register … |
// (exit 0)`) deregisters and exits 1, as acquire --hold does. It was
// killed by SIGPIPE, registered: the registration stayed for its TTL with
// no one renewing it, and a restart was refused as held meanwhile (found
// by an outside client).
func TestRegisterOutputThatCannotBeWritten(t *testing.T) {
	s := startServe(t, "")
	for _, format := range []string{"text", "json"} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		inst := "closed-" + format
		cmd := exec.Command(leasedBin, "register", "web", inst, "--addr", "127.0.0.1:8080", "--url", s.url, "-o", format)
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = w, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		err = waitExit(cmd, 20*time.Second)
		if code := cmd.ProcessState.ExitCode(); code != cli.ExitError || !strings.Contains(stderr.String(), "deregistered svc.web."+inst) {
			t.Errorf("register -o %s > closed pipe: exit %d (%v), stderr %q; want %d, deregistered", format, code, err, stderr.String(), cli.ExitError)
		}
		if g := leased(t, s.url, "get", "svc.web."+inst); g.code != cli.ExitNotFound {
			t.Errorf("get svc.web.%s after: exit %d, %s; want %d, deregistered", inst, g.code, g.stdout, cli.ExitNotFound)
		}
	}
}

// A discovery whose reply exceeds the NATS server's max_payload says what
// to do about it: it said "narrow the prefix", which discover has none of
// (found by an outside client, with 1000 instances of 1 KiB metadata at
// the default 1 MB).
func TestDiscoverPagesWhatDoesNotFitOneReply(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 8KB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "", "--config", conf)
	meta := "meta.x=" + strings.Repeat("m", 900)
	for i := range 30 { // some 30 KB of instances
		if r := leased(t, s.url, "acquire", "svc.big.i"+fmt.Sprintf("%02d", i), "--ttl", "1m", "--holder", "h"+itoa(i),
			"--attr", "addr=10.0.0.1:80", "--attr", meta); r.code != 0 {
			t.Fatalf("acquire: exit %d %s", r.code, r.stderr)
		}
	}
	// One reply cannot hold them: the service says so, and what to do.
	nc := kvleasetest.Connect(t, s.url)
	msg, err := nc.Request(api.SubjectDiscover, []byte(`{"service":"big"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get(api.HeaderErrorCode); code != api.CodeTooLarge || !strings.Contains(msg.Header.Get(api.HeaderError), "pages (limit)") {
		t.Fatalf("discover of 30 KB at an 8 KB max_payload: code %q, %q; want too_large, saying to ask for pages", code, msg.Header.Get(api.HeaderError))
	}
	// The command pages them: every instance, once, in order. Before, it
	// failed, saying to register with less metadata (found by a review).
	r := leased(t, s.url, "discover", "big", "-o", "json")
	if r.code != 0 {
		t.Fatalf("discover of 30 KB at an 8 KB max_payload: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep api.DiscoverReply
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("discover -o json: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, in := range rep.Instances {
		got = append(got, in.Instance)
	}
	want := make([]string, 30)
	for i := range want {
		want[i] = fmt.Sprintf("i%02d", i)
	}
	if !slices.Equal(got, want) || rep.More {
		t.Errorf("discover: instances %v (more %v), want %v", got, rep.More, want)
	}
}
