package grantor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// points returns the int64 sum's data points of the named metric.
func points(t *testing.T, r *sdkmetric.ManualReader, name string) []metricdata.DataPoint[int64] {
	t.Helper()
	s, _ := telemetrytest.Metric(t, r, name).(metricdata.Sum[int64])
	return s.DataPoints
}

// countBy sums the named counter's points by the value of key.
func countBy(t *testing.T, r *sdkmetric.ManualReader, name string, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, dp := range points(t, r, name) {
		var k string
		for i, key := range keys {
			v, _ := dp.Attributes.Value(key)
			if i > 0 {
				k += "/"
			}
			k += v.Emit()
		}
		out[k] += dp.Value
	}
	return out
}

// The grantor's metrics: requests by operation and outcome with their
// latency, the bucket's changes by event, and ownership changes whose
// series do not grow with the number of leases (names only for the chosen
// prefixes). The micro stats reply counts the error replies.
func TestGrantorMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	f := start(t, grantor.DefaultConfig(), grantor.WithMeterProvider(mp), grantor.WithMetricNamePrefixes("elect."))
	ctx := t.Context()
	// With history 1 a renewal or release replaces the grant in the stream:
	// wait for the service to have seen the grants (it publishes each)
	// before changing them, or a lagging watcher would see fewer.
	served, err := f.nc.SubscribeSync(api.SubjectEvents + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const leases = 200
	var recs []kvlease.Record
	for i := range leases {
		rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("job.%d", i), Holder: "h", Duration: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for _, name := range []string{"elect.a", "elect.b"} {
		if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < leases+2; n++ {
		if _, err := served.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("%d grants seen by the service: %v", n, err)
		}
	}
	if _, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: recs[0].Name, Holder: "h", Token: recs[0].Token,
		Revision: recs[0].Revision, Secret: recs[0].Secret}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: recs[1].Name, Holder: "h", Token: recs[1].Token,
		Revision: recs[1].Revision, Secret: recs[1].Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(ctx, recs[2].Name, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "short", Holder: "h", Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	// Error replies: malformed JSON, an unknown verb, a held lease, a
	// renewal with a wrong secret.
	const bad = 12
	for range bad / 4 {
		if m, err := f.nc.Request(api.SubjectGrant, []byte("{"), 5*time.Second); err != nil || m.Header.Get(micro.ErrorCodeHeader) != api.CodeInvalidArgument {
			t.Fatalf("malformed grant: %v %v", m, err)
		}
		if m, err := f.nc.Request("lease.v1.nope", []byte("{}"), 5*time.Second); err != nil || m.Header.Get(micro.ErrorCodeHeader) != api.CodeInvalidArgument {
			t.Fatalf("unknown verb: %v %v", m, err)
		}
		_, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: recs[3].Name, Holder: "other", Duration: 30 * time.Second})
		assertCode(t, err, api.CodeHeld)
		_, err = f.client.Renew(ctx, kvlease.RenewRequest{Name: recs[3].Name, Holder: "h", Token: recs[3].Token,
			Revision: recs[3].Revision, Secret: "wrong"})
		if err == nil {
			t.Fatal("renewal with a wrong secret succeeded")
		}
	}

	req := countBy(t, reader, "leased.requests", telemetry.AttrOp, telemetry.AttrOutcome)
	for k, want := range map[string]int64{
		"grant/ok": leases + 3, "renew/ok": 1, "release/ok": 1, "revoke/ok": 1,
		"grant/invalid_argument": bad / 4, "unknown/invalid_argument": bad / 4, "grant/held": bad / 4,
	} {
		if req[k] != want {
			t.Errorf("leased.requests{%s} = %d, want %d (all: %v)", k, req[k], want, req)
		}
	}
	var total int64
	for _, n := range req {
		total += n
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var latencies uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "leased.request.duration" {
				for _, dp := range h.DataPoints {
					latencies += dp.Count
				}
			}
		}
	}
	if latencies != uint64(total) {
		t.Errorf("leased.request.duration counts %d requests, leased.requests %d", latencies, total)
	}

	// The bucket's changes reach the service's watcher on its own
	// goroutine, and the short lease lapses on the server's timer: there is
	// no event to wait on from here, so collect until they show (5 s).
	want := map[string]int64{"granted": leases + 3, "renewed": 1, "released": 1, "revoked": 1, "expired": 1}
	var events map[string]int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		events = countBy(t, reader, "leased.lease.events", telemetry.AttrEvent)
		if fmt.Sprint(events) == fmt.Sprint(want) {
			break
		}
	}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("leased.lease.events = %v, want %v", events, want)
	}

	// Ownership changes: one series for all the job.* leases, one per
	// opted-in elect.* lease.
	series := map[string]int64{}
	for _, dp := range points(t, reader, "leased.ownership.changes") {
		name, _ := dp.Attributes.Value(telemetry.AttrName)
		series[name.Emit()] += dp.Value
	}
	if len(series) != 3 || series[""] != leases+1 || series["elect.a"] != 1 || series["elect.b"] != 1 {
		t.Errorf("leased.ownership.changes series by lease.name: %v, want 3 (unnamed: %d, elect.a, elect.b)", series, leases+1)
	}

	// micro's stats reply carries the service's own counts of error replies.
	got := map[string]api.EndpointStats{}
	for _, e := range serviceStats(t, f.nc).Endpoints {
		var es api.EndpointStats
		if err := json.Unmarshal(e.Data, &es); err != nil {
			t.Fatalf("endpoint %s data %s: %v", e.Name, e.Data, err)
		}
		got[e.Subject] = es
	}
	if g := got[api.SubjectGrant]; g.Errors != 2*bad/4 || g.ErrorsByCode[api.CodeHeld] != bad/4 ||
		g.ErrorsByCode[api.CodeInvalidArgument] != bad/4 || g.Requests != leases+3+2*bad/4 {
		t.Errorf("grant endpoint stats %+v", g)
	}
	if r := got[api.SubjectRenew]; r.Errors != bad/4 || r.LastError == "" {
		t.Errorf("renew endpoint stats %+v", r)
	}
	if u := got["lease.v1.>"]; u.Errors != bad/4 || u.LastError != api.CodeInvalidArgument {
		t.Errorf("catch-all endpoint stats %+v", u)
	}
}

// An empty prefix would label every lease, and one no lease name can
// begin with (a NATS wildcard) labels none: refused (">" and "a*" were
// accepted: found by an outside client).
func TestMetricNamePrefixRefusesEmpty(t *testing.T) {
	for _, p := range []string{"", ">", "a*", "a b"} {
		_, err := grantor.New(nil, nil, grantor.DefaultConfig(), grantor.WithMetricNamePrefixes(p))
		if !errors.Is(err, grantor.ErrConfig) || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("metric name prefix %q: %v, want ErrConfig for the prefix", p, err)
		}
	}
}

// A grantor on a bucket with no lease says so: leased.leases.live is 0
// once it has caught up, not missing until the first lease (a dashboard
// showed no data, and an alert on the gauge's absence fired, for an idle
// grantor; found by an operator scraping a new serve).
func TestLiveLeasesShownWithNone(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	start(t, grantor.DefaultConfig(), grantor.WithMeterProvider(mp))
	// Bounded poll: a gauge recorded makes no event to wait on.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		g, ok := telemetrytest.Metric(t, reader, telemetry.MetricLeasesLive).(metricdata.Gauge[int64])
		if ok && len(g.DataPoints) == 1 {
			if n := g.DataPoints[0].Value; n != 0 {
				t.Fatalf("%s = %d with no lease", telemetry.MetricLeasesLive, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s 10 s after the grantor started on an empty bucket", telemetry.MetricLeasesLive)
		}
	}
}
