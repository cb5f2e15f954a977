package grantor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// A lease whose holder keeps changing is flagged: the ownership-change
// metric says so, later grants' spans carry the flag, and list marks it.
func TestFlappingFlagged(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	var logged kvleasetest.Logs
	f := start(t, grantor.DefaultConfig(), grantor.WithMeterProvider(mp), grantor.WithFlapping(time.Minute, 2),
		grantor.WithTracerProvider(tp), grantor.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	ctx := t.Context()
	started := time.Now()
	// Wait on the service's own change events, not on a watcher of the
	// test's: with one message per key in the bucket, the next grant replaces
	// a release that a lagging watcher has not read yet, and that release
	// is then never seen (nor its span recorded).
	events, err := f.nc.SubscribeSync(api.SubjectEvents + "flappy")
	if err != nil {
		t.Fatal(err)
	}
	seen := func(typ string) {
		t.Helper()
		for {
			m, err := events.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("waiting for the service to see %s: %v", typ, err)
			}
			var ev api.ChangeEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == typ {
				return
			}
		}
	}
	for i, holder := range []string{"a", "b", "c", "d"} {
		rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "flappy", Holder: holder, Duration: 5 * time.Second})
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		seen("granted")
		if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: "flappy", Holder: holder, Token: rec.Token,
			Revision: rec.Revision, Secret: rec.Secret}); err != nil {
			t.Fatal(err)
		}
		seen("released")
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "flappy", Holder: "e", Duration: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	seen("granted")
	// Three grants flapping, logged at most once a second (each was a
	// line; found by an outside client).
	if lines, most := strings.Count(logged.String(), "lease is flapping"), int(time.Since(started)/time.Second)+1; lines == 0 || lines > most {
		t.Errorf("%d 'lease is flapping' lines in %v, want 1 to %d", lines, time.Since(started).Round(time.Millisecond), most)
	}
	ls, err := f.client.List(ctx, "flappy") // the service published e's grant after counting it
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || !ls[0].Flapping {
		t.Fatalf("list: %+v, want flappy marked flapping", ls)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var flapping, total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "leased.ownership.changes" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				total += dp.Value
				if v, ok := dp.Attributes.Value("lease.flapping"); ok && v.AsBool() {
					flapping += dp.Value
				}
			}
		}
	}
	if total != 5 || flapping < 2 {
		t.Fatalf("ownership changes %d (flapping %d), want 5 with the last ones flapping", total, flapping)
	}
	f.svc.Stop()
	// The grant that makes the lease flapping (the third, threshold 2)
	// carries the event on its own span, and every grant after it: the
	// grant counts itself (its span came before the watch's count of it,
	// and the event was one grant late; found by an outside client).
	var flagged []bool
	for _, s := range spans.Ended() {
		if s.Name() == api.SubjectGrant {
			flagged = append(flagged, slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == "lease.flapping" }))
		}
	}
	if !slices.Equal(flagged, []bool{false, false, true, true, true}) {
		t.Fatalf("grant spans with the flapping event, in order: %v; want from the third on", flagged)
	}
	// The end of each tenure is a span of its own, linked to its grant.
	ends := 0
	for _, s := range spans.Ended() {
		if s.Name() == "lease.released" && len(s.Links()) == 1 && s.Links()[0].SpanContext.IsValid() {
			ends++
		}
	}
	if ends != 4 {
		t.Fatalf("%d linked lease.released spans, want 4", ends)
	}
}

// The live-lease gauge counts the leases that were live before the grantor
// started (its watch replays them) and follows grants and ends after.
func TestLiveLeasesGauge(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	var recs []kvlease.Record
	for _, name := range []string{"a", "b", "c"} {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	reader := sdkmetric.NewManualReader()
	startOn(t, srv.ClientURL(), grantor.DefaultConfig(),
		grantor.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	waitLive(t, reader, 3)
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "a", Holder: "h", Token: recs[0].Token, Revision: recs[0].Revision}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, reader, 2)
}

// waitLive collects until leased.leases.live reads want (the service's
// watcher applies events on its own goroutine), failing after 5 s.
func waitLive(t *testing.T, reader *sdkmetric.ManualReader, want int64) {
	t.Helper()
	got := int64(-1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if g, ok := telemetrytest.Metric(t, reader, "leased.leases.live").(metricdata.Gauge[int64]); ok && len(g.DataPoints) == 1 {
			got = g.DataPoints[0].Value
		}
		if got == want {
			return
		}
	}
	t.Fatalf("leased.leases.live = %d, want %d", got, want)
}

// A registration gossip removed (the registry revokes it with a "gossip: "
// reason) is counted and traced as the history has it, "removed", not
// "revoked" (found by an outside client).
func TestGossipRemovalCountedAsRemoved(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	f := start(t, grantor.DefaultConfig(), grantor.WithMeterProvider(mp), grantor.WithTracerProvider(tp))
	ctx := t.Context()
	events, err := f.nc.SubscribeSync(api.SubjectEvents + "svc.web.i1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Grant(ctx, kvlease.GrantRequest{Name: "svc.web.i1", Holder: "web-i1", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Revoke(ctx, "svc.web.i1", history.GossipReasonPrefix+"node declared dead: web-i1"); err != nil {
		t.Fatal(err)
	}
	for ended := false; !ended; {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ev api.ChangeEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		ended = ev.Type != "granted"
	}
	var names []string
	for _, s := range spans.Ended() {
		if strings.HasPrefix(s.Name(), "lease.re") {
			names = append(names, s.Name())
			for _, a := range s.Attributes() {
				if a.Key == telemetry.AttrCause && a.Value.AsString() != "removed" {
					t.Errorf("span %s: lease.cause %q, want removed", s.Name(), a.Value.AsString())
				}
			}
		}
	}
	if !slices.Contains(names, "lease.removed") || slices.Contains(names, "lease.revoked") {
		t.Errorf("end spans %q, want lease.removed", names)
	}
	counts := map[string]int64{}
	if s, ok := telemetrytest.Metric(t, reader, "leased.lease.events").(metricdata.Sum[int64]); ok {
		for _, dp := range s.DataPoints {
			v, _ := dp.Attributes.Value(telemetry.AttrEvent)
			counts[v.AsString()] += dp.Value
		}
	}
	if counts["removed"] != 1 || counts["revoked"] != 0 {
		t.Errorf("lease events %v, want one removed and no revoked", counts)
	}
}
