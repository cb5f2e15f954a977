package main_test

import (
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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A real `leased serve` process: it starts on a free port, opens the lease
// bucket, and exits cleanly on SIGTERM, keeping its data for the next start.
func TestServeRestartKeepsLeases(t *testing.T) {
	s := startServe(t, "")
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	rec, err := st.Grant(context.Background(), kvlease.GrantRequest{Name: "svc.a", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.stop(t)

	s = startServe(t, s.data)
	st = kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	got, err := st.Get(context.Background(), "svc.a")
	if err != nil || got.Token != rec.Token {
		t.Fatalf("after restart: %+v, %v; want token %d", got, err, rec.Token)
	}
	s.stop(t)
}

// --first-token: a bucket serve creates begins its tokens there (a bucket
// made anew after the old one was lost, whose fences saw tokens up to it),
// and a restart with a first token above the bucket's is refused before
// serving, saying why, the bucket left as it was.
func TestServeFirstToken(t *testing.T) {
	s := startServe(t, "", "--first-token", "70000")
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "svc.a", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token < 70000 {
		t.Fatalf("token %d, want at least 70000", rec.Token)
	}
	s.stop(t)

	out, err := exec.Command(leasedBin, "serve", "--listen", "127.0.0.1:0", "--data", s.data, "--first-token", "90000").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "below the first token 90000") {
		t.Fatalf("serve on a bucket below --first-token: %v\n%s", err, out)
	}
	s = startServe(t, s.data, "--first-token", "70000") // at or below the bucket's: serves
	st = kvleasetest.OpenStore(t, s.url, kvlease.WithoutCreate())
	if got, err := st.Get(t.Context(), "svc.a"); err != nil || got.Token != rec.Token {
		t.Fatalf("after the refused start: %+v, %v; want token %d", got, err, rec.Token)
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--sync", "sometimes"},
		{"serve", "--listen", "nohostport"},
		{"serve", "--listen", "127.0.0.1:99999"},
		{"serve", "--log-format", "xml"},
		{"serve", "--min-ttl", "100ms"},
		{"serve", "--default-ttl", "2h"},
		{"serve", "--no-such-flag"},
		{"serve", "extra-arg"},
		{"serve", "--nats-url", "nats://127.0.0.1:1", "--sync", "unsafe-interval"},
		{"serve", "--batch-min", "1"},
		{"serve", "--batch-max", "8", "--batch-min", "16"},
		{"serve", "--batch-in-flight", "0"},
		{"serve", "--batch-linger", "5s"},
		{"serve", "--batch-timeout", "0s"},
		{"serve", "--first-token", "9223372036854775808"},
		{"serve", "--first-token", "2305843009213693953"}, // above kvlease.MaxFirstToken
		{"serve", "--first-token", "-1"},
		{"serve", "--batching=false", "--batch-linger", "2ms"},
		// What the embedded server cannot serve: it is alone, and refuses
		// batches past its limits (the nats-server defaults here).
		{"serve", "--replicas", "3"},
		{"serve", "--batch-max", "5000"},
		{"serve", "--batch-in-flight", "51"},
		{"serve", "--batch-timeout", "11s"},
		{"serve", "--history-retention", "-1h"},
		// What JetStream would refuse for ever (serve waited on it):
		{"serve", "--history-retention", "1s"}, // under the duplicates window
		{"serve", "--history-max-bytes", "1KB"},
		{"serve", "--history-max-bytes", "lots"},
		{"serve", "--history-max-bytes", "-5MiB"},
		{"serve", "--bucket", "bad.name"},
		{"serve", "--bucket", ""},
		{"serve", "--gossip-seeds", "node1"}, // refused before the embedded server starts
		{"serve", "--gossip-listen", "127.0.0.1:99999"},
		{"serve", "--pprof"}, // without --metrics-listen: nowhere to serve them
	} {
		if r := leased(t, "", append(args, "--data", t.TempDir())...); r.code != 2 {
			t.Errorf("leased %v: exit %d (%s), want 2", args, r.code, r.stderr)
		}
	}
	// Gossip flags are checked before anything starts: a bad profile or
	// threshold was found after the bucket was written, and an empty key
	// file meant "no key" (found by an outside client).
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--gossip-profile", "bogus"},
		{"--suspicion-threshold", "0"},
		{"--suspicion-threshold", "NaN"},
		{"--gossip-key-file", empty},
	} {
		args = append([]string{"serve", "--listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--data", t.TempDir()}, args...)
		if r := leased(t, "", args...); r.code != 2 || strings.Contains(r.stderr, "lease bucket") {
			t.Errorf("leased %v: exit %d (%s), want 2 before anything starts", args, r.code, r.stderr)
		}
	}
	// A port in use is the machine's state, not a bad flag: exit 1, no
	// usage, as for the NATS ports (it was 2; found by an outside client).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flag := range []string{"--http-listen", "--metrics-listen"} {
		r := leased(t, "", "serve", "--listen", "127.0.0.1:0", flag, taken.Addr().String(), "--data", t.TempDir())
		if r.code != 1 || !strings.Contains(r.stderr, flag+": ") || !strings.Contains(r.stderr, "address already in use") ||
			strings.Contains(r.stderr, "usage:") {
			t.Errorf("serve %s on a port in use: exit %d (%s), want 1 naming the flag, without usage", flag, r.code, r.stderr)
		}
	}
}

// `leased serve --metrics-listen` serves the lease metrics to Prometheus.
func TestServeMetrics(t *testing.T) {
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0", "--metric-name-prefixes", "metered")
	m := struct{ URL string }{metricsURL(t, s.logs)}
	wantHealth(t, healthURL(t, s.logs), http.StatusOK, "ok")
	if r := leased(t, s.url, "acquire", "metered", "--ttl", "10s"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	// The grant reaches the service's watcher through the bucket's stream.
	var body string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(m.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, `leased_ownership_changes_total{`) {
			break
		}
	}
	for _, want := range []string{`leased_ownership_changes_total{`, `lease_name="metered"`, `leased_leases_live`} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %s:\n%s", want, body)
		}
	}
	// Profiles only when asked for (--pprof, TestServePprof).
	if code := httpStatus(t, strings.TrimSuffix(m.URL, "/metrics")+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: status %d, want 404", code)
	}
}

// `leased serve --metrics-listen A --pprof` serves Go's runtime profiles
// beside the metrics (README, "Observability").
func TestServePprof(t *testing.T) {
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0", "--pprof")
	base := strings.TrimSuffix(metricsURL(t, s.logs), "/metrics")
	resp, err := http.Get(base + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "heap profile:") {
		t.Fatalf("heap profile: status %d\n%.300s", resp.StatusCode, b)
	}
	if !strings.Contains(s.logs.text(), "/debug/pprof/") {
		t.Errorf("serve's log does not say where the profiles are:\n%s", s.logs.text())
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// With --sync unsafe-interval on one node the server acknowledges writes
// before it syncs them, so a batch has no sync to share and only costs:
// serve then writes single publishes, unless a batching flag asks for
// batches (README, "Group commit").
func TestServeUnsyncedDoesNotBatch(t *testing.T) {
	for _, c := range []struct {
		args    []string
		batches bool
	}{
		{[]string{"--sync", "unsafe-interval"}, false},
		{[]string{"--sync", "unsafe-interval", "--batch-min", "2"}, true},
		{[]string{"--batch-min", "2"}, true}, // sync always
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			s := startServe(t, "", append(c.args, "--metrics-listen", "127.0.0.1:0")...)
			// The ready line says whether the store batches.
			if want := fmt.Sprintf(`"group_commit":%v`, c.batches); !strings.Contains(s.logs.text(), want) {
				t.Errorf("serve's log lacks %s:\n%s", want, s.logs.text())
			}
			m := struct{ URL string }{metricsURL(t, s.logs)}
			// 64 callers at once: writes queue behind one another.
			if r := leased(t, s.url, "bench", "--op", "grant-release", "--clients", "64", "--ops", "1000"); r.code != 0 {
				t.Fatalf("bench: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// A write is counted as it is sent, before its answer: the
			// bench's are all in.
			w, err := storeWrites(m.URL)
			if err != nil {
				t.Fatal(err)
			}
			if w.singles+w.batched < 2000 {
				t.Fatalf("%v: want the bench's 2,000 writes at least", w)
			}
			if got := w.batches > 0; got != c.batches {
				t.Errorf("%v; want batches: %v", w, c.batches)
			}
		})
	}
}

// serve --nats-url started before its NATS server listens (a compose file
// starting both at once) waits for it, as it then waits for JetStream:
// it used to exit at once with "no servers available for connection".
// Once running, it logs losing that server and finding it again (it said
// nothing either way). Its /healthz says each: starting, ok, the
// connection reconnecting, ok (a probe had nothing to ask).
func TestServeWaitsForItsNATS(t *testing.T) {
	port := kvleasetest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	logs := serveOn(t, url, "--metrics-listen", "127.0.0.1:0")
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"waiting for NATS"`) })
	health := healthURL(t, logs)
	wantHealth(t, health, http.StatusServiceUnavailable, "unavailable: starting")
	srv := kvleasetest.NewServer(t, kvleasetest.WithPort(port))
	logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	wantHealth(t, health, http.StatusOK, "ok")
	if r := leased(t, url, "acquire", "late.nats", "--ttl", "10s"); r.code != 0 {
		t.Fatalf("acquire through the serve that waited: exit %d: %s", r.code, r.stderr)
	}
	srv.Shutdown()
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"lost the connection to NATS; reconnecting"`) })
	wantHealth(t, health, http.StatusServiceUnavailable, "unavailable: the connection to NATS is reconnecting")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"reconnected to NATS"`) })
	awaitHealth(t, health, http.StatusOK, 10*time.Second) // once the restarted server's JetStream answers the read too
}

// /healthz is the grantor's: another application's stream on the
// embedded server that failed to recover does not make it 503, as it did
// while it passed on all of nats-server's health check (found in review).
func TestServeHealthIsOfItsOwnStreams(t *testing.T) {
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0")
	health := healthURL(t, s.logs)
	wantHealth(t, health, http.StatusOK, "ok")
	// A stream directory the server has not loaded: its health check
	// reads that as a stream that could not be recovered.
	if err := os.MkdirAll(filepath.Join(s.data, "jetstream", "$G", "streams", "OTHER_APP"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantHealth(t, health, http.StatusOK, "ok")
	if r := leased(t, s.url, "acquire", "healthy.own", "--ttl", "10s"); r.code != 0 {
		t.Fatalf("acquire: exit %d: %s", r.code, r.stderr)
	}
}

// healthURL is the /healthz URL serve logged.
func healthURL(t *testing.T, logs *lines) string {
	t.Helper()
	line := logs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"health"`) })
	var h struct{ URL string }
	if err := json.Unmarshal([]byte(line), &h); err != nil || !strings.HasSuffix(h.URL, "/healthz") {
		t.Fatalf("health line %q: %v", line, err)
	}
	return h.URL
}

// wantHealth fails t unless GET url answers code and body.
func wantHealth(t *testing.T, url string, code int, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != code || strings.TrimSpace(string(b)) != body {
		t.Fatalf("GET %s: %d %q, want %d %q", url, resp.StatusCode, b, code, body)
	}
}

// --name names the grantor on a NATS server of one's own too, as README
// says (serve refused it as a flag of the embedded server).
func TestServeNamedOnItsNATS(t *testing.T) {
	url := kvleasetest.NewServer(t).ClientURL()
	serveOn(t, url, "--name", "grantor-7").wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	if r := leased(t, url, "status"); r.code != 0 || !strings.Contains(r.stdout, "grantor-7") {
		t.Fatalf("status: exit %d, stdout %q, stderr %q; want the grantor named grantor-7", r.code, r.stdout, r.stderr)
	}
}

// A serve of another bucket on the NATS server of a running one is
// refused, and before it has made its bucket: a lease was granted twice at
// once, once in each bucket, and the refused serve left its bucket
// behind, which status then showed served by the other's grantor (found
// by outside clients).
func TestServeRefusesAnotherBucketBesideIt(t *testing.T) {
	s := startServe(t, "")
	r := leased(t, "", "serve", "--nats-url", s.url, "--bucket", "other")
	if r.code == 0 || !strings.Contains(r.stderr, `serves bucket "leases", this one "other"`) {
		t.Fatalf("serve --bucket other beside a serve of leases: exit %d, stderr %q; want a refusal naming both", r.code, r.stderr)
	}
	if r := leased(t, s.url, "status", "--bucket", "other"); r.code != 1 || !strings.Contains(r.stderr, `no lease bucket "other"`) {
		t.Errorf("status --bucket other after the refusal: exit %d, stdout %q, stderr %q; want no such bucket", r.code, r.stdout, r.stderr)
	}
}

// status warns of a lease service of another bucket on the same account
// (one that started without the check: an older leased): it was left out,
// which hid the hazard it is, a lease granted twice (found in review).
func TestStatusWarnsOfAnotherBucketsGrantor(t *testing.T) {
	s := startServe(t, "")
	other, err := micro.AddService(kvleasetest.Connect(t, s.url), micro.Config{Name: api.ServiceName, Version: api.ServiceVersion,
		Metadata: map[string]string{"node": "old-node", "bucket": "other", "nats_url": s.url}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	r := leased(t, s.url, "status")
	if r.code != 1 || !strings.Contains(r.stdout, `WARNING   grantor old-node (id `+other.Info().ID) || !strings.Contains(r.stdout, `serves bucket "other"`) ||
		!strings.Contains(r.stderr, "another lease service on this NATS account serves another bucket") {
		t.Fatalf("status beside another bucket's service: exit %d, stdout %q, stderr %q; want a warning naming it, and exit 1", r.code, r.stdout, r.stderr)
	}
	var st struct {
		Grantors     []struct{ Node string }
		OtherBuckets []struct{ Node, Bucket string } `json:"other_buckets"`
	}
	if r := leased(t, s.url, "status", "-o", "json"); json.Unmarshal([]byte(r.stdout), &st) != nil ||
		len(st.Grantors) != 1 || len(st.OtherBuckets) != 1 || st.OtherBuckets[0].Node != "old-node" || st.OtherBuckets[0].Bucket != "other" {
		t.Fatalf("status -o json: %q (%+v); want one grantor and old-node of bucket other", r.stdout, st)
	}
}

// Two grantors of one bucket started with different --max-ttl grant one
// request on one node and refuse it on the other; status says so (found
// by an outside client, mid-way through a rolling change).
func TestStatusWarnsOfGrantorsThatDisagree(t *testing.T) {
	s := startServe(t, "")
	serveOn(t, s.url, "--name", "strict", "--max-ttl", "30s").wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	r := leased(t, s.url, "status")
	if r.code != 0 || !strings.Contains(r.stdout, "(grantor margin 1s, durations 1s to 30s)") ||
		!strings.Contains(r.stdout, "(grantor margin 1s, durations 1s to 1h0m0s)") || !strings.Contains(r.stdout, "WARNING   the grantors grant with different policies") {
		t.Fatalf("status with grantors of two policies: exit %d, stdout %q, stderr %q; want each one's policy and a warning", r.code, r.stdout, r.stderr)
	}
}

// status of a bucket no grantor serves, written directly beside a serve of
// another, counts its own leases (it printed the other bucket's count,
// from that grantor's answer) and says the grantor is another's, without
// the warning of two buckets' services (review).
func TestStatusOfABucketWrittenDirectly(t *testing.T) {
	s := startServe(t, "")
	for _, name := range []string{"a.one", "a.two"} {
		if r := leased(t, s.url, "acquire", name, "--ttl", "30s"); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	st := kvleasetest.OpenStore(t, s.url, kvlease.WithBucket("elections"))
	if _, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "leader.x", Holder: "c1", Duration: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r := leased(t, s.url, "status", "--bucket", "elections")
	if r.code != 0 || !strings.Contains(r.stdout, "leases    1 live") || !strings.Contains(r.stdout, `serves bucket "leases", not this one`) ||
		strings.Contains(r.stdout, "WARNING") {
		t.Fatalf("status --bucket elections: exit %d, stdout %q, stderr %q; want its 1 lease and leases's grantor named elsewhere", r.code, r.stdout, r.stderr)
	}
	// No grantor serves it, and status says so: it said nothing, and a
	// bucket whose grantors had all stopped looked served (found by an
	// outside client, s25d).
	if !strings.Contains(r.stdout, "grantor   none answered") {
		t.Errorf("status --bucket elections, which no grantor serves: stdout %q; want 'grantor   none answered'", r.stdout)
	}
}

// A node whose store fails a write (its disk full) stops, saying why, and
// comes back with its leases when started again on a disk with room.
// nats-server answers no write to a store after one failed, for good,
// even once the disk has room again: serve ran on as if it were up, every
// grant and renewal timing out (found filling the disk).
func TestServeStopsWhenItsStoreFailsAWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small file system")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux) for a mount namespace")
	}
	dir := t.TempDir()
	// serve in a mount namespace of its own, on a 16 MiB tmpfs that goes
	// with it; started again once the test has freed the disk.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `
mount -t tmpfs -o size=16m tmpfs "$1" || exit 99
"$2" serve --listen 127.0.0.1:0 --data "$1/data" --log-format json
echo "serve-exit=$?" >&2
while [ -e "$1/fill" ]; do sleep 0.05; done
exec "$2" serve --listen 127.0.0.1:0 --data "$1/data" --log-format json`, "sh", dir, leasedBin)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := readLines(stderr)
	readyN := func(n int) string {
		t.Helper()
		seen := 0
		line := logs.wait(t, 20*time.Second, func(l string) bool {
			if strings.Contains(l, `"msg":"ready"`) {
				seen++
			}
			return seen == n
		})
		var ready struct{ URL string }
		if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.URL == "" {
			t.Fatalf("ready line %q: %v", line, err)
		}
		return ready.URL
	}
	url := readyN(1)
	r := leased(t, url, "acquire", "kept", "--ttl", "5m", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire: exit %d %s", r.code, r.stderr)
	}
	var kept api.Lease
	if err := json.Unmarshal([]byte(r.stdout), &kept); err != nil {
		t.Fatal(err)
	}

	fill := fillDisk(t, cmd.Process.Pid, dir)
	// Writes until one fails (a block's last page can take a few).
	leased(t, url, "bench", "--op", "grant", "--clients", "4", "--duration", "2s", "--ttl", "30s")
	line := logs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "failed a write to its store") })
	if !strings.Contains(line, "no space left on device") {
		t.Errorf("serve's last word %q does not say why", line)
	}
	if exit := logs.wait(t, 20*time.Second, func(l string) bool { return strings.HasPrefix(l, "serve-exit=") }); exit == "serve-exit=0" {
		t.Errorf("serve stopped for a failed write with %s, want a failure", exit)
	}

	// Room again: the next serve has the lease, and grants.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	url = readyN(2)
	r = leased(t, url, "get", "kept", "-o", "json")
	var got api.Lease
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.Token != kept.Token {
		t.Fatalf("get after the restart: exit %d %q %s (%v); want token %d", r.code, r.stdout, r.stderr, err, kept.Token)
	}
	if r := leased(t, url, "acquire", "after", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire after the restart: exit %d %s", r.code, r.stderr)
	}
}

// A node of an embedded cluster whose store fails a write while it starts
// stops too, as it does once ready (TestServeStopsWhenItsStoreFailsAWrite):
// it waits for JetStream however long its peers take, and waited for
// good, /healthz "starting", after nats-server had failed to write its
// meta group's vote to a full disk (found filling a node's disk while
// its peers came up). n1 in a mount namespace on a 16 MiB tmpfs, filled
// before its peer starts; n2 then makes the meta group vote.
func TestServeStartingStopsWhenItsStoreFailsAWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small file system")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux) for a mount namespace")
	}
	ports := kvleasetest.FreePorts(t, 6)
	var routes []string
	for _, p := range ports[3:] {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	node := func(i int, data string) []string {
		return []string{"serve", "--name", fmt.Sprintf("n%d", i+1), "--cluster-name", "full", "--log-format", "json",
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--routes", strings.Join(routes, ","), "--data", data}
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", `
mount -t tmpfs -o size=16m tmpfs "$1" || exit 99
shift
"$@"
echo "serve-exit=$?" >&2`, "sh", dir, leasedBin}, node(0, filepath.Join(dir, "data"))...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := readLines(stderr)
	logs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "opening the lease bucket") })

	fillDisk(t, cmd.Process.Pid, dir)

	peer := exec.Command(leasedBin, node(1, t.TempDir())...)
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Process.Kill(); _ = peer.Wait() })
	line := logs.wait(t, 60*time.Second, func(l string) bool {
		return strings.Contains(l, "failed a write to its store") && !strings.Contains(l, `"component":"nats"`)
	})
	if !strings.Contains(line, "no space left on device") {
		t.Errorf("serve's last word %q does not say why", line)
	}
	if exit := logs.wait(t, 20*time.Second, func(l string) bool { return strings.HasPrefix(l, "serve-exit=") }); exit == "serve-exit=0" {
		t.Errorf("serve stopped for a failed write with %s, want a failure", exit)
	}
}

// fillDisk fills the file system mounted at dir in the mount namespace of
// process pid, from outside it (through /proc/PID/root), with one file,
// whose path it returns.
func fillDisk(t *testing.T, pid int, dir string) string {
	t.Helper()
	f, err := os.Create(filepath.Join("/proc", strconv.Itoa(pid), "root", dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			return f.Name() // ENOSPC
		}
	}
}

// The history shares the NATS server's storage with the lease bucket,
// whose every write a full storage refuses, and was bounded by age only: a
// churn of leases filled a 6 MB store with 4 MB of history, and every
// grant was refused (found by an outside client). --history-max-bytes
// bounds it; a serve started without it keeps the stream's bound, and
// "none" removes it.
func TestServeBoundsTheHistory(t *testing.T) {
	dir := t.TempDir()
	maxBytes := func(s *server) int64 {
		t.Helper()
		js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.url))
		st, err := js.Stream(t.Context(), history.StreamName("leases"))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxBytes
	}
	for _, c := range []struct {
		args []string
		want int64
	}{
		{[]string{"--history-max-bytes", "64MiB"}, 64 << 20},
		{nil, 64 << 20},
		{[]string{"--history-max-bytes", "1.5GB"}, 1_500_000_000},
		{[]string{"--history-max-bytes", "none"}, -1},
	} {
		s := startServe(t, dir, c.args...)
		if got := maxBytes(s); got != c.want {
			t.Errorf("serve %v: the history's max bytes %d, want %d", c.args, got, c.want)
		}
		s.stop(t)
	}
}
