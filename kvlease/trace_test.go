package kvlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
)

// traceStore opens a Store on a fresh server whose spans go to a recorder.
func traceStore(t *testing.T) (*kvlease.Store, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := kvleasetest.NewServer(t)
	return kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithTracerProvider(tp)), rec
}

// oneSpan returns the only span that ended after the first n, and checks
// that it is a client span named want.
func oneSpan(t *testing.T, rec *tracetest.SpanRecorder, n int, want string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()[n:]
	if len(spans) != 1 {
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.Name()
		}
		t.Fatalf("operation ended %d spans %v, want one %q", len(spans), names, want)
	}
	if spans[0].Name() != want {
		t.Fatalf("span %q, want %q", spans[0].Name(), want)
	}
	if k := spans[0].SpanKind(); k != trace.SpanKindClient {
		t.Errorf("span %q kind %v, want client", want, k)
	}
	return spans[0]
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs checks string and int64 attributes; absent lists keys that
// must not be set.
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]any, absent ...attribute.Key) {
	t.Helper()
	got := spanAttrs(s)
	for k, w := range want {
		v, ok := got[k]
		if !ok {
			t.Errorf("span %q: no attribute %s", s.Name(), k)
			continue
		}
		switch w := w.(type) {
		case string:
			if v.Type() != attribute.STRING || v.AsString() != w {
				t.Errorf("span %q: %s = %v, want %q", s.Name(), k, v.Emit(), w)
			}
		case int64:
			if v.Type() != attribute.INT64 || v.AsInt64() != w {
				t.Errorf("span %q: %s = %v, want %d", s.Name(), k, v.Emit(), w)
			}
		default:
			t.Fatalf("checkAttrs: unsupported %T", w)
		}
	}
	for _, k := range absent {
		if v, ok := got[k]; ok {
			t.Errorf("span %q: unexpected %s = %v", s.Name(), k, v.Emit())
		}
	}
}

func checkOK(t *testing.T, s sdktrace.ReadOnlySpan) {
	t.Helper()
	if st := s.Status(); st.Code == codes.Error {
		t.Errorf("span %q status %v %q, want not Error", s.Name(), st.Code, st.Description)
	}
	for _, e := range s.Events() {
		if e.Name == "exception" {
			t.Errorf("span %q has an exception event: %v", s.Name(), e.Attributes)
		}
	}
}

func TestTraceOperations(t *testing.T) {
	st, rec := traceStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const d = 2 * time.Second
	ttl := int64(kvlease.ServerTTL(d, st.GrantorMargin()) / time.Second) // 3

	n := len(rec.Ended())
	r, err := st.Grant(ctx, kvlease.GrantRequest{Name: "svc/a", Holder: "h1", Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	s := oneSpan(t, rec, n, "lease.grant")
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:    "svc/a",
		telemetry.AttrHolder:  "h1",
		telemetry.AttrToken:   int64(r.Token),
		telemetry.AttrTTL:     ttl,
		telemetry.AttrOutcome: "ok",
	})
	checkOK(t, s)

	n = len(rec.Ended())
	r2, err := st.Renew(ctx, kvlease.RenewRequest{Name: "svc/a", Holder: "h1", Token: r.Token, Revision: r.Revision, Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token != r.Token || r2.Revision <= r.Revision {
		t.Fatalf("renewal record %+v after %+v", r2, r)
	}
	s = oneSpan(t, rec, n, "lease.renew")
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:    "svc/a",
		telemetry.AttrHolder:  "h1",
		telemetry.AttrToken:   int64(r.Token), // the tenure's token, not the new revision
		telemetry.AttrTTL:     ttl,
		telemetry.AttrOutcome: "ok",
	})
	checkOK(t, s)
	// A renewal that keeps the tenure's duration (0) says which it kept
	// (it said 0 ms; found by an outside client).
	n = len(rec.Ended())
	if r2, err = st.Renew(ctx, kvlease.RenewRequest{Name: "svc/a", Holder: "h1", Token: r.Token, Revision: r2.Revision}); err != nil {
		t.Fatal(err)
	}
	checkAttrs(t, oneSpan(t, rec, n, "lease.renew"), map[attribute.Key]any{telemetry.AttrDuration: d.Milliseconds()})

	n = len(rec.Ended())
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "svc/a", Holder: "h1", Token: r2.Token, Revision: r2.Revision}); err != nil {
		t.Fatal(err)
	}
	s = oneSpan(t, rec, n, "lease.release")
	// With the released tenure's TTL, as README has every span of an
	// operation (it had none; found by an operator).
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:     "svc/a",
		telemetry.AttrHolder:   "h1",
		telemetry.AttrToken:    int64(r.Token),
		telemetry.AttrRevision: int64(r2.Revision),
		telemetry.AttrTTL:      ttl,
		telemetry.AttrOutcome:  "ok",
	})
	checkOK(t, s)

	rb, err := st.Grant(ctx, kvlease.GrantRequest{Name: "svc/b", Holder: "h2", Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	n = len(rec.Ended())
	if _, err := st.Revoke(ctx, "svc/b", "maintenance"); err != nil {
		t.Fatal(err)
	}
	s = oneSpan(t, rec, n, "lease.revoke")
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:    "svc/b",
		telemetry.AttrHolder:  "h2",
		telemetry.AttrToken:   int64(rb.Token),
		telemetry.AttrReason:  "maintenance",
		telemetry.AttrOutcome: "ok",
	})
	checkOK(t, s)

	// Spans are roots here (no parent in ctx) and each has its own trace.
	ids := map[trace.TraceID]bool{}
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() {
			t.Errorf("span %q has a parent %v", s.Name(), s.Parent().SpanID())
		}
		ids[s.SpanContext().TraceID()] = true
	}
	if len(ids) != len(rec.Ended()) {
		t.Errorf("%d spans share %d traces", len(rec.Ended()), len(ids))
	}
}

func TestTraceParent(t *testing.T) {
	st, rec := traceStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tp := sdktrace.NewTracerProvider() // a separate provider for the caller's span
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, parent := tp.Tracer("test").Start(ctx, "caller")
	defer parent.End()
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "svc/p", Holder: "h1", Duration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s := oneSpan(t, rec, 0, "lease.grant")
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("lease.grant is not a child of the caller's span")
	}
}

func TestTraceGrantHeld(t *testing.T) {
	st, rec := traceStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := st.Grant(ctx, kvlease.GrantRequest{Name: "svc/a", Holder: "h1", Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := len(rec.Ended())
	_, err = st.Grant(ctx, kvlease.GrantRequest{Name: "svc/a", Holder: "h2", Duration: 2 * time.Second})
	var held *kvlease.HeldError
	if !errors.As(err, &held) || held.Holder != "h1" || held.Token != r.Token {
		t.Fatalf("second Grant = %v, want HeldError by h1", err)
	}
	s := oneSpan(t, rec, n, "lease.grant")
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:    "svc/a",
		telemetry.AttrHolder:  "h2", // the requester
		telemetry.AttrOutcome: "held",
	}, telemetry.AttrToken, telemetry.AttrTTL) // nothing was granted
	if st := s.Status(); st.Code != codes.Error || st.Description != err.Error() {
		t.Errorf("status = %v %q, want Error %q", st.Code, st.Description, err.Error())
	}
	var found bool
	for _, e := range s.Events() {
		if e.Name != "exception" {
			continue
		}
		found = true
		for _, kv := range e.Attributes {
			if kv.Key == "exception.message" && kv.Value.AsString() != err.Error() {
				t.Errorf("exception.message = %q, want %q", kv.Value.AsString(), err.Error())
			}
		}
	}
	if !found {
		t.Errorf("no exception event on the failed grant; events: %v", s.Events())
	}
}

func TestTraceRenewNotHolder(t *testing.T) {
	st, rec := traceStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := st.Grant(ctx, kvlease.GrantRequest{Name: "svc/a", Holder: "h1", Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := len(rec.Ended())
	_, err = st.Renew(ctx, kvlease.RenewRequest{Name: "svc/a", Holder: "intruder", Token: r.Token, Revision: r.Revision, Duration: 2 * time.Second})
	if !errors.Is(err, kvlease.ErrNotHolder) {
		t.Fatalf("Renew by another holder = %v, want ErrNotHolder", err)
	}
	s := oneSpan(t, rec, n, "lease.renew")
	checkAttrs(t, s, map[attribute.Key]any{
		telemetry.AttrName:    "svc/a",
		telemetry.AttrHolder:  "intruder",
		telemetry.AttrOutcome: "not_holder",
	})
	if s.Status().Code != codes.Error {
		t.Errorf("status %v, want Error", s.Status().Code)
	}
}

// A renewal is its own short trace, linked to the span of the grant that
// began the tenure (whose traceparent the lease record carries).
func TestTraceRenewalLinksToGrant(t *testing.T) {
	st, rec := traceStore(t)
	ctx := context.Background()
	g, err := st.Grant(ctx, kvlease.GrantRequest{Name: "linked", Holder: "h", Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	grant := oneSpan(t, rec, 0, "lease.grant")
	if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: "linked", Holder: "h", Token: g.Token, Revision: g.Revision}); err != nil {
		t.Fatal(err)
	}
	renew := oneSpan(t, rec, 1, "lease.renew")
	if renew.SpanContext().TraceID() == grant.SpanContext().TraceID() {
		t.Fatal("the renewal is in the grant's trace; want its own short trace")
	}
	links := renew.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != grant.SpanContext().SpanID() ||
		links[0].SpanContext.TraceID() != grant.SpanContext().TraceID() {
		t.Fatalf("renewal links %+v, want the grant span %v", links, grant.SpanContext())
	}
	got, err := st.Get(ctx, "linked")
	if sc := kvlease.SpanContextOfGrant(got); err != nil || !sc.Equal(grant.SpanContext().WithRemote(true)) {
		t.Fatalf("grant trace stored in the record: %v, %v", kvlease.SpanContextOfGrant(got), err)
	}
}

// spanNamed returns the one ended span called name.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// The holder's spans carry what the grantor cannot know: its margin and
// the time its lease had left before and after the request. Each is the
// parent of the grantor's span for the request, and a holder's renewal and
// release link to the grant like the grantor's do.
func TestTraceHolderSpans(t *testing.T) {
	st, rec := traceStore(t) // the Lease uses the Store's tracer provider
	ctx := context.Background()
	const d, margin = 5 * time.Second, 1200 * time.Millisecond
	l, err := kvlease.Acquire(ctx, st, "held", "h", d, kvlease.WithHolderMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	validity := kvlease.HolderValidity(d, kvlease.DefaultClockRate, margin).Milliseconds()
	grant := spanNamed(t, rec, "lease.grant")
	for _, c := range []struct{ holder, grantor string }{
		{"lease.holder.acquire", "lease.grant"},
		{"lease.holder.renew", "lease.renew"},
		{"lease.holder.release", "lease.release"},
	} {
		h, g := spanNamed(t, rec, c.holder), spanNamed(t, rec, c.grantor)
		checkOK(t, h)
		checkAttrs(t, h, map[attribute.Key]any{
			telemetry.AttrName: "held", telemetry.AttrHolder: "h", telemetry.AttrOutcome: "ok",
			telemetry.AttrHolderMargin: margin.Milliseconds(), telemetry.AttrToken: int64(l.Token()),
		})
		if g.Parent().SpanID() != h.SpanContext().SpanID() {
			t.Errorf("%s is not the child of %s", c.grantor, c.holder)
		}
		attrs := spanAttrs(h)
		for _, k := range []attribute.Key{telemetry.AttrRemaining, telemetry.AttrRemainingAfter} {
			if v, ok := attrs[k]; ok && (v.AsInt64() <= 0 || v.AsInt64() > validity) {
				t.Errorf("%s: %s = %d ms, want in (0, %d]", c.holder, k, v.AsInt64(), validity)
			}
		}
		if c.holder != "lease.holder.acquire" {
			if _, ok := attrs[telemetry.AttrRemaining]; !ok {
				t.Errorf("%s: no %s", c.holder, telemetry.AttrRemaining)
			}
			if links := h.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != grant.SpanContext().SpanID() {
				t.Errorf("%s links %+v, want the grant", c.holder, links)
			}
		}
	}
	for _, name := range []string{"lease.holder.acquire", "lease.holder.renew"} {
		if _, ok := spanAttrs(spanNamed(t, rec, name))[telemetry.AttrRemainingAfter]; !ok {
			t.Errorf("%s: no %s", name, telemetry.AttrRemainingAfter)
		}
	}
}
