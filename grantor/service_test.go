package grantor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

type fixture struct {
	url    string
	store  *kvlease.Store
	svc    *grantor.Service
	client *client.Client
	nc     *nats.Conn // the client's connection
}

func start(t *testing.T, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	return startStore(t, nil, cfg, opts...)
}

// startStore is start on a store opened with storeOpts, where the
// service's durations and margin come from.
func startStore(t *testing.T, storeOpts []kvlease.Option, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	return startOnStore(t, srv.ClientURL(), storeOpts, cfg, opts...)
}

func startOn(t *testing.T, url string, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	return startOnStore(t, url, nil, cfg, opts...)
}

func startOnStore(t *testing.T, url string, storeOpts []kvlease.Option, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	f := startOnConnStore(t, kvleasetest.Connect(t, url), storeOpts, cfg, opts...)
	f.url = url
	f.nc = kvleasetest.Connect(t, url)
	f.client = newClient(t, f.nc)
	return f
}

// newClient is client.New that fails t on an error.
func newClient(t testing.TB, nc *nats.Conn, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startOnConn runs the store and the service on nc.
func startOnConn(t *testing.T, nc *nats.Conn, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	return startOnConnStore(t, nc, nil, cfg, opts...)
}

// startOnConnStore runs the store, opened with storeOpts, and the service
// on nc.
func startOnConnStore(t *testing.T, nc *nats.Conn, storeOpts []kvlease.Option, cfg grantor.Config, opts ...grantor.Option) fixture {
	t.Helper()
	st, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, nc), storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := grantor.New(st, nc, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	return fixture{store: st, svc: svc}
}

func TestLeaseLifecycleThroughService(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	l, err := kvlease.Acquire(ctx, f.client, "jobs.nightly", "worker-1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kvlease.Keep(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	// Renewed through the service for 2×D.
	w, err := f.store.Watch(ctx, "jobs.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	renewals := 0
	for renewals < 4 {
		select {
		case ev := <-w.Events():
			if ev.Type == kvlease.EventRenewed {
				renewals++
			}
		case <-k.Done():
			t.Fatalf("lost: %v", k.Err())
		case <-time.After(5 * time.Second):
			t.Fatal("no renewals through the service")
		}
	}
	got, err := f.client.Get(ctx, "jobs.nightly")
	if err != nil || got.Holder != "worker-1" || got.Token != uint64(l.Token()) || got.Secret != "" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if got.ServerTTL != api.Duration(4*time.Second) || got.ServerTime.IsZero() {
		t.Fatalf("get = %+v; want server TTL 4s and the server's time", got)
	}
	list, err := f.client.List(ctx, "jobs.")
	if err != nil || len(list) != 1 || list[0].Name != "jobs.nightly" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// Someone else is refused while it is held, with the holder named.
	_, err = f.client.Grant(ctx, kvlease.GrantRequest{Name: "jobs.nightly", Holder: "worker-2", Duration: 3 * time.Second})
	var held *kvlease.HeldError
	if !errors.As(err, &held) || held.Holder != "worker-1" || held.Token != l.Token() {
		t.Fatalf("grant while held: %v", err)
	}
	if err := k.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := f.client.Get(ctx, "jobs.nightly"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("get after release: %v, want ErrNotFound", err)
	}
}

// Knowing the name, the holder's identity, the token and the revision is not
// enough: renew and release need the grant's secret.
func TestNonHolderRefusedWithoutSecret(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "db", Holder: "owner", Duration: 10 * time.Second})
	if err != nil || len(rec.Secret) != 32 {
		t.Fatalf("grant = %+v, %v; want a 128-bit secret", rec, err)
	}
	for _, c := range []struct {
		name   string
		holder string
		secret string
		want   string
	}{
		{"no secret", "owner", "", api.CodeNotHolder},
		{"guessed secret", "owner", strings.Repeat("0", 32), api.CodeNotHolder},
		{"other holder with the secret", "intruder", rec.Secret, api.CodeNotHolder},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: "db", Holder: c.holder, Token: rec.Token,
				Revision: rec.Revision, Secret: c.secret})
			assertCode(t, err, c.want)
			err = f.client.Release(ctx, kvlease.ReleaseRequest{Name: "db", Holder: c.holder, Token: rec.Token,
				Revision: rec.Revision, Secret: c.secret})
			assertCode(t, err, c.want)
		})
	}
	ren, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: "db", Holder: "owner", Token: rec.Token,
		Revision: rec.Revision, Secret: rec.Secret})
	if err != nil || ren.Duration != 10*time.Second {
		t.Fatalf("renew with the secret, default duration: %+v, %v", ren, err)
	}
	// The old revision is now stale: a conflict, not a foreign holder.
	_, err = f.client.Renew(ctx, kvlease.RenewRequest{Name: "db", Holder: "owner", Token: rec.Token,
		Revision: rec.Revision, Secret: rec.Secret})
	assertCode(t, err, api.CodeConflict)
	var stale *kvlease.StaleRevisionError
	if !errors.Is(err, kvlease.ErrStaleRevision) || !errors.As(err, &stale) ||
		stale.Name != "db" || stale.Revision != ren.Revision {
		t.Fatalf("stale revision: %v (%+v), want the current revision %d", err, stale, ren.Revision)
	}
	// The secret is checked before the revision: a caller without it learns
	// nothing (no conflict, no current revision). A revision above the
	// current one is not stale: it says the read is behind (a deposed
	// leader's), so the answer is unavailable, whoever asks.
	for _, c := range []struct {
		name   string
		rev    uint64
		secret string
		want   string
	}{
		{"stale revision, wrong secret", rec.Revision, strings.Repeat("0", 32), api.CodeNotHolder},
		{"stale revision, no secret", rec.Revision, "", api.CodeNotHolder},
		{"future revision, wrong secret", ren.Revision + 100, strings.Repeat("0", 32), api.CodeUnavailable},
		{"future revision, the secret", ren.Revision + 100, rec.Secret, api.CodeUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			for verb, call := range map[string]func() error{
				"renew": func() error {
					_, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: "db", Holder: "owner", Token: rec.Token,
						Revision: c.rev, Secret: c.secret})
					return err
				},
				"release": func() error {
					return f.client.Release(ctx, kvlease.ReleaseRequest{Name: "db", Holder: "owner", Token: rec.Token,
						Revision: c.rev, Secret: c.secret})
				},
			} {
				err := call()
				assertCode(t, err, c.want)
				if errors.As(err, &stale) ||
					(c.secret != rec.Secret && regexp.MustCompile(fmt.Sprintf(`\b%d\b`, ren.Revision)).MatchString(err.Error())) {
					t.Fatalf("%s: %v names the current revision %d", verb, err, ren.Revision)
				}
			}
		})
	}
	if got, err := f.client.Get(ctx, "db"); err != nil || got.Revision != ren.Revision {
		t.Fatalf("after the refused calls: %+v, %v; want the lease untouched at revision %d", got, err, ren.Revision)
	}
}

func assertCode(t *testing.T, err error, code string) {
	t.Helper()
	var se *api.ServiceError
	if code == api.CodeHeld {
		if !errors.Is(err, kvlease.ErrHeld) {
			t.Fatalf("err = %v, want held", err)
		}
		return
	}
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
	assertWireMessage(t, se.Message)
}

// assertWireMessage checks that an error reply's message speaks to callers
// in any language: no Go package names.
func assertWireMessage(t *testing.T, msg string) {
	t.Helper()
	for _, pkg := range []string{"kvlease:", "grantor:", "membership:"} {
		if strings.Contains(msg, pkg) {
			t.Fatalf("error message %q names the Go package %s", msg, pkg)
		}
	}
}

// Bad requests from any NATS client get the documented code and a message;
// nothing is written and the service keeps serving.
func TestBadRequests(t *testing.T) {
	cfg := grantor.DefaultConfig()
	f := startStore(t, []kvlease.Option{kvlease.WithDurationRange(kvlease.MinDuration, time.Minute)}, cfg)
	ctx := t.Context()
	// The last revision of any lease but the grantor's own (the observer
	// lease renews meanwhile).
	lastSeq := func() uint64 {
		t.Helper()
		js := kvleasetest.JetStream(t, f.nc)
		s, err := js.Stream(ctx, "KV_"+kvlease.DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+kvlease.DefaultBucket+".>"))
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		for subj := range info.State.Subjects {
			if strings.HasPrefix(subj, "$KV."+kvlease.DefaultBucket+"."+grantor.ReservedPrefix) {
				continue
			}
			m, err := s.GetLastMsgForSubject(ctx, subj)
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, m.Sequence)
		}
		return last
	}
	before := lastSeq()
	for _, c := range []struct {
		name, subject, body, code string
	}{
		{"malformed JSON", api.SubjectGrant, `{"name": "a",`, api.CodeInvalidArgument},
		{"not an object", api.SubjectGrant, `[1,2]`, api.CodeInvalidArgument},
		{"unknown field", api.SubjectGrant, `{"name":"a","holder":"h","tll":"10s"}`, api.CodeInvalidArgument},
		{"ttl as a number", api.SubjectGrant, `{"name":"a","holder":"h","ttl":10}`, api.CodeInvalidArgument},
		{"trailing data", api.SubjectGrant, `{"name":"a","holder":"h"} {}`, api.CodeInvalidArgument},
		{"unknown verb", "lease.v1.frobnicate", `{}`, api.CodeInvalidArgument},
		{"verb with extra token", "lease.v1.grant.now", `{"name":"a","holder":"h"}`, api.CodeInvalidArgument},
		{"oversize body", api.SubjectGrant, `{"name":"a","holder":"` + strings.Repeat("h", 20<<10) + `"}`, api.CodeTooLarge},
		{"invalid name", api.SubjectGrant, `{"name":"a b","holder":"h","ttl":"10s"}`, api.CodeInvalidArgument},
		{"wildcard name", api.SubjectGrant, `{"name":"a.>","holder":"h","ttl":"10s"}`, api.CodeInvalidArgument},
		{"empty holder", api.SubjectGrant, `{"name":"a","ttl":"10s"}`, api.CodeInvalidArgument},
		{"ttl below 1s", api.SubjectGrant, `{"name":"a","holder":"h","ttl":"500ms"}`, api.CodeTTLOutOfRange},
		{"ttl above max", api.SubjectGrant, `{"name":"a","holder":"h","ttl":"2h"}`, api.CodeTTLOutOfRange},
		{"negative ttl", api.SubjectGrant, `{"name":"a","holder":"h","ttl":"-5s"}`, api.CodeTTLOutOfRange},
		{"explicit zero ttl", api.SubjectGrant, `{"name":"a","holder":"h","ttl":"0s"}`, api.CodeTTLOutOfRange},
		{"explicit zero ttl on renew", api.SubjectRenew, `{"name":"a","holder":"h","token":999,"revision":999,"secret":"x","ttl":"0s"}`, api.CodeTTLOutOfRange},
		{"reserved name", api.SubjectGrant, `{"name":"_leased.observer","holder":"h","ttl":"10s"}`, api.CodeInvalidArgument},
		{"too many attributes", api.SubjectGrant, `{"name":"a","holder":"h","attributes":{` + manyAttrs(17) + `}}`, api.CodeTooLarge},
		{"renew of nothing", api.SubjectRenew, `{"name":"a","holder":"h","token":999,"revision":999,"secret":"x"}`, api.CodeExpired},
		{"get of nothing", api.SubjectGet, `{"name":"a"}`, api.CodeNotFound},
		{"revoke of nothing", api.SubjectRevoke, `{"name":"a"}`, api.CodeNotFound},
		{"request id without a secret", api.SubjectGrant, `{"name":"a","holder":"h","request_id":"r1"}`, api.CodeInvalidArgument},
		{"short secret", api.SubjectGrant, `{"name":"a","holder":"h","secret":"short"}`, api.CodeInvalidArgument},
		{"secret with a space", api.SubjectGrant, `{"name":"a","holder":"h","secret":"0123456789 abcdef"}`, api.CodeInvalidArgument},
		{"request id with a space", api.SubjectGrant, `{"name":"a","holder":"h","request_id":"r 1","secret":"0123456789abcdef"}`, api.CodeInvalidArgument},
		{"long request id", api.SubjectGrant, `{"name":"a","holder":"h","request_id":"` + strings.Repeat("r", 129) + `","secret":"0123456789abcdef"}`, api.CodeInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			reply, err := f.nc.Request(c.subject, []byte(c.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var body api.ErrorBody
			if err := json.Unmarshal(reply.Data, &body); err != nil {
				t.Fatalf("error body %q: %v", reply.Data, err)
			}
			if got := reply.Header.Get(micro.ErrorCodeHeader); got != c.code || body.Code != c.code || body.Message == "" {
				t.Fatalf("header code %q, body %+v; want %s with a message", got, body, c.code)
			}
			assertWireMessage(t, body.Message)
			assertWireMessage(t, reply.Header.Get(micro.ErrorHeader))
		})
	}
	// The Go client sends what it is given: a zero duration is out of
	// range, as it is for kvlease.Store.Grant, not the service's default.
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h"}); !errors.Is(err, kvlease.ErrDurationOutOfRange) {
		t.Fatalf("Client.Grant with no duration: %v, want ErrDurationOutOfRange", err)
	}
	if got := lastSeq(); got != before {
		t.Fatalf("bad requests wrote %d entries", got-before)
	}
	// Still serving; a grant without a ttl gets the policy's default.
	reply, err := f.nc.Request(api.SubjectGrant, []byte(`{"name":"a","holder":"h"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Lease
	if err := json.Unmarshal(reply.Data, &got); err != nil || got.TTL != api.Duration(cfg.DefaultDuration) {
		t.Fatalf("grant with no ttl after bad requests: %s (%v), want the default %v", reply.Data, err, cfg.DefaultDuration)
	}
}

func manyAttrs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('a'+i)) + `":"v"`)
	}
	return b.String()
}

// The bucket's live leases are bounded, whatever holder names callers
// make up: an application user granted 40,000 leases with a holder name
// each, past --max-leases-per-holder, and the node's memory grew without
// bound (found by an outside client). A live lease's own grant retried is
// still answered, and an end frees a place.
func TestMaxLeases(t *testing.T) {
	cfg := grantor.DefaultConfig()
	cfg.MaxLeases = 3
	f := start(t, cfg)
	ctx := t.Context()
	var recs []kvlease.Record
	for i := range 3 {
		rid, secret := kvlease.NewRequestID()
		req := kvlease.GrantRequest{Name: fmt.Sprintf("m.%d", i), Holder: fmt.Sprintf("h%d", i), Duration: 10 * time.Second,
			RequestID: rid, Secret: secret}
		rec, err := f.client.Grant(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		if i == 2 { // at the limit: the retry of a grant that was made recovers it
			if again, err := f.client.Grant(ctx, req); err != nil || !again.Recovered {
				t.Fatalf("a retried grant at the limit: %+v, %v; want it recovered", again, err)
			}
		}
	}
	_, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "m.3", Holder: "h3", Duration: 10 * time.Second})
	assertCode(t, err, api.CodeLimitExceeded)
	r := recs[0]
	if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: r.Name, Holder: r.Holder, Token: r.Token, Revision: r.Revision, Secret: r.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "m.3", Holder: "h3", Duration: 10 * time.Second}); err != nil {
		t.Fatalf("grant after a release: %v", err)
	}
}

func TestLeasesPerHolderLimit(t *testing.T) {
	cfg := grantor.DefaultConfig()
	cfg.MaxLeasesPerHolder = 2
	f := start(t, cfg)
	ctx := t.Context()
	var recs []kvlease.Record
	for _, n := range []string{"a", "b"} {
		rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: n, Holder: "greedy", Duration: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	_, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "c", Holder: "greedy", Duration: 10 * time.Second})
	assertCode(t, err, api.CodeLimitExceeded)
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "c", Holder: "modest", Duration: 10 * time.Second}); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	// Releasing one frees a place.
	r := recs[0]
	if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: r.Name, Holder: r.Holder, Token: r.Token, Revision: r.Revision, Secret: r.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err = f.client.Grant(ctx, kvlease.GrantRequest{Name: "d", Holder: "greedy", Duration: 10 * time.Second}); err != nil {
		t.Fatalf("grant after release: %v", err)
	}
}

// Trace context crosses the service in the request headers: the server's
// span is a child of the client's, in the same trace.
func TestTraceContextCrossesService(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := start(t, grantor.DefaultConfig(), grantor.WithTracerProvider(tp))
	client := newClient(t, f.nc, client.WithTracerProvider(tp))
	if _, err := client.Grant(t.Context(), kvlease.GrantRequest{Name: "traced", Holder: "h", Duration: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.svc.Stop() // waits for the server span to end
	var clientSpan, serverSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case api.SubjectGrant:
			if s.SpanKind().String() == "client" {
				clientSpan = s
			} else {
				serverSpan = s
			}
		}
	}
	if clientSpan == nil || serverSpan == nil {
		t.Fatalf("spans: %d recorded, client %v server %v", len(rec.Ended()), clientSpan != nil, serverSpan != nil)
	}
	if serverSpan.Parent().SpanID() != clientSpan.SpanContext().SpanID() ||
		serverSpan.SpanContext().TraceID() != clientSpan.SpanContext().TraceID() {
		t.Fatal("server span is not the client span's child")
	}
}

// A holder through the service links its spans of the tenure to the
// grant's, as one on the bucket does: the grant's reply carries its
// traceparent (grant_trace). leased run's renewals had no link (found by
// an outside client).
func TestHolderSpansThroughServiceLinkToGrant(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := startStore(t, []kvlease.Option{kvlease.WithTracerProvider(tp)}, grantor.DefaultConfig(), grantor.WithTracerProvider(tp))
	cl := newClient(t, f.nc, client.WithTracerProvider(tp))
	l, err := kvlease.Acquire(t.Context(), cl, "linked", "h", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	var grant trace.SpanContext
	for _, s := range rec.Ended() {
		if s.Name() == "lease.grant" {
			grant = s.SpanContext()
		}
	}
	linked := 0
	for _, s := range rec.Ended() {
		if s.Name() == "lease.holder.renew" {
			for _, ln := range s.Links() {
				if grant.IsValid() && ln.SpanContext.SpanID() == grant.SpanID() {
					linked++
				}
			}
		}
	}
	if !grant.IsValid() || linked != 1 {
		t.Fatalf("lease.grant span %v; holder renewal spans linked to it: %d, want 1", grant, linked)
	}
}

// Server spans are named by the endpoint that answered: a caller that
// makes up verbs makes no new span names (each became an operation of its
// own in Jaeger, found by an outside client).
func TestServerSpanNamesAreTheEndpoints(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := start(t, grantor.DefaultConfig(), grantor.WithTracerProvider(tp))
	for i := range 5 {
		if _, err := f.nc.Request(fmt.Sprintf("lease.v1.verb%d", i), []byte("{}"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.nc.Request(api.SubjectGet, []byte(`{"name":"x"}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f.svc.Stop() // waits for the server spans to end
	names := map[string]int{}
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			names[s.Name()]++
		}
	}
	if names["lease.v1.>"] != 5 || names[api.SubjectGet] != 1 || len(names) != 2 {
		t.Errorf("server span names %v; want 5 lease.v1.> and 1 %s", names, api.SubjectGet)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(*grantor.Config)
	}{
		{"default below 1s", func(c *grantor.Config) { c.DefaultDuration = 500 * time.Millisecond }},
		{"negative limit", func(c *grantor.Config) { c.MaxAttributes = -1 }},
		{"tiny request limit", func(c *grantor.Config) { c.MaxRequestBytes = 10 }},
		{"no in-flight", func(c *grantor.Config) { c.MaxInFlight = 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := grantor.DefaultConfig()
			c.mut(&cfg)
			if err := cfg.Validate(); !errors.Is(err, grantor.ErrConfig) {
				t.Fatalf("validate: %v, want ErrConfig", err)
			}
		})
	}
	if err := grantor.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// A tenure granted by a Go program directly on the bucket has no secret:
// through the service, nobody can renew or release it, even knowing its
// holder, token and revision.
func TestServiceRefusesTenuresWithoutSecret(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.store.Grant(ctx, kvlease.GrantRequest{Name: "direct", Holder: "go-holder", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Get(ctx, "direct")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.Renew(ctx, kvlease.RenewRequest{Name: "direct", Holder: got.Holder, Token: kvlease.Token(got.Token), Revision: got.Revision})
	assertCode(t, err, api.CodeNotHolder)
	err = f.client.Release(ctx, kvlease.ReleaseRequest{Name: "direct", Holder: got.Holder, Token: kvlease.Token(got.Token), Revision: got.Revision})
	assertCode(t, err, api.CodeNotHolder)
	// Its own store still can.
	if err := f.store.Release(ctx, kvlease.ReleaseRequest{Name: "direct", Holder: "go-holder", Token: rec.Token, Revision: rec.Revision}); err != nil {
		t.Fatal(err)
	}
}

// Changes of holder (not renewals) are published for any NATS client, e.g.
// followers of an election that are not written in Go.
func TestServicePublishesChanges(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	sub, err := f.nc.SubscribeSync(api.SubjectEvents + "leader.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	rec, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "leader.x", Holder: "a", Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Renew(t.Context(), kvlease.RenewRequest{Name: "leader.x", Holder: "a", Token: rec.Token, Revision: rec.Revision, Secret: rec.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(t.Context(), "leader.x", "test"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"granted", "revoked"} { // the renewal is not published
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		var ev api.ChangeEvent
		if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Type != want || ev.Name != "leader.x" || ev.Holder != "a" {
			t.Fatalf("event %s: %+v %v", msg.Data, ev, err)
		}
	}
}

// The client estimates the grantor's clock from the server time in replies.
func TestClientEstimatesGrantorClock(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "clock", Holder: "h", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	secret := rec.Secret
	for range 3 {
		if rec, err = f.client.Renew(ctx, kvlease.RenewRequest{Name: "clock", Holder: "h", Token: rec.Token,
			Revision: rec.Revision, Secret: secret}); err != nil {
			t.Fatal(err)
		}
	}
	offset, bound, _, _, ok := f.client.Clock().Estimate()
	if !ok || bound <= 0 || (offset.Abs() > bound+10*time.Millisecond) {
		t.Fatalf("same-machine clock estimate: offset %v ± %v (ok %v)", offset, bound, ok)
	}
	if f.client.Clock().Exceeds(0.5) {
		t.Fatal("same-machine clocks reported drifting")
	}
	// With a meter provider the estimate is a metric.
	reader := sdkmetric.NewManualReader()
	client := newClient(t, f.nc, client.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if _, err := client.Grant(ctx, kvlease.GrantRequest{Name: "clock2", Holder: "h", Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			found = found || m.Name == "leased.clock.offset"
		}
	}
	if !found {
		t.Fatal("no leased.clock.offset metric")
	}
}

// Every lease reply names the grantor node whose clock its server_time is,
// so that clients estimate each node's clock rate apart (issue 10 item 4).
func TestLeaseRepliesNameTheirNode(t *testing.T) {
	f := start(t, grantor.DefaultConfig(), grantor.WithNodeName("n7"))
	reply, err := f.nc.Request(api.SubjectGrant, []byte(`{"name":"node.a","holder":"h","ttl":"10s"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var l api.Lease
	if err := json.Unmarshal(reply.Data, &l); err != nil || l.Node != "n7" || l.ServerTime.IsZero() {
		t.Fatalf("grant reply %s (%v): want node n7 and a server_time", reply.Data, err)
	}
	for _, subj := range []string{api.SubjectGet, api.SubjectRevoke} {
		reply, err := f.nc.Request(subj, []byte(`{"name":"node.a"}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(reply.Data, &l); err != nil || l.Node != "n7" {
			t.Fatalf("%s reply %s (%v): want node n7", subj, reply.Data, err)
		}
	}
}

// The service's INFO metadata names the server it connected to without
// its credentials: a token URL (nats://TOKEN@host) was published whole, as
// nats.go's ConnectedUrlRedacted hides only a password, and `nats micro
// info leased` showed the token to anyone who may ask (found running serve
// --nats-url nats://TOKEN@host against a token-authorized server, s21b).
func TestInfoMetadataHidesCredentials(t *testing.T) {
	srv := kvleasetest.NewServer(t) // without authorization: it takes any
	hostPort := strings.TrimPrefix(srv.ClientURL(), "nats://")
	for _, tc := range []struct{ userinfo, want string }{
		{"s3cret-token", "nats://xxxxx@" + hostPort},
		{"leased:s3cret-password", "nats://leased:xxxxx@" + hostPort},
	} {
		t.Run(tc.userinfo, func(t *testing.T) {
			nc := kvleasetest.Connect(t, "nats://"+tc.userinfo+"@"+hostPort)
			startOnConn(t, nc, grantor.DefaultConfig())
			reply, err := nc.Request("$SRV.INFO.leased", nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(reply.Data), "s3cret") {
				t.Fatalf("INFO carries the URL's credentials: %s", reply.Data)
			}
			var info micro.Info
			if err := json.Unmarshal(reply.Data, &info); err != nil {
				t.Fatal(err)
			}
			if got := info.Metadata["nats_url"]; got != tc.want {
				t.Errorf("metadata nats_url %q, want %q", got, tc.want)
			}
		})
	}
}

// The service's INFO metadata has the keys docs/api.md lists, and "build"
// only when the build says which it is (docs/api.md: "absent if the build
// does not say"): a build without version control information answered
// "build": "" (found by an outside client reading `nats micro info`).
func TestInfoMetadata(t *testing.T) {
	f := start(t, grantor.DefaultConfig(), grantor.WithNodeName("n7"))
	reply, err := f.nc.Request("$SRV.INFO.leased", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(reply.Data, &info); err != nil {
		t.Fatal(err)
	}
	md := info.Metadata
	if md["bucket"] != "leases" || md["node"] != "n7" || md["nats_url"] == "" ||
		md["policy"] != "grantor margin 1s, durations 1s to 1h0m0s" {
		t.Errorf("metadata %v: want bucket, node, nats_url and policy", md)
	}
	build, ok := md["build"]
	if want := grantor.Build(); ok != (want != "") || build != want {
		t.Errorf("metadata build %q (present: %v), want %q, absent if empty", build, ok, want)
	}
}

// dropOneReply passes requests to the service client, but drops the reply
// to one renewal after the service has stored it.
type dropOneReply struct {
	*client.Client
	drop chan struct{} // closed once a reply was dropped
}

func (g *dropOneReply) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	rec, err := g.Client.Renew(ctx, req)
	select {
	case <-g.drop:
	default:
		if err == nil {
			close(g.drop)
			return kvlease.Record{}, fmt.Errorf("%w: renew: reply lost", kvlease.ErrUnavailable)
		}
	}
	return rec, err
}

// Through the service too, a holder whose renewal reply was lost recovers:
// the conflict reply names the current revision, and the lease renews it.
func TestServiceLostRenewalReplyRecovered(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	g := &dropOneReply{Client: f.client, drop: make(chan struct{})}
	l, err := kvlease.Acquire(ctx, g, "lost-reply", "h", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("renew whose reply is dropped: %v, want ErrUnavailable", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after the lost reply: %v", err)
	}
	cur, err := f.store.Get(ctx, "lost-reply")
	if err != nil || cur.Revision != l.Record().Revision || cur.Token != l.Token() {
		t.Fatalf("store at %+v (%v), holder at %+v", cur, err, l.Record())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// sized is an extension whose verb test.v1.sized answers a JSON string of
// as many bytes as its request's number: a reply of a chosen size.
type sized struct{}

func (sized) Endpoints(grantor.Leases) map[string]grantor.Handler {
	return map[string]grantor.Handler{
		"test.v1.sized": func(_ context.Context, data []byte) (any, error) {
			var n int
			if err := json.Unmarshal(data, &n); err != nil {
				return nil, err
			}
			return strings.Repeat("x", n), nil
		},
	}
}
func (sized) Start(context.Context) error { return nil }
func (sized) Stop()                       {}

// A reply whose body fits the NATS server's max_payload but not with its
// headers is refused too_large, as one whose body alone is over: it was
// not sent at all ("reply failed" in the log), and its caller waited out
// its timeout (found by an outside client: a discover whose reply came
// within a hundred bytes of max_payload timed out, exit 1 "unavailable",
// every time until the service's instances changed).
func TestReplyOverMaxPayloadWithItsHeadersIsTooLarge(t *testing.T) {
	const maxPayload = 4096
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxPayload(maxPayload))
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig(), grantor.WithExtension(sized{}))
	ask := func(n int) *nats.Msg {
		t.Helper()
		reply, err := f.nc.Request("test.v1.sized", []byte(fmt.Sprint(n)), 3*time.Second)
		if err != nil {
			t.Fatalf("a reply of a %d-byte body: %v", n+2, err)
		}
		return reply
	}
	if reply := ask(100); reply.Header.Get(api.HeaderErrorCode) != "" || len(reply.Data) != 102 {
		t.Fatalf("a small reply: %q %v", reply.Data, reply.Header)
	}
	for _, body := range []int{maxPayload - 8, maxPayload, maxPayload + 1} { // the headers are some 90 bytes
		reply := ask(body - 2)
		if code := reply.Header.Get(api.HeaderErrorCode); code != api.CodeTooLarge ||
			!strings.Contains(reply.Header.Get(api.HeaderError), "exceeds the server's max payload") {
			t.Errorf("a reply of a %d-byte body at max_payload %d: code %q (%s), want %s",
				body, maxPayload, code, reply.Header.Get(api.HeaderError), api.CodeTooLarge)
		}
	}
}

// A list longer than one message allows comes in pages: without a limit
// it is refused too_large, as it always was; with one, each reply holds
// what fits, in name order after the last name of the page before, and
// says whether more follow; count_only counts. client.List pages through.
func TestListPages(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxPayload(32*1024))
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig())
	ctx := t.Context()
	const n = 300 // about 330 bytes each on the wire: some 100 KB in all
	var wg sync.WaitGroup
	for i := range n + 1 {
		name := fmt.Sprintf("p.%03d", i)
		if i == n {
			name = "q.other" // under another prefix
		}
		wg.Go(func() {
			if _, err := f.store.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute,
				Attributes: map[string]string{"zone": "eu-west-1"}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	list := func(req api.ListRequest) (api.ListReply, error) {
		body, _ := json.Marshal(req)
		m, err := f.nc.Request(api.SubjectList, body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := m.Header.Get(api.HeaderErrorCode); code != "" {
			return api.ListReply{}, fmt.Errorf("%w: %s", errors.New(code), m.Header.Get(api.HeaderError))
		}
		var out api.ListReply
		if err := json.Unmarshal(m.Data, &out); err != nil {
			t.Fatal(err)
		}
		return out, nil
	}
	// A prefix no lease name can begin with is refused however it is asked
	// for (pages and counts come from the index, which found nothing).
	for _, req := range []api.ListRequest{{Prefix: "a b"}, {Prefix: "*", Limit: 10}, {Prefix: ">", CountOnly: true}} {
		if _, err := list(req); err == nil || errors.Unwrap(err).Error() != api.CodeInvalidArgument {
			t.Errorf("list %+v: %v, want %s", req, err, api.CodeInvalidArgument)
		}
	}
	// Refused as the reply fills up (it was encoded whole first), saying
	// how to ask instead.
	if _, err := list(api.ListRequest{Prefix: "p."}); err == nil || errors.Unwrap(err).Error() != api.CodeTooLarge ||
		!strings.Contains(err.Error(), "a list of 300 leases") || !strings.Contains(err.Error(), "ask for pages") {
		t.Errorf("whole list without a limit: %v, want %s naming the leases and pages", err, api.CodeTooLarge)
	}
	if _, err := list(api.ListRequest{Limit: -1}); err == nil || errors.Unwrap(err).Error() != api.CodeInvalidArgument {
		t.Errorf("limit -1: %v, want %s", err, api.CodeInvalidArgument)
	}
	if got, err := list(api.ListRequest{Prefix: "p.", CountOnly: true}); err != nil || got.Count != n || len(got.Leases) != 0 || got.More {
		t.Errorf("count_only: %+v, %v; want count %d and no leases", got, err, n)
	}
	page, err := list(api.ListRequest{Prefix: "p.", Limit: 7, After: "p.100"})
	if err != nil || len(page.Leases) != 7 || !page.More || page.Count != n ||
		page.Leases[0].Name != "p.101" || page.Leases[6].Name != "p.107" {
		t.Errorf("limit 7 after p.100: %d leases from %v, more %v, count %d, %v", len(page.Leases), page.Leases, page.More, page.Count, err)
	}
	big, err := list(api.ListRequest{Prefix: "p.", Limit: 1000})
	if err != nil || !big.More || len(big.Leases) == 0 || len(big.Leases) >= n {
		t.Errorf("limit 1000 at a 32 KiB max payload: %d leases, more %v, %v; want a page that fits", len(big.Leases), big.More, err)
	}
	if last, err := list(api.ListRequest{Prefix: "p.", Limit: 10, After: "p.299"}); err != nil || len(last.Leases) != 0 || last.More {
		t.Errorf("after the last: %+v, %v; want nothing more", last, err)
	}
	all, err := f.client.List(ctx, "p.")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("client.List: %d leases, want %d", len(all), n)
	}
	for i, l := range all {
		if want := fmt.Sprintf("p.%03d", i); l.Name != want || l.Attributes["zone"] != "eu-west-1" {
			t.Fatalf("client.List lease %d: %+v, want %s", i, l, want)
		}
	}
	if c, err := f.client.Count(ctx, ""); err != nil || c != n+1 {
		t.Errorf("client.Count: %d, %v; want %d (the grantor's own leases not counted)", c, err, n+1)
	}
}

// A count or a page comes from the service's own index of live leases once that has
// applied everything the bucket held when the count was asked: changes
// made just before, through another store, are in it (without that wait
// the count would lag the grants). If the bucket's last entry is not a
// lease, no event applies it: the count waits for the next change (here
// the observer's renewal of its own lease) or, after a while, reads the
// bucket; either way it counts what a read would.
func TestCountAndPagesAreCurrent(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	other := kvleasetest.OpenStore(t, f.url) // writes the service does not make
	var recs []kvlease.Record
	for i := range 5 {
		r, err := other.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("c.%d", i), Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
		if n, err := f.client.Count(ctx, "c."); err != nil || n != i+1 {
			t.Fatalf("count after grant %d: %d, %v; want %d", i, n, err, i+1)
		}
	}
	if err := other.Release(ctx, kvlease.ReleaseRequest{Name: recs[0].Name, Holder: "h", Token: recs[0].Token,
		Revision: recs[0].Revision}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.client.Count(ctx, "c."); err != nil || n != 4 {
		t.Fatalf("count after a release: %d, %v; want 4", n, err)
	}
	// Pages come from the index too: a renewal just made shows.
	renewed, err := other.Renew(ctx, kvlease.RenewRequest{Name: recs[1].Name, Holder: "h", Token: recs[1].Token,
		Revision: recs[1].Revision, Duration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := f.client.List(ctx, "c.")
	if err != nil || len(ls) != 4 || ls[0].Name != recs[1].Name || ls[0].Revision != renewed.Revision ||
		time.Duration(ls[0].TTL) != 2*time.Minute {
		t.Fatalf("list after a renewal: %+v, %v; want c.1 to c.4, c.1 at revision %d for 2m", ls, err, renewed.Revision)
	}
	// Not a lease record: the watch skips it, and the index never reaches
	// its revision.
	kv, err := kvleasetest.JetStream(t, f.nc).KeyValue(ctx, kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "c.garbage", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if n, err := f.client.Count(ctx, "c."); err != nil || n != 4 {
		t.Fatalf("count with an undecodable entry last: %d, %v; want 4 (as a read of the bucket counts)", n, err)
	}
}

// Replies reuse their messages: an error reply's headers must not stay on
// the next one (a client reads Leased-Error-Code as the call's failure).
func TestReplyAfterAnErrorReplyIsClean(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "clean.a", Holder: "h", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		_, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token,
			Revision: rec.Revision, Secret: "wrong"})
		if err == nil {
			t.Fatal("renewal with a wrong secret succeeded")
		}
		next, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token,
			Revision: rec.Revision, Secret: rec.Secret})
		if err != nil {
			t.Fatalf("renewal %d after a refused one: %v", i, err)
		}
		next.Secret = rec.Secret
		rec = next
	}
}

// A request whose reply subject is one the service writes as data (the
// bucket's $KV subjects, JetStream's API, the history, the service's own)
// is dropped unanswered: the service publishes replies as its own NATS
// user, which may write the bucket, and a caller that may not wrote a
// reply into $KV.leases.<name>, ending that lease's tenure without its
// secret (found by an outside client).
func TestReplyToDataSubjectDropped(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "victim", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	spy := kvleasetest.Connect(t, f.url)
	written := make(chan *nats.Msg, 4)
	for _, subj := range []string{"$KV." + kvlease.DefaultBucket + ".>", "orders.>", "foo.>"} {
		kvleasetest.Subscribe(t, spy, subj, func(m *nats.Msg) { written <- m })
	}
	gets := func() (n int) { // handled by the get endpoint or the catch-all, whichever took each
		for _, e := range serviceStats(t, f.nc).Endpoints {
			if e.Subject == api.SubjectGet || e.Subject == "lease.v1.>" {
				n += e.NumRequests
			}
		}
		return n
	}
	before := gets()
	// Data subjects of the bucket's, and of another application's, which
	// the caller may not publish to but the service may (an outside client
	// had it put a grant into another application's stream): only inboxes
	// get replies, and never a wildcard.
	replies := []string{"$KV." + kvlease.DefaultBucket + ".victim", "$KV." + kvlease.DefaultBucket + ".fresh", "orders.new", "foo.*", "_INBOX.>"}
	for _, reply := range replies {
		if err := f.nc.PublishMsg(&nats.Msg{Subject: api.SubjectGet, Reply: reply, Data: []byte(`{"name":"victim"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The requests are counted once handled (answered, or dropped).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := gets() - before
		if n >= len(replies) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service handled %d of the %d requests", n, len(replies))
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-written:
		t.Errorf("the service published on %s: %s", m.Subject, m.Data)
	default:
	}
	if cur, err := f.store.Get(ctx, "victim"); err != nil || cur.Revision != rec.Revision {
		t.Errorf("the lease after the requests: %+v, %v; want it untouched at revision %d", cur, err, rec.Revision)
	}
}

// Reply prefixes of the operator's choosing: a caller whose inboxes begin
// app.inbox is answered there, and one on _INBOX no longer; an empty
// prefix, which would let every subject through, is refused.
func TestReplyPrefixes(t *testing.T) {
	cfg := grantor.DefaultConfig()
	cfg.ReplyPrefixes = []string{"app.inbox"}
	f := start(t, cfg)
	custom := kvleasetest.Connect(t, f.url, nats.CustomInboxPrefix("app.inbox"))
	if _, err := custom.Request(api.SubjectGet, []byte(`{"name":"x"}`), 5*time.Second); err != nil {
		t.Fatalf("a request replying on app.inbox.…: %v", err)
	}
	if _, err := f.nc.Request(api.SubjectGet, []byte(`{"name":"x"}`), 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a request replying on _INBOX.…: %v, want no answer", err)
	}
	for _, bad := range [][]string{{""}, {"a.*"}, {"$KV.leases"}} {
		cfg.ReplyPrefixes = bad
		if err := cfg.Validate(); !errors.Is(err, grantor.ErrConfig) {
			t.Errorf("reply prefixes %q: %v, want ErrConfig", bad, err)
		}
	}
}

// serviceStats asks the service for micro's stats of its endpoints.
func serviceStats(t *testing.T, nc *nats.Conn) micro.Stats {
	t.Helper()
	m, err := nc.Request("$SRV.STATS."+api.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	return stats
}

// A request over the NATS server's max_payload is refused before it is
// sent, as too large: it was "unavailable", which Acquire retries until
// its context ends (never, with context.Background(); found by an outside
// client). The service's own size limits match kvlease.ErrTooLarge too, as
// a Store's refusal does.
func TestClientRefusesARequestOverMaxPayload(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	big := map[string]string{"k": strings.Repeat("x", 2<<20)}
	_, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "big", Holder: "h", Duration: 5 * time.Second, Attributes: big})
	if !errors.Is(err, kvlease.ErrTooLarge) || errors.Is(err, kvlease.ErrUnavailable) || errors.Is(err, kvlease.ErrNotSent) {
		t.Fatalf("grant over max_payload: %v, want ErrTooLarge, not ErrUnavailable or ErrNotSent (retried)", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := kvlease.Acquire(context.Background(), f.client, "big", "h", 5*time.Second, kvlease.WithAttributes(big))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, kvlease.ErrTooLarge) {
			t.Fatalf("Acquire over max_payload: %v, want ErrTooLarge", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire over max_payload did not return")
	}
	over := map[string]string{"k": strings.Repeat("x", grantor.DefaultConfig().MaxAttributeBytes+1)}
	_, err = f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "big", Holder: "h", Duration: 5 * time.Second, Attributes: over})
	if !errors.Is(err, kvlease.ErrTooLarge) || !errors.Is(err, api.ErrTooLarge) {
		t.Fatalf("grant over the service's attribute limit: %v, want api.ErrTooLarge, also kvlease.ErrTooLarge", err)
	}
}

// A holder that is not UTF-8 is refused, through the Go client and on the
// wire, where JSON turns invalid bytes and lone surrogates into U+FFFD:
// "\xff" and "\xfe" were granted as one holder, "\uFFFD" (found by an
// outside client).
func TestHolderThatIsNotUTF8IsRefused(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	for _, holder := range []string{"\xff", "a\xfeb"} {
		if _, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "utf8", Holder: holder, Duration: 5 * time.Second}); !errors.Is(err, kvlease.ErrInvalidHolder) {
			t.Errorf("client grant to holder %q: %v, want ErrInvalidHolder", holder, err)
		}
	}
	for _, body := range []string{`{"name":"utf8","holder":"\ud800"}`, "{\"name\":\"utf8\",\"holder\":\"\xff\"}"} {
		reply, err := f.nc.Request(api.SubjectGrant, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(api.HeaderErrorCode); code != api.CodeInvalidArgument {
			t.Errorf("grant %s: code %q (%s), want %s", body, code, reply.Data, api.CodeInvalidArgument)
		}
	}
}

// A revocation, an operator's act, is logged by the node that carried it
// out, with its reason, and so is freeing a held lease at once, which the
// history does not record (found by an outside client).
func TestRevocationLogged(t *testing.T) {
	var logged kvleasetest.Logs
	f := start(t, grantor.DefaultConfig(), grantor.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	ctx := t.Context()
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "audited", Holder: "h", Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(ctx, "audited", "stuck worker"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(ctx, "audited", "host is gone", kvlease.FreeNow()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reason="stuck worker" free_now=false`, `reason="host is gone" free_now=true`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logged.String())
		}
	}
}

// The wire replies of a revocation that frees a hold, and of one naming a
// grantor's own lease (found by an outside client): freeing the hold of
// an earlier revocation ends no record, and its reply names the revoked
// tenure only (it had a revision 0 and times of the year 1); the
// observer's lease cannot be revoked (it could, and the node's history
// and change events stopped until it was taken again).
func TestRevokeWireReplies(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	l, code := request(t, f.nc, api.SubjectGrant, `{"name":"fn","holder":"w7","ttl":"30s"}`)
	if code != "" {
		t.Fatal(code)
	}
	if _, code := request(t, f.nc, api.SubjectRevoke, `{"name":"fn"}`); code != "" {
		t.Fatal(code)
	}
	reply, err := f.nc.Request(api.SubjectRevoke, []byte(`{"name":"fn","free_now":true}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(reply.Data, &body); err != nil || reply.Header.Get(api.HeaderErrorCode) != "" {
		t.Fatalf("free_now of a held lease: %s %v", reply.Data, err)
	}
	if body["name"] != "fn" || body["holder"] != "w7" || body["token"] != float64(l.Token) || body["server_time"] == nil {
		t.Errorf("free_now of a held lease replied %s; want its name, holder w7 and token %d", reply.Data, l.Token)
	}
	for _, k := range []string{"revision", "ttl", "stored_at", "granted_at", "expires_at"} {
		if _, ok := body[k]; ok {
			t.Errorf("free_now of a held lease replied %s, with %s", reply.Data, k)
		}
	}
	if _, code := request(t, f.nc, api.SubjectGrant, `{"name":"fn","holder":"w8","ttl":"30s"}`); code != "" {
		t.Errorf("grant after free_now: %s, want the lease free", code)
	}
	if _, code := request(t, f.nc, api.SubjectRevoke, `{"name":"`+api.ObserverLease+`","reason":"x"}`); code != api.CodeInvalidArgument {
		t.Errorf("revoke of %s: code %q, want %s", api.ObserverLease, code, api.CodeInvalidArgument)
	}
}

// A revocation's reply says whether the lease stays held: held_back_ms,
// about how long from server_time no grant is allowed, absent with
// free_now. A client cannot tell otherwise whether the grantor held it:
// one older than the revocation hold frees the lease at once, and
// `leased revoke` said "held until that holder's deadline has passed"
// all the same, while a grant went through at once (found trying an
// upgrade: a new CLI against an older grantor).
func TestRevokeReplySaysHowLongItHolds(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	for _, tc := range []struct {
		req  string
		held bool
	}{
		{`{"name":"hb"}`, true},
		{`{"name":"hb","free_now":true}`, false},
	} {
		if _, code := request(t, f.nc, api.SubjectGrant, `{"name":"hb","holder":"w7","ttl":"30s"}`); code != "" {
			t.Fatal(code)
		}
		reply, err := f.nc.Request(api.SubjectRevoke, []byte(tc.req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		if err := json.Unmarshal(reply.Data, &body); err != nil || reply.Header.Get(api.HeaderErrorCode) != "" {
			t.Fatalf("revoke %s: %s %v", tc.req, reply.Data, err)
		}
		ms, ok := body["held_back_ms"].(float64)
		// The tenure's server TTL: 30 s and the grantor's margin.
		if tc.held && (!ok || ms < 30000 || ms > 35000) {
			t.Errorf("revoke %s replied %s; want held_back_ms of the tenure's server TTL, 30 s and the margin", tc.req, reply.Data)
		}
		if !tc.held && ok {
			t.Errorf("revoke %s replied %s; want no held_back_ms (the lease is free)", tc.req, reply.Data)
		}
		if _, code := request(t, f.nc, api.SubjectRevoke, `{"name":"hb","free_now":true}`); tc.held && code != "" {
			t.Fatal(code)
		}
	}
}

// Through the service client too, an Acquire on a closed connection fails
// at once with ErrConnClosed, not "the grantor did not answer a read of
// its clock in time" once its context has ended (found by an outside
// client).
func TestClientAcquireOnAClosedConnectionFailsAtOnce(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	f.nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := kvlease.Acquire(ctx, f.client, "closed.conn", "h1", time.Minute); !errors.Is(err, kvlease.ErrConnClosed) ||
		!errors.Is(err, kvlease.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("Acquire: %v (ctx %v); want ErrConnClosed before its ctx ends", err, ctx.Err())
	}
}

// newOn makes a service of bucket on a connection of its own to url.
func newOn(t *testing.T, url, bucket string) *grantor.Service {
	t.Helper()
	nc := kvleasetest.Connect(t, url)
	st, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, nc), kvlease.WithBucket(bucket))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := grantor.New(st, nc, grantor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	return svc
}

// Lease services of two buckets on one NATS account share their subjects
// and their queue group, so each request went to one of them at random:
// a lease was granted twice at once, once in each bucket (found by an
// outside client, with a second `serve --bucket other`). A service refuses
// to start beside another bucket's; one of the same bucket is welcome.
func TestServiceRefusesToServeBesideAnotherBucket(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	if err := newOn(t, f.url, kvlease.DefaultBucket).Start(t.Context()); err != nil {
		t.Fatalf("a second service of the same bucket: %v", err)
	}
	other := newOn(t, f.url, "other")
	err := other.Start(t.Context())
	if !errors.Is(err, grantor.ErrOtherBucket) || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("a service of another bucket: Start = %v; want ErrOtherBucket naming both", err)
	}
	for i := range 4 {
		if _, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "twice", Holder: fmt.Sprint("h", i), Duration: time.Minute}); i > 0 && !errors.Is(err, kvlease.ErrHeld) {
			t.Fatalf("grant %d of one lease: %v; want held (granted in another bucket?)", i, err)
		}
	}

	// Refused before anything that acts: its observer campaigned, won its
	// bucket's election (within a second: by now) and published change
	// events (found in review).
	if other.Observing() {
		t.Error("the refused service observes its bucket")
	}

	// Two started at once: not both serve, not even for a moment (both
	// were ready, and then both failed, 200 ms later; found by an outside
	// client).
	srv := kvleasetest.NewServer(t)
	a, b := newOn(t, srv.ClientURL(), "a"), newOn(t, srv.ClientURL(), "b")
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { errA = a.Start(t.Context()) })
	wg.Go(func() { errB = b.Start(t.Context()) })
	wg.Wait()
	// At least one refuses, before it has served anything (both may).
	if !errors.Is(errA, grantor.ErrOtherBucket) && !errors.Is(errB, grantor.ErrOtherBucket) {
		t.Fatalf("started at once: %v, %v; want ErrOtherBucket from one at least", errA, errB)
	}
}

// Ends hints when the connection comes back: an end announced while it was
// down was not heard, and a keeper waiting out its retry's backoff lost a
// registration with time left to renew it (found by an outside client,
// with a server paused 5 s).
func TestEndsHintsOnReconnect(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig())
	rec, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "back", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := f.client.Ends(t.Context(), "back", rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	cid, err := f.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.NATS().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ends:
	case <-time.After(10 * time.Second):
		t.Fatalf("no hint within 10 s of a reconnect (reconnects: %d)", f.nc.Stats().Reconnects)
	}
}

// A registration kept through the service hears its end announced: revoked
// (or removed by gossip), it is lost at once, not at its next renewal, D/3
// later (client.Register passes Client.Ends to its keeper; the reconnect
// hint is TestEndsHintsOnReconnect's).
func TestRegisterHearsItsEnd(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "10.0.0.1:80"}
	k, err := client.Register(t.Context(), f.client, reg, "h", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close(context.Background())
	if _, err := f.store.Revoke(t.Context(), reg.LeaseName(), "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the registration's keeper did not hear its revocation within 5 s (its renewal is due 10 s after the grant)")
	}
}

// A registration over the attribute limits says what its attributes are:
// "17 attributes, limit 16" answered 16 metadata keys, the address being
// one too (found by an outside client).
func TestRegisterTooLargeSaysWhatItsAttributesAre(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	meta := map[string]string{}
	for i := range 16 {
		meta[fmt.Sprint("k", i)] = "v"
	}
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "10.0.0.1:80", Meta: meta}
	_, err := client.Register(t.Context(), f.client, reg, "h", 30*time.Second)
	if !errors.Is(err, kvlease.ErrTooLarge) || !errors.Is(err, api.ErrTooLarge) || !strings.Contains(err.Error(), "meta.KEY for each metadata key") {
		t.Fatalf("a registration of 16 metadata keys: %v; want too large, saying what a registration's attributes are", err)
	}
	if _, err := f.store.Get(t.Context(), reg.LeaseName()); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("after the refusal: %v, want no registration", err)
	}
}

// A service starts once: started again after Stop (or after a Stop before
// any Start) it answered every request "shutting down" and took a share
// of them; and New refuses a nil connection, on which Start panicked
// (found by an outside client).
func TestServiceStartsOnce(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	f.svc.Stop()
	if err := f.svc.Start(t.Context()); !errors.Is(err, grantor.ErrStarted) {
		t.Errorf("Start after Stop: %v; want ErrStarted", err)
	}
	never := newOn(t, f.url, kvlease.DefaultBucket)
	never.Stop()
	if err := never.Start(t.Context()); !errors.Is(err, grantor.ErrStarted) {
		t.Errorf("Start after a Stop before it: %v; want ErrStarted", err)
	}
	if _, err := grantor.New(f.store, nil, grantor.DefaultConfig()); !errors.Is(err, grantor.ErrConfig) {
		t.Errorf("New with a nil connection: %v; want ErrConfig", err)
	}
}

// workerGoroutines counts the goroutines serving requests of any Service.
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "grantor.(*Service).worker(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Stop ends the service's workers: idle ones waited out workerIdle (10 s)
// after Stop had returned, and a program that checks for leaked goroutines
// once its grantor is stopped found them (found by an outside client).
func TestStopEndsIdleWorkers(t *testing.T) {
	before := workerGoroutines()
	f := start(t, grantor.DefaultConfig())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l, err := kvlease.Acquire(t.Context(), f.client, fmt.Sprintf("workers.%d", i), "h", 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if err := l.Release(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := workerGoroutines(); n <= before {
		t.Fatalf("%d workers while serving, %d before: the test shows nothing", n, before)
	}
	f.svc.Stop()
	// A worker has marked itself done just before its goroutine ends: give
	// them a moment, far under the 10 s an idle one waited.
	for deadline := time.Now().Add(time.Second); ; runtime.Gosched() {
		n := workerGoroutines()
		if n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers a second after Stop, %d before it", n, before)
		}
	}
	f.svc.Stop() // a second Stop is harmless
}

// An operator's revocation cannot pass for an end the grantor tells by
// its reason: given a reason beginning "gossip: " it was recorded in the
// history, shown by leased history and the timeline, counted and traced
// as a registration removed by gossip, and given a watch's
// kvlease.UnseenEndReason, as an end of unknown cause (found by an
// operator probe of the history).
func TestRevokeRefusesTheGrantorsEndReasons(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "spoof", Holder: "w1", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{history.GossipReasonPrefix + "node n9 dead", kvlease.UnseenEndReason} {
		if _, err := f.client.Revoke(ctx, "spoof", reason, kvlease.FreeNow()); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("revoke with the reason %q: %v, want invalid_argument", reason, err)
		}
	}
	if got, err := f.client.Get(ctx, "spoof"); err != nil || kvlease.Token(got.Token) != rec.Token {
		t.Errorf("after the refused revocations: %+v, %v; want tenure %d held", got, err, rec.Token)
	}
}

// A revocation naming a tenure (the API's token, kvlease.OnlyTenure
// through the client) ends only that tenure: the client sent FreeNow alone
// and dropped the token, so a revocation meant for an ended tenure ended
// the next holder's.
func TestRevokeOnlyTheTenureNamed(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	old, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "named", Holder: "w1", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: "named", Holder: "w1", Token: old.Token, Revision: old.Revision, Secret: old.Secret}); err != nil {
		t.Fatal(err)
	}
	cur, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "named", Holder: "w2", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(ctx, "named", "stuck w1", kvlease.FreeNow(), kvlease.OnlyTenure(old.Token)); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("revoke of the ended tenure %d: %v, want ErrNotFound", old.Token, err)
	}
	if got, err := f.client.Get(ctx, "named"); err != nil || kvlease.Token(got.Token) != cur.Token {
		t.Fatalf("after: %+v, %v; want tenure %d held", got, err, cur.Token)
	}
	if got, err := f.client.Revoke(ctx, "named", "stuck w2", kvlease.FreeNow(), kvlease.OnlyTenure(cur.Token)); err != nil || kvlease.Token(got.Token) != cur.Token {
		t.Fatalf("revoke of the live tenure %d: %+v, %v", cur.Token, got, err)
	}
}
