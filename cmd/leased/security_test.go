package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leased/leased/cmd/leased/cli"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Two serve processes on one data directory would each grant from their own
// copy of the store, one fencing token twice. The second must exit at once,
// naming the directory and the first one's pid; once the first has exited,
// by SIGTERM or SIGKILL (the kernel drops the flock), a new one starts.
func TestServeLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startServe(t, dir)
	r := leased(t, "", "serve", "--listen", "127.0.0.1:0", "--data", dir, "--log-format", "json")
	pid := "pid " + strconv.Itoa(first.cmd.Process.Pid)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, dir) || !strings.Contains(r.stderr, pid) {
		t.Fatalf("second serve on %s: exit %d, stderr:\n%s\nwant exit %d naming the directory and %s",
			dir, r.code, r.stderr, cli.ExitError, pid)
	}
	first.stop(t)
	second := startServe(t, dir)
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = second.cmd.Wait()
	startServe(t, dir)
}

// Listening beyond loopback without authorization is refused at once, before
// the server binds anything (these cases never listen: loopback only here).
func TestServeRefusesInsecureListen(t *testing.T) {
	usersOnly := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(usersOnly, []byte(`authorization { users = [ { user: a, password: b } ] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"client port", []string{"--listen", "0.0.0.0:0"}, "client port on 0.0.0.0"},
		{"cluster port", []string{"--listen", "127.0.0.1:0", "--name", "n1", "--cluster-name", "c",
			"--cluster-listen", "0.0.0.0:0", "--routes", "nats-route://127.0.0.1:1"}, "cluster port on 0.0.0.0"},
		{"cluster port, clients authorized", []string{"--config", usersOnly, "--listen", "0.0.0.0:0", "--name", "n1",
			"--cluster-name", "c", "--cluster-listen", "0.0.0.0:0", "--routes", "nats-route://127.0.0.1:1"}, "cluster port on 0.0.0.0"},
		// Unauthenticated gossip: anyone could declare members dead.
		{"gossip port", []string{"--listen", "127.0.0.1:0", "--gossip-listen", "0.0.0.0:0"}, "gossip beyond loopback without a key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leased(t, "", append([]string{"serve", "--data", t.TempDir()}, tc.args...)...)
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "--allow-insecure") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d, %q and the --allow-insecure hint", r.code, r.stderr, cli.ExitUsage, tc.want)
			}
		})
	}
	// With --nats-url, --allow-insecure allows the gossip port: it was
	// refused as a flag of the embedded server, though the refusal of
	// keyless gossip beyond loopback said to give it (found by an outside
	// client). A bad --suspicion-threshold, checked next, stops it before
	// it connects or binds anything.
	closed := "nats://127.0.0.1:1" // never dialled: refused before
	r := leased(t, "", "serve", "--nats-url", closed, "--gossip-listen", "0.0.0.0:0", "--allow-insecure", "--suspicion-threshold", "-1")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--suspicion-threshold") {
		t.Fatalf("serve --nats-url --gossip-listen 0.0.0.0:0 --allow-insecure: exit %d, stderr:\n%s\nwant its gossip port allowed (then refused for --suspicion-threshold)", r.code, r.stderr)
	}
	// Without a gossip port it allows nothing: still refused.
	r = leased(t, "", "serve", "--nats-url", closed, "--allow-insecure")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--allow-insecure configures the embedded server") {
		t.Fatalf("serve --nats-url --allow-insecure: exit %d, stderr:\n%s\nwant it refused", r.code, r.stderr)
	}
	// dev-cluster's nodes have no authorization: loopback only.
	if r := leased(t, "", "dev-cluster", "--host", "0.0.0.0", "--data", t.TempDir()); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "loopback") {
		t.Fatalf("dev-cluster --host 0.0.0.0: exit %d, stderr:\n%s\nwant exit %d asking for a loopback address", r.code, r.stderr, cli.ExitUsage)
	}
}

// serve connects to its own embedded server through a pipe; credentials
// the server refuses are still reported as the server's refusal, at once
// (through the pipe alone, nats.go said "read/write on closed pipe", 10 s
// later: cli.connectOwn).
func TestServeOwnCredentialsRefused(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(conf, []byte(`authorization { users = [ { user: leased, password: right } ] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := leased(t, "", "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--config", conf, "--user", "leased",
		"--password", "s3cret-guess")
	if r.code == 0 || !strings.Contains(r.stderr, "Authorization Violation") || strings.Contains(r.stderr, "s3cret") {
		t.Fatalf("exit %d, stderr:\n%s\nwant a failure naming the server's Authorization Violation, without the password", r.code, r.stderr)
	}
}

// serve as a user that may not subscribe to the service's subjects exits 7
// naming them, not with the inbox hint: it said "replies come back on the
// inbox: give the prefix this user may subscribe to with --inbox-prefix"
// for "lease.v1.>", which no --inbox-prefix mends (found by an outside
// client writing its own permissions for the leased user).
func TestServeMayNotSubscribeToTheService(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(conf, []byte(`authorization { users = [ { user: leased, password: right, permissions: {
		publish: { allow: [">"] }
		subscribe: { allow: ["svc.v1.>", "$SRV.>", "_INBOX_leased.>"] } } } ] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := leased(t, "", "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--config", conf, "--user", "leased",
		"--password", "right", "--inbox-prefix", "_INBOX_leased")
	if r.code != cli.ExitDenied || !strings.Contains(r.stderr, `subscribe to "lease.`) ||
		strings.Contains(r.stderr, "--inbox-prefix") || !strings.Contains(r.stderr, "lease.admin.v1.revoke") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d naming the service's subjects, without the --inbox-prefix hint",
			r.code, r.stderr, cli.ExitDenied)
	}
}

// docs/api.md's stronger separation: leased in an account of its own that
// exports the service, an application's account importing it. nats-server
// replies through an import on _R_.…, which the default --reply-prefixes
// do not cover: serve drops those requests, and its log must say what to
// do (it said only "not an inbox", and the client "grantor unavailable";
// found by an outside client following the docs). With --reply-prefixes
// _INBOX,_R_. the application leases through the import.
func TestServeBehindAServiceImport(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(conf, []byte(`accounts {
	LEASED { jetstream: enabled
		users = [ { user: leased, password: leased-pw } ]
		exports = [ { service: "lease.v1.>" } ] }
	APP {
		users = [ { user: app, password: app-pw, permissions: {
			publish: { allow: ["lease.v1.>"] }, subscribe: { allow: ["_INBOX_app.>"] } } } ]
		imports = [ { service: { account: LEASED, subject: "lease.v1.>" } } ] }
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(s *server) result {
		return leased(t, s.url, "get", "imported.x", "--user", "app", "--password", "app-pw", "--inbox-prefix", "_INBOX_app", "--timeout", "3s")
	}
	s := startServe(t, "", "--config", conf, "--user", "leased", "--password", "leased-pw")
	if r := get(s); r.code != 1 {
		t.Fatalf("get through the import with the default --reply-prefixes: exit %d, stderr %q; want 1 (unanswered)", r.code, r.stderr)
	}
	s.logs.wait(t, 10*time.Second, func(l string) bool {
		return strings.Contains(l, "dropped a request") && strings.Contains(l, "_R_.") && strings.Contains(l, "--reply-prefixes _INBOX,_R_.")
	})
	s = startServe(t, "", "--config", conf, "--user", "leased", "--password", "leased-pw", "--reply-prefixes", "_INBOX,_R_.")
	if r := get(s); r.code != 4 || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("get through the import with --reply-prefixes _INBOX,_R_.: exit %d, stderr %q; want 4, not_found", r.code, r.stderr)
	}
}

// serve as a user whose account has no JetStream on its own standalone
// server says so and exits 2: it waited for JetStream for good (found by
// an outside client).
func TestServeAccountWithoutJetStream(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(conf, []byte(`accounts { L { users = [ { user: leased, password: right } ] } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := leased(t, "", "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--config", conf, "--user", "leased",
		"--password", "right")
	if r.code != 2 || !strings.Contains(r.stderr, "no JetStream") || time.Since(start) > 30*time.Second {
		t.Fatalf("exit %d after %v, stderr:\n%s\nwant exit 2 saying the account has no JetStream", r.code, time.Since(start), r.stderr)
	}
}

// A three-node cluster secured by a nats-server configuration file: TLS on
// client and route ports, and exactly the users of docs/api.md. An
// unauthenticated client is refused; the app user leases through the service
// but cannot write the bucket directly.
func TestServeSecuredCluster(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeTestPKI(t, dir)
	tlsBlock := fmt.Sprintf("{\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n}", cert, key, ca)
	conf := filepath.Join(dir, "nats.conf")
	body := "tls " + tlsBlock + "\n\n" + docsAuthorization(t) + "\n\ncluster {\n  tls " + tlsBlock + "\n}\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	ports := kvleasetest.FreePorts(t, 6)
	var nodes []cli.ClusterNode
	for i := range 3 {
		nodes = append(nodes, cli.ClusterNode{Name: "n" + strconv.Itoa(i+1), Host: "127.0.0.1",
			Port: ports[i], ClusterPort: ports[3+i], Data: t.TempDir()})
	}
	procs := make([]*server, 3)
	for i := range nodes {
		args := append(cli.ClusterServeArgs(nodes, i), "--config", conf, "--tls-ca", ca,
			"--user", "leased", "--inbox-prefix", "_INBOX_leased")
		cmd := exec.Command(leasedBin, args...)
		cmd.Env = append(os.Environ(), "LEASED_PASSWORD="+password("leased"))
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		procs[i] = &server{cmd: cmd, data: nodes[i].Data, logs: readLines(stderr)}
	}
	for _, p := range procs {
		p.logs.wait(t, 90*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	}
	url := func(i int) string { return "tls://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(nodes[i].Port)) }

	for i := range nodes {
		if nc, err := nats.Connect(url(i), nats.RootCAs(ca)); !errors.Is(err, nats.ErrAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Fatalf("unauthenticated client via n%d: %v, want %v", i+1, err, nats.ErrAuthorization)
		}
	}

	violations := make(chan error, 16)
	connectApp := func(i int) *nats.Conn {
		nc, err := nats.Connect(url(i), nats.RootCAs(ca), nats.UserInfo("app", password("app")),
			nats.CustomInboxPrefix("_INBOX_app"),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		if err != nil {
			t.Fatalf("app via n%d: %v", i+1, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	app1, app3 := connectApp(0), connectApp(2)
	ctx := t.Context()
	cl1, err := client.New(app1)
	if err != nil {
		t.Fatal(err)
	}
	cl3, err := client.New(app3)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cl1.Grant(ctx, kvlease.GrantRequest{Name: "guarded", Holder: "app-1", Duration: 30 * time.Second})
	if err != nil {
		t.Fatalf("app grant via n1: %v", err)
	}

	subject := "$KV." + kvlease.DefaultBucket + ".guarded"
	if err := app3.Publish(subject, []byte(`{"holder":"intruder"}`)); err != nil {
		t.Fatal(err)
	}
	if err := app3.Flush(); err != nil { // the server has read the publish, and any -ERR is on its way
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation for publish") || !strings.Contains(err.Error(), subject) {
			t.Fatalf("publish to %s: %v, want a publish permissions violation", subject, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("app published to %s without a permissions violation", subject)
	}
	got, err := cl3.Get(ctx, "guarded")
	if err != nil || got.Holder != "app-1" || got.Token != uint64(rec.Token) {
		t.Fatalf("lease via n3 after the refused write: %+v, %v; want holder app-1 token %d", got, err, rec.Token)
	}
	// The docs' leased user may subscribe to everything the service serves.
	for i, p := range procs {
		for _, l := range strings.Split(p.logs.text(), "\n") {
			if strings.Contains(l, "Subscription Violation") {
				t.Errorf("n%d: %s", i+1, l)
			}
		}
	}
}

// docsAuthorization returns the authorization block of docs/api.md, with a
// password for each user in place of the "…" the docs show.
func docsAuthorization(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```\n(authorization \\{\n.*?^\\})\n```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/api.md: no authorization block")
	}
	pw := regexp.MustCompile(`user: (\w+),(\s*)password: "…"`)
	block := pw.ReplaceAllStringFunc(string(m[1]), func(s string) string {
		user := pw.FindStringSubmatch(s)[1]
		return strings.Replace(s, `"…"`, strconv.Quote(password(user)), 1)
	})
	if strings.Contains(block, "…") {
		t.Fatalf("docs/api.md authorization block has a placeholder left:\n%s", block)
	}
	return block
}

func password(user string) string { return user + "-test-password" }

// writeTestPKI writes a throwaway CA and one certificate for 127.0.0.1,
// good for servers and clients (routes are both), into dir.
func writeTestPKI(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leased test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, block := range map[string]*pem.Block{
		ca:   {Type: "CERTIFICATE", Bytes: caDER},
		cert: {Type: "CERTIFICATE", Bytes: leafDER},
		key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// A server that verifies client certificates refuses a client without one
// in the TLS handshake: the command says so, and which flags give one, as
// a refusal (exit 7), not "grantor unavailable" (exit 1) with a broken
// pipe (found by an outside client).
func TestClientCertificateRequired(t *testing.T) {
	ca, cert, key := writeTestPKI(t, t.TempDir())
	tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: cert, KeyFile: key, CaFile: ca, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
		TLSConfig: tc, TLSVerify: true, TLSTimeout: 2})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	url := "tls://" + ns.Addr().String()
	r := leased(t, url, "ls", "--tls-ca", ca)
	if r.code != cli.ExitDenied || !strings.Contains(r.stderr, "TLS failed") || !strings.Contains(r.stderr, "--tls-cert") {
		t.Fatalf("ls without a client certificate: exit %d, stderr %q; want %d, TLS failed and the --tls-cert hint", r.code, r.stderr, cli.ExitDenied)
	}
	// The client's own refusal of the server's certificate (no --tls-ca)
	// is a failure of its set-up, not a permission denied (found by an
	// outside client).
	r = leased(t, url, "ls", "--tls-cert", cert, "--tls-key", key)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, "not trusted") || !strings.Contains(r.stderr, "--tls-ca") {
		t.Fatalf("ls without --tls-ca: exit %d, stderr %q; want %d, the server's certificate not trusted and the --tls-ca hint", r.code, r.stderr, cli.ExitError)
	}
}

// --config lies under the flags: the file's listen address and store
// directory apply when no flag names them, and flags given explicitly win.
func TestServeConfigFileUnderFlags(t *testing.T) {
	port, fileData := kvleasetest.FreePort(t), t.TempDir()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	body := fmt.Sprintf("server_name: fromfile\nlisten: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n", port, fileData)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(args ...string) *server {
		cmd := exec.Command(leasedBin, append([]string{"serve", "--config", conf, "--log-format", "json"}, args...)...)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		s := &server{cmd: cmd, logs: readLines(stderr)}
		s.logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
		return s
	}
	lockedBy := func(dir string, s *server) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "leased.lock"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(s.cmd.Process.Pid) {
			t.Fatalf("lock file in %s: %q, %v; want pid %d", dir, b, err, s.cmd.Process.Pid)
		}
	}

	fromFile := start()
	started := fromFile.logs.wait(t, time.Second, func(l string) bool { return strings.Contains(l, "embedded NATS server started") })
	if want := fmt.Sprintf(`"url":"nats://127.0.0.1:%d"`, port); !strings.Contains(started, want) || !strings.Contains(started, `"name":"fromfile"`) {
		t.Fatalf("without flags: %s\nwant the file's name and %s", started, want)
	}
	lockedBy(fileData, fromFile)

	flagData := t.TempDir()
	fromFlags := start("--listen", "127.0.0.1:0", "--data", flagData, "--name", "fromflags")
	started = fromFlags.logs.wait(t, time.Second, func(l string) bool { return strings.Contains(l, "embedded NATS server started") })
	if strings.Contains(started, fmt.Sprintf(":%d\"", port)) || !strings.Contains(started, `"name":"fromflags"`) {
		t.Fatalf("with flags: %s\nwant the flags' name and a free port", started)
	}
	lockedBy(flagData, fromFlags)
}

// SIGHUP reloads serve's --config, as nats-server's does: a user added to
// the file can connect, a file that does not parse is logged and changes
// nothing, and serve serves on. Without --config there is nothing to
// reload, and serve says so and serves on. It stopped on SIGHUP: adding a
// user, or a renewed TLS certificate, took a node down and up again.
func TestServeReloadsConfigOnSIGHUP(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`authorization { users = [ { user: leased, password: leased-pw } ] }`)
	s := startServe(t, "", "--config", conf, "--user", "leased", "--password", "leased-pw")
	as := func(user string) string {
		return strings.Replace(s.url, "nats://", "nats://"+user+":"+user+"-pw@", 1)
	}
	get := func(user string) int { return leased(t, as(user), "get", "reload.x", "--timeout", "5s").code }
	if code := get("app"); code != 7 {
		t.Fatalf("get as a user the file does not have: exit %d, want 7", code)
	}
	hup := func(s *server, want string) { // each want is logged once, after its SIGHUP
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, want) })
	}

	write(`authorization { users = [ { user: leased, password: leased-pw }, { user: app, password: app-pw } ] }`)
	hup(s, "SIGHUP: configuration reloaded")
	if code := get("app"); code != 4 {
		t.Fatalf("get as a user added by the reload: exit %d, want 4 (not found)", code)
	}
	write(`authorization { users = [ { user: leased, password: leased-pw `)
	hup(s, "configuration not reloaded; serving on as before")
	if code := get("app"); code != 4 {
		t.Fatalf("get after a reload of a file that does not parse: exit %d, want 4: the users as before", code)
	}

	plain := startServe(t, "")
	hup(plain, "SIGHUP: nothing to reload")
	if r := leased(t, plain.url, "get", "reload.x", "--timeout", "5s"); r.code != 4 {
		t.Fatalf("get after SIGHUP to serve without --config: exit %d, %s; want 4: serving on", r.code, r.stderr)
	}
	s.stop(t)
	plain.stop(t)
}

// A reload that would no longer let serve's own user in (its password
// changed in the file, or the user removed) is refused, as one that cannot
// be applied while serve runs: serve's credentials come from its flags and
// environment, which a SIGHUP does not change. It was applied: nats-server
// disconnected serve's own connection, which reconnected in vain with the
// old password, and the service answered nothing until a restart (found
// by an operator rotating the leased user's password).
func TestServeRefusesAReloadThatLocksItselfOut(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const app = `{ user: app, password: app-pw }`
	write(`authorization { users = [ { user: leased, password: leased-pw }, ` + app + ` ] }`)
	s := startServe(t, "", "--config", conf, "--user", "leased", "--password", "leased-pw")
	asApp := strings.Replace(s.url, "nats://", "nats://app:app-pw@", 1)
	hup := func(want string) {
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, want) })
	}
	for i, c := range []struct{ what, users string }{
		{"its password changed", `{ user: leased, password: rotated-pw }, ` + app},
		{"its user removed", app},
	} {
		write(`authorization { users = [ ` + c.users + ` ] }`)
		hup("configuration not reloaded; serving on as before")
		if r := leased(t, asApp, "acquire", fmt.Sprintf("reload.lockout%d", i), "--timeout", "5s"); r.code != 0 {
			t.Fatalf("acquire after a reload with serve's user %s: exit %d, %s; want 0: the reload refused, serving on",
				c.what, r.code, r.stderr)
		}
	}
	// The password changed the same way in the file and for serve (its
	// restart, say) is another matter: a bcrypt hash of the same password
	// is reloaded.
	write(`authorization { users = [ { user: leased, password: "$2a$04$HQ1V79u4EixVcrW4FWLwzODrRoZzqv5pW2cfVMNjGcjQDnFhRQAiu" }, ` + app + ` ] }`)
	hup("SIGHUP: configuration reloaded")
	s.stop(t)
}

// A client given a certificate (--tls-cert/--tls-key, no --tls-ca) asks for
// TLS: against a server without TLS it fails rather than connect in the
// clear, and says so as a failure of its set-up. It said "grantor
// unavailable", as for a server that is down, which points the user at
// the wrong cause (nats.go v1.56's text names the option that asked).
func TestClientCertificateAsksForTLS(t *testing.T) {
	_, cert, key := writeTestPKI(t, t.TempDir())
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	r := leased(t, "nats://"+ns.Addr().String(), "ls", "--tls-cert", cert, "--tls-key", key)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, "TLS is asked for") || strings.Contains(r.stderr, "unavailable") {
		t.Fatalf("ls with a client certificate against a server without TLS: exit %d, stdout %q, stderr %q; want exit %d, "+
			"a failure of the set-up that says TLS is not offered, not \"grantor unavailable\"", r.code, r.stdout, r.stderr, cli.ExitError)
	}
}

// serve started on a --config without authorization connects to its own
// server with no user: a reload that adds authorization (users, a token)
// shuts it out as a removed user does, and is refused as that is. It was
// applied: "SIGHUP: configuration reloaded", then serve's own connection
// refused ("authorization violation"), /healthz 503 and every request
// unanswered ("no responders") until a restart.
func TestServeRefusesAReloadThatAddsAuthorization(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`max_payload: 1048576`)
	s := startServe(t, "", "--config", conf)
	hup := func(want string) {
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, want) })
	}
	const users = `users = [ { user: app, password: app-pw } ]`
	for i, auth := range []string{users, `token: "s3cr3t-t0ken"`} {
		write(`authorization { ` + auth + ` }`)
		hup("configuration not reloaded; serving on as before")
		if r := leased(t, s.url, "acquire", fmt.Sprintf("reload.noauth%d", i), "--timeout", "5s"); r.code != 0 {
			t.Fatalf("acquire after a reload adding authorization (%s) to serve's server, serve with no user: exit %d, %s; "+
				"want 0: the reload refused, serving on", auth, r.code, r.stderr)
		}
	}
	write(`max_payload: 2097152`) // no authorization still: reloaded
	hup("SIGHUP: configuration reloaded")
	s.stop(t)
}
