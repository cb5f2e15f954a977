package fence_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/telemetry"
)

// A refusal aborts the transaction even if Check's ctx ends as it refuses
// (a ctx of the check's own, shorter than the transaction's): the abort
// was sent on that ctx, so database/sql sent nothing, and a caller that
// went on committed its stale write. The ctx is cancelled here by the
// refusal's own count, between the read and the abort.
func TestSQLRefusalAbortsTheTransactionAsItsCtxEnds(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	const res = "account-8"
	if err := fencedWrite(ctx, db, f, nil, res, 9, "newer"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, err := telemetry.NewMetrics(cancelOnRejection{cancel: cancel})
	if err != nil {
		t.Fatal(err)
	}
	f.Metrics = m
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := f.Check(cctx, tx, res, 3); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Check(3) after 9: %v; want ErrStaleToken", err)
	}
	_, werr := tx.ExecContext(ctx, "UPDATE account SET value = 'stale', token = 3 WHERE id = $1", res)
	cerr := tx.Commit()
	if werr == nil || cerr == nil {
		t.Errorf("after the refusal, with its ctx ended: the write's error %v, the commit's %v; want both refused", werr, cerr)
	}
	if value, tok := account(t, db, res); value != "newer" || tok != 9 {
		t.Fatalf("account = %q (token %d): a stale holder committed in spite of the refusal; want %q (token 9)", value, tok, "newer")
	}
}

// cancelOnRejection is a MeterProvider whose fence rejection counter
// calls cancel; every other instrument is a no-op.
type cancelOnRejection struct {
	noop.MeterProvider
	cancel func()
}

func (p cancelOnRejection) Meter(string, ...metric.MeterOption) metric.Meter {
	return cancelMeter{cancel: p.cancel}
}

type cancelMeter struct {
	noop.Meter
	cancel func()
}

func (m cancelMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name == telemetry.MetricFenceRejections {
		return cancelCounter{cancel: m.cancel}, nil
	}
	return noop.Int64Counter{}, nil
}

type cancelCounter struct {
	noop.Int64Counter
	cancel func()
}

func (c cancelCounter) Add(context.Context, int64, ...metric.AddOption) { c.cancel() }
