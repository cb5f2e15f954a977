package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// docsAuthServer starts a JetStream nats-server whose authorization block is
// the one docs/api.md shows (see docsAuthorization: each user's password is
// password(user)). It returns the server's host:port.
func docsAuthServer(t *testing.T) string {
	t.Helper()
	auth := docsAuthorization(t)
	if n := strings.Count(auth, "-test-password"); n < 4 {
		t.Fatalf("authorization block of docs/api.md has %d users with a password, want app, billing, operator and leased:\n%s", n, auth)
	}
	hostPort, _ := authServer(t, auth)
	return hostPort
}

// authServer starts a JetStream nats-server with the authorization block
// auth, and returns its host:port and a function that gives it another
// block (a config reload, as SIGHUP does).
func authServer(t *testing.T, auth string) (hostPort string, reload func(auth string)) {
	t.Helper()
	ns, reload := startAuthServer(t, auth, nil)
	return strings.TrimPrefix(ns.ClientURL(), "nats://"), reload
}

// startAuthServer is authServer's server, logging to logger if not nil.
func startAuthServer(t *testing.T, auth string, logger natsserver.Logger) (*natsserver.Server, func(auth string)) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	write := func(auth string, port int) {
		body := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n%s\n", port, filepath.Join(dir, "js"), auth)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(auth, -1)
	opts, err := natsserver.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("authorization block: %v\n%s", err, auth)
	}
	opts.NoSigs = true
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if logger != nil {
		ns.SetLogger(logger, false, false)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns, func(auth string) {
		write(auth, ns.Addr().(*net.TCPAddr).Port)
		if err := ns.Reload(); err != nil {
			t.Fatal(err)
		}
	}
}

// Refusals that come after a command has started are reported as such,
// at once: a release denied after SIGTERM (acquire --hold waited 5 s and
// said "unavailable", exit 1), and credentials the server stops accepting
// (reported as a lost connection, or a lost lease, exit 5). Found by an
// outside client.
func TestRefusalsAfterTheStart(t *testing.T) {
	users := func(more string) string {
		return `authorization { users = [
	{ user: leased, password: "leased-pw" }
	{ user: norelease, password: "norelease-pw", permissions: {
		publish: { allow: ["lease.v1.>"], deny: ["lease.v1.release"] }
		subscribe: { allow: ["_INBOX.>", "lease.events.v1.>"] } } }
	{ user: norenew, password: "norenew-pw", permissions: {
		publish: { allow: ["lease.v1.>"], deny: ["lease.v1.renew"] }
		subscribe: { allow: ["_INBOX.>", "lease.events.v1.>"] } } }
	{ user: nokeep, password: "nokeep-pw", permissions: {
		publish: { allow: ["lease.v1.>"], deny: ["lease.v1.renew", "lease.v1.release"] }
		subscribe: { allow: ["_INBOX.>", "lease.events.v1.>"] } } }
	` + more + `
] }`
	}
	hostPort, reload := authServer(t, users(`{ user: temp, password: "temp-pw" }`))
	as := func(user string) string { return "nats://" + user + ":" + user + "-pw@" + hostPort }
	serveOn(t, as("leased")).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })

	// begin starts leased with args as user: its stderr kept, its stdout
	// read as it comes.
	begin := func(user string, args ...string) (*exec.Cmd, *bytes.Buffer, *lines) {
		cmd := exec.Command(leasedBin, append([]string{args[0], "--url", as(user)}, args[1:]...)...) // before run's --
		out, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &stderr, readLines(out)
	}
	hold := func(user, name string) (*exec.Cmd, *bytes.Buffer) {
		cmd, stderr, out := begin(user, "acquire", name, "--hold", "--ttl", "30s")
		out.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, name) })
		return cmd, stderr
	}
	check := func(what string, cmd *exec.Cmd, stderr *bytes.Buffer, start time.Time, within time.Duration, want string) {
		t.Helper()
		err := waitExit(cmd, 20*time.Second)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitDenied || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: %v, stderr %q; want exit %d saying %q", what, err, stderr.String(), cli.ExitDenied, want)
		}
		if took := time.Since(start); took > within {
			t.Errorf("%s: exited %v after the refusal; want within %v", what, took.Round(time.Millisecond), within)
		}
		if strings.Contains(stderr.String(), "-pw") {
			t.Errorf("%s: a password in stderr %q", what, stderr.String())
		}
	}

	cmd, stderr := hold("norelease", "perm.norelease")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	check("acquire --hold whose release is denied, after SIGTERM", cmd, stderr, time.Now(), 3*time.Second, `publish to "lease.v1.release"`)
	// And that the lease is still held: it said only that the release was
	// refused (found by an outside client).
	if !strings.Contains(stderr.String(), "perm.norelease stays held until its TTL lapses") {
		t.Errorf("acquire --hold whose release is denied: stderr %q; want that the lease stays held", stderr.String())
	}

	// So does run, whose command has exited: it said "release failed …
	// context canceled".
	run, runErr, _ := begin("norelease", "run", "--lease", "perm.norelease.run", "--ttl", "30s", "--", "true")
	check("run whose release is denied", run, runErr, time.Now(), 8*time.Second, `publish to "lease.v1.release"`)
	if s := runErr.String(); !strings.Contains(s, "stays held until its TTL lapses") || strings.Contains(s, "context canceled") {
		t.Errorf("run whose release is denied: stderr %q; want that the lease stays held, and no \"context canceled\"", s)
	}

	// A grant that could not be written, whose release is denied, says
	// both: it said "released", the lease held for its TTL.
	if full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err == nil {
		a := exec.Command(leasedBin, "acquire", "perm.unwritten", "--ttl", "30s", "-o", "json", "--url", as("norelease"))
		var stderr bytes.Buffer
		a.Stdout, a.Stderr = full, &stderr
		_ = a.Run()
		full.Close()
		if s := stderr.String(); !strings.Contains(s, "writing the grant") || !strings.Contains(s, "stays held") || strings.Contains(s, "released perm.unwritten") {
			t.Errorf("acquire > /dev/full whose release is denied: stderr %q; want writing the grant, and that it stays held", s)
		}
	}

	// A holder that may grant but not renew: its first renewal is refused,
	// and it releases on its way out (the lease held for its TTL otherwise).
	nr, nrErr, _ := begin("norenew", "acquire", "perm.norenew", "--hold", "--ttl", "3s")
	check("acquire --hold whose renewal is denied", nr, nrErr, time.Now(), 8*time.Second, `publish to "lease.v1.renew"`)
	if r := leased(t, as("leased"), "get", "perm.norenew"); r.code != 4 {
		t.Errorf("after acquire --hold whose renewal was denied (stderr %q): get exits %d (%q); want 4, released", nrErr.String(), r.code, r.stdout)
	}

	// A holder that may neither renew nor release says both: the renewal
	// refused, and the release refused, the lease then held for its TTL.
	// It blamed the renewal's refusal on the release ("release: permission
	// denied … publish to "lease.v1.renew""; found by an outside client).
	nk, nkErr, _ := begin("nokeep", "acquire", "perm.nokeep", "--hold", "--ttl", "3s")
	check("acquire --hold whose renewal and release are denied", nk, nkErr, time.Now(), 8*time.Second, `publish to "lease.v1.release"`)
	if s := nkErr.String(); !strings.Contains(s, `publish to "lease.v1.renew"`) || !strings.Contains(s, "perm.nokeep stays held until its TTL lapses") ||
		regexp.MustCompile(`release: [^;]*lease\.v1\.renew`).MatchString(s) {
		t.Errorf("acquire --hold whose renewal and release are denied: stderr %q; want the renewal's refusal, then the release's, and that it stays held", s)
	}

	// So does run, which said first "renewal failed; trying again", as if
	// the grantor were down, and tried nothing again.
	run, runErr, _ = begin("norenew", "run", "--lease", "perm.norenew.run", "--ttl", "3s", "--", "sleep", "30")
	check("run whose renewal is denied", run, runErr, time.Now(), 8*time.Second, `publish to "lease.v1.renew"`)
	if strings.Contains(runErr.String(), "trying again") {
		t.Errorf("run whose renewal is denied: stderr %q; want no \"trying again\"", runErr.String())
	}

	cmd, stderr = hold("temp", "perm.temp")
	start := time.Now()
	reload(users(""))
	// A plain refusal counts at the second, after nats.go's reconnect
	// wait (kvlease.ReconnectWait): one alone may be a server whose authorization is
	// briefly away. Before the fix: exit 5, "lease lost", 10 s later.
	check("acquire --hold whose user is removed", cmd, stderr, start, 8*time.Second, "ended this connection's authorization")
}

// The permissions of docs/api.md with the shipped binary (issue 10 items 7
// and 8): `serve --nats-url` as the leased user with its inbox prefix
// becomes ready without printing its password; the app user leases with
// --inbox-prefix (or LEASED_INBOX_PREFIX); the server's refusal of an app
// user's revoke, or of its replies on the default inbox, fails at once with
// "permission denied" and exit code 7, not "unavailable" at the timeout.
func TestDocumentedPermissions(t *testing.T) {
	hostPort := docsAuthServer(t)
	as := func(user string) string { return "nats://" + user + ":" + password(user) + "@" + hostPort }

	// Without its inbox prefix the service cannot hear JetStream's replies:
	// it says so at once instead of waiting for them.
	start := time.Now()
	if r := leased(t, "", "serve", "--nats-url", as("leased")); r.code != 7 ||
		!strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "--inbox-prefix") {
		t.Fatalf("serve without --inbox-prefix: exit %d, stderr %q; want 7, permission denied", r.code, r.stderr)
	} else if took := time.Since(start); took > 20*time.Second || strings.Contains(r.stderr, "-test-password") {
		t.Fatalf("serve without --inbox-prefix: %v, stderr %q", took, r.stderr)
	}

	serve := exec.Command(leasedBin, "serve", "--nats-url", as("leased"), "--inbox-prefix", "_INBOX_leased", "--log-format", "json")
	stderr, _ := serve.StderrPipe()
	stdout, _ := serve.StdoutPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	logs, outs := readLines(stderr), readLines(stdout)
	ready := logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	var r struct{ URL string }
	if err := json.Unmarshal([]byte(ready), &r); err != nil || r.URL != "nats://leased:xxxxx@"+hostPort {
		t.Fatalf("ready line %q (%v): want url nats://leased:xxxxx@%s", ready, err, hostPort)
	}

	// The application user, with its inbox prefix from the flag and from
	// the environment.
	acq := leased(t, as("app"), "acquire", "perm.a", "--ttl", "30s", "--holder", "app-1", "--inbox-prefix", "_INBOX_app")
	if acq.code != 0 {
		t.Fatalf("acquire as app with --inbox-prefix: exit %d %s", acq.code, acq.stderr)
	}
	t.Setenv("LEASED_INBOX_PREFIX", "_INBOX_app")
	if r := leased(t, as("app"), "get", "perm.a"); r.code != 0 || !strings.Contains(r.stdout, "app-1") {
		t.Fatalf("get as app with LEASED_INBOX_PREFIX: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	// Another application's user cannot listen on app's inbox, where the
	// replies to app's grants (and their secrets) come.
	if r := leased(t, as("billing"), "get", "perm.a"); r.code != 7 || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("get as billing on app's inbox: exit %d %q %s; want 7, permission denied", r.code, r.stdout, r.stderr)
	}

	// Refusals by the server: prompt, with their own exit code. The
	// timeout is long so that waiting it out cannot pass for promptness.
	for _, c := range []struct {
		name, user string
		args       []string
		want       string
	}{
		{"revoke as app", "app", []string{"revoke", "perm.a", "--inbox-prefix", "_INBOX_app"}, `publish to "lease.admin.v1.revoke"`},
		{"app without its inbox prefix", "app", []string{"get", "perm.a", "--inbox-prefix", ""}, "--inbox-prefix"},
		// elect works on the bucket, not through the service: the refusal
		// says so, not only which JetStream subject was refused.
		{"elect as app", "app", []string{"elect", "perm.e", "--inbox-prefix", "_INBOX_app", "--", "true"}, "not through the lease service"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r := leased(t, as(c.user), append(c.args, "--timeout", "30s")...)
			took := time.Since(start)
			if r.code != 7 || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("leased %v: exit %d, stderr %q; want exit 7, permission denied, %s", c.args, r.code, r.stderr, c.want)
			}
			if took > 10*time.Second {
				t.Fatalf("leased %v took %v to report the refusal", c.args, took)
			}
			t.Logf("%s: %v: %s", c.name, took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		})
	}
	// Credentials the server refuses: denied, not "unavailable".
	bad := "nats://app:not-" + password("app") + "@" + hostPort
	if r := leased(t, bad, "ls", "--inbox-prefix", "_INBOX_app"); r.code != 7 || !strings.Contains(r.stderr, "refused the credentials") ||
		strings.Contains(r.stderr, password("app")) {
		t.Fatalf("ls with a wrong password: exit %d, stderr %q; want 7, the credentials refused, no password", r.code, r.stderr)
	}

	// The app user's `leased run` hears the operator's revocation on the
	// service's change events, which the documented permissions let it
	// subscribe to: stopped at once, without a warning.
	run := startRun(t, as("app"), "--lease", "perm.run", "--ttl", "30s", "--", "sleep", "60")
	t.Setenv("LEASED_INBOX_PREFIX", "")
	if r := leased(t, as("operator"), "revoke", "perm.a"); r.code != 0 {
		t.Fatalf("revoke as operator (the lease must have survived the app's attempt): exit %d %s", r.code, r.stderr)
	}
	if r := leased(t, as("operator"), "revoke", "perm.run"); r.code != 0 {
		t.Fatalf("revoke perm.run as operator: exit %d %s", r.code, r.stderr)
	}
	if err, ok := waitExit(run.cmd, 5*time.Second).(*exec.ExitError); !ok || err.ExitCode() != 128+15 || strings.Contains(run.logs.text(), "warning") {
		t.Fatalf("app's run after the revocation: %v (want stopped within 5 s, its renewal due 10 s after the grant), stderr %q", err, run.logs.text())
	}

	// The auditor may read the history only: history gives the window's
	// rows and a warning that the live leases were not read, and exits 0.
	// The bucket's refusal ended it with exit 7 (found by an outside
	// client).
	if r := leased(t, as("operator"), "acquire", "perm.audited", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire as operator: exit %d %s", r.code, r.stderr)
	}
	if r := leased(t, as("auditor"), "history", "perm.", "--inbox-prefix", "_INBOX_auditor", "-o", "json"); r.code != 0 ||
		!strings.Contains(r.stdout, `"perm.audited"`) || !strings.Contains(r.stderr, "warning: the live leases were not read (permission denied") {
		t.Fatalf("history as the auditor: exit %d, stdout %q, stderr %q; want 0, the rows, and a warning that names the refusal", r.code, r.stdout, r.stderr)
	}

	// Nothing the service printed carries a password, and the server
	// refused none of its own subscriptions or publishes (its refusals of
	// subscriptions arrive before the service says it is ready, as it
	// flushes them first).
	all := logs.text() + outs.text()
	if strings.Contains(all, "-test-password") {
		t.Fatalf("serve printed a password:\n%s", all)
	}
	if strings.Contains(strings.ToLower(all), "permissions violation") {
		t.Fatalf("the documented permissions refuse the service something:\n%s", all)
	}
}

// A server that lists its users by nkey: serve and a client connect with
// --nkey (a seed file). No command could (found by an outside client);
// the seed is never printed.
func TestNkeyUsers(t *testing.T) {
	dir := t.TempDir()
	seedFile := func(name string) (pub, file string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ = kp.PublicKey()
		file = filepath.Join(dir, name+".nk")
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		return pub, file
	}
	leasedPub, leasedSeed := seedFile("leased")
	appPub, appSeed := seedFile("app")
	hostPort, _ := authServer(t, fmt.Sprintf(`authorization { users = [ { nkey: %s }, { nkey: %s } ] }`, leasedPub, appPub))
	url := "nats://" + hostPort
	serve := exec.Command(leasedBin, "serve", "--nats-url", url, "--nkey", leasedSeed, "--log-format", "json")
	logs, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	readLines(logs).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	if r := leased(t, url, "acquire", "nk.a", "--nkey", appSeed); r.code != 0 {
		t.Fatalf("acquire --nkey: exit %d %s", r.code, r.stderr)
	}
	if r := leased(t, url, "ls"); r.code != 7 {
		t.Errorf("ls without a credential: exit %d %s; want 7", r.code, r.stderr)
	}
	seed, _ := os.ReadFile(appSeed)
	if r := leased(t, url, "ls", "--nkey", appSeed, "--user", "x"); r.code != 2 || strings.Contains(r.stderr, string(seed)) {
		t.Errorf("--nkey with --user: exit %d %s; want 2, no seed", r.code, r.stderr)
	}
}

// A user allowed to grant, renew and release but not to get cannot
// acquire: the client reads the grantor's clock with a get before a grant.
// The refusal names lease.v1.get, and says why a grant needs it (it said
// only "does not let this user publish to lease.v1.get": found by an
// outside client). Nothing is granted.
func TestGrantNeedsGet(t *testing.T) {
	hostPort, _ := authServer(t, `authorization { users = [
	{ user: leased, password: "leased-pw" }
	{ user: noget, password: "noget-pw", permissions: {
		publish: { allow: ["lease.v1.grant", "lease.v1.renew", "lease.v1.release"] }
		subscribe: { allow: ["_INBOX.>", "lease.events.v1.>"] } } }
] }`)
	as := func(user string) string { return "nats://" + user + ":" + user + "-pw@" + hostPort }
	serveOn(t, as("leased")).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })

	for _, args := range [][]string{
		{"acquire", "perm.noget", "--ttl", "3s"},
		{"run", "--lease", "perm.noget", "--ttl", "3s", "--", "true"},
	} {
		r := leased(t, as("noget"), append(args, "--timeout", "30s")...)
		if r.code != cli.ExitDenied || !strings.Contains(r.stderr, `"lease.v1.get"`) || !strings.Contains(r.stderr, "clock") {
			t.Errorf("leased %v as a user that may not get: exit %d, stderr %q; want %d, lease.v1.get and why a grant needs it",
				args, r.code, r.stderr, cli.ExitDenied)
		}
	}
	if r := leased(t, as("leased"), "get", "perm.noget"); r.code != 4 {
		t.Errorf("get after the refused grants: exit %d %q; want 4, not granted", r.code, r.stdout)
	}
}

// A NATS user that may create streams but not update them (publish
// denied on $JS.API.STREAM.UPDATE.>): serve as that user creates the lease
// bucket and its history as they are to be, and starts (it exited 7: it
// updated both right after making them); clients lease through it; elect
// on a bucket made before atomic batches, which it would have to update,
// exits 7 at once naming the update (kvlease.Open waited for its ctx; the
// CLI's exit code was 1 or 7 as a race went).
func TestUserThatMayNotUpdateStreams(t *testing.T) {
	hostPort, _ := authServer(t, `authorization { users = [
	{ user: admin, password: "admin-pw" }
	{ user: creator, password: "creator-pw", permissions: {
		publish: { allow: [">"], deny: ["$JS.API.STREAM.UPDATE.>"] } } }
] }`)
	as := func(user string) string { return "nats://" + user + ":" + user + "-pw@" + hostPort }
	serveOn(t, as("creator")).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	if r := leased(t, as("creator"), "acquire", "perm.creator", "--ttl", "5s"); r.code != 0 {
		t.Fatalf("acquire as the user that started serve: exit %d, %q", r.code, r.stderr)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, as("admin")))
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "old", History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: kvlease.DefaultMarkerTTL}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // the exit code went as a race did
		start := time.Now()
		r := leased(t, as("creator"), "elect", "--bucket", "old", "perm.elect", "--ttl", "5s", "--", "true")
		if r.code != cli.ExitDenied || !strings.Contains(r.stderr, `"$JS.API.STREAM.UPDATE.KV_old"`) || time.Since(start) > 10*time.Second {
			t.Fatalf("elect %d on a bucket it would have to update: exit %d after %v, %q; want %d at once naming the update",
				i, r.code, time.Since(start).Round(time.Millisecond), r.stderr, cli.ExitDenied)
		}
	}
}

// A user given without its password (LEASED_PASSWORD forgotten, as the
// README's serve --user leased needs it) is refused, exit 7, with a hint
// that names the missing password, not only "none given, or not its".
func TestUserWithoutPasswordIsToldSo(t *testing.T) {
	hostPort := docsAuthServer(t)
	t.Setenv("LEASED_PASSWORD", "")
	r := leased(t, "nats://"+hostPort, "ls", "--user", "app", "--inbox-prefix", "_INBOX_app")
	if r.code != 7 || !strings.Contains(r.stderr, "refused the credentials") || !strings.Contains(r.stderr, `--user "app" (or LEASED_USER) without a password`) {
		t.Fatalf("ls --user app without a password: exit %d, stderr %q; want 7, the missing password named", r.code, r.stderr)
	}
	// With a password, wrong: the general hint, not the missing password.
	t.Setenv("LEASED_PASSWORD", "not-"+password("app"))
	r = leased(t, "nats://"+hostPort, "ls", "--user", "app", "--inbox-prefix", "_INBOX_app")
	if r.code != 7 || !strings.Contains(r.stderr, "none given, or not its") || strings.Contains(r.stderr, "without a password") {
		t.Fatalf("ls --user app with a wrong password: exit %d, stderr %q; want 7, the general hint", r.code, r.stderr)
	}
}

// A user that may read JetStream but not ask the lease services for their
// info ($SRV.INFO.leased) is refused, exit 7, with the refusal named and
// no status printed: status printed its table with "leases unknown
// (JetStream did not answer the count)" above the refusal, though
// JetStream was never asked the count, only cut off by the refusal (found
// by an outside client, s25d).
func TestStatusUserThatMayNotAskTheServices(t *testing.T) {
	hostPort, _ := authServer(t, `authorization { users = [
	{ user: admin, password: "admin-pw" }
	{ user: monitor, password: "monitor-pw", permissions: {
		publish: { allow: ["$JS.API.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
] }`)
	as := func(user string) string { return "nats://" + user + ":" + user + "-pw@" + hostPort }
	serveOn(t, as("admin")).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	for _, out := range []string{"text", "json"} {
		r := leased(t, as("monitor"), "status", "-o", out)
		if r.code != cli.ExitDenied || !strings.Contains(r.stderr, `"$SRV.INFO.leased"`) ||
			strings.Contains(r.stdout+r.stderr, "did not answer") || r.stdout != "" {
			t.Errorf("status -o %s as a user that may not publish to $SRV.INFO: exit %d\nstdout %q\nstderr %q\nwant %d, the refusal named, no status",
				out, r.code, r.stdout, r.stderr, cli.ExitDenied)
		}
	}
}
