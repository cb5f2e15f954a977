package grantor_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
)

// A lease whose holder keeps changing is flagged: the ownership-change
// metric says so, later grants' spans carry the flag, and list marks it.
func TestFlappingFlagged(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	f := start(t, grantor.DefaultConfig(), grantor.WithMeterProvider(mp), grantor.WithFlapping(time.Minute, 2),
		grantor.WithTracerProvider(tp))
	ctx := t.Context()
	changes := make(chan struct{}, 16)
	w, err := f.store.Watch(ctx, "flappy", kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.Events() {
			if ev.Type == kvlease.EventGranted {
				changes <- struct{}{}
			}
		}
	}()
	for i, holder := range []string{"a", "b", "c", "d"} {
		rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "flappy", Holder: holder, Duration: 5 * time.Second})
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		<-changes // the service's watcher sees it too (same stream, delivered in order)
		if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: "flappy", Holder: holder, Token: rec.Token,
			Revision: rec.Revision, Secret: rec.Secret}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "flappy", Holder: "e", Duration: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	<-changes
	// The service's own watcher may still be a message behind the test's.
	var ls []grantor.Lease
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if ls, err = f.client.List(ctx, "flappy"); err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 && ls[0].Flapping {
			break
		}
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
	var flagged bool
	for _, s := range spans.Ended() {
		if s.Name() == grantor.SubjectGrant {
			for _, e := range s.Events() {
				flagged = flagged || e.Name == "lease.flapping"
			}
		}
	}
	if !flagged {
		t.Fatal("no grant span carries the flapping event")
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
