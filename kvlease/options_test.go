package kvlease_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// fixedGrantor grants every request a record of its own duration (the
// request's if zero), so a test can make it grant less or more than asked.
type fixedGrantor struct {
	d      time.Duration
	grants int
}

var _ kvlease.Grantor = (*fixedGrantor)(nil)

func (g *fixedGrantor) Grant(_ context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	g.grants++
	d := g.d
	if d == 0 {
		d = req.Duration
	}
	return kvlease.Record{Name: req.Name, Holder: req.Holder, Token: 1, Revision: 1, Duration: d}, nil
}

func (g *fixedGrantor) Renew(context.Context, kvlease.RenewRequest) (kvlease.Record, error) {
	return kvlease.Record{}, kvlease.ErrUnavailable
}

func (g *fixedGrantor) Release(context.Context, kvlease.ReleaseRequest) error { return nil }

// Every option refuses a value it cannot take with ErrInvalidOption, before
// anything is sent; a nil option is refused the same way.
func TestOptionsRejectBadValues(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		for name, opt := range map[string]kvlease.Option{
			"nil option":              nil,
			"empty bucket":            kvlease.WithBucket(""),
			"bucket with a dot":       kvlease.WithBucket("a.b"),
			"bucket with a space":     kvlease.WithBucket("a b"),
			"no replicas":             kvlease.WithReplicas(0),
			"six replicas":            kvlease.WithReplicas(6),
			"negative grantor margin": kvlease.WithGrantorMargin(-time.Millisecond),
			"minimum below the floor": kvlease.WithDurationRange(time.Second-time.Millisecond, time.Minute),
			"maximum below minimum":   kvlease.WithDurationRange(time.Minute, time.Second),
			"marker TTL below 1 s":    kvlease.WithMarkerTTL(999 * time.Millisecond),
			"nil tracer provider":     kvlease.WithTracerProvider(nil),
			"nil logger":              kvlease.WithLogger(nil),
			"batch break-even 1":      kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) { l.MinMessages = 1 })),
			"batch size below break-even": kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) {
				l.MinMessages, l.MaxMessages = 16, 8
			})),
			"no batch in flight": kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) { l.MaxInFlight = 0 })),
			"no batch timeout":   kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) { l.Timeout = 0 })),
			"negative linger":    kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) { l.Linger = -time.Millisecond })),
			"linger over 1s":     kvlease.WithBatchLimits(batchLimits(func(l *kvlease.BatchLimits) { l.Linger = 2 * time.Second })),
			"nil meter provider": kvlease.WithStoreMeterProvider(nil),
		} {
			t.Run(name, func(t *testing.T) {
				// Options are checked before js is touched: a nil js is never used.
				st, err := kvlease.Open(t.Context(), nil, kvlease.WithBucket("ok"), opt)
				if !errors.Is(err, kvlease.ErrInvalidOption) || st != nil {
					t.Fatalf("Open = (%v, %v), want ErrInvalidOption", st, err)
				}
			})
		}
	})

	t.Run("lease", func(t *testing.T) {
		for name, c := range map[string]struct {
			opt    kvlease.LeaseOption
			timing bool // also ErrInvalidTiming, as Acquire refused it before options could fail
		}{
			"nil option":                  {opt: nil},
			"nil tracer provider":         {opt: kvlease.WithHolderTracerProvider(nil)},
			"nil clock guard":             {opt: kvlease.WithClockGuard(nil)},
			"negative holder margin":      {opt: kvlease.WithHolderMargin(-time.Millisecond), timing: true},
			"negative clock rate":         {opt: kvlease.WithClockRate(-0.01), timing: true},
			"clock rate 0.1":              {opt: kvlease.WithClockRate(0.1), timing: true},
			"clock rate 1":                {opt: kvlease.WithClockRate(1), timing: true},
			"NaN clock rate":              {opt: kvlease.WithClockRate(math.NaN()), timing: true},
			"infinite clock rate":         {opt: kvlease.WithClockRate(math.Inf(1)), timing: true},
			"attribute with an empty key": {opt: kvlease.WithAttributes(map[string]string{"": "v"})},
			// Below the least, Acquire spun (found by an outside client).
			"attempt timeout 1ns":  {opt: kvlease.WithAttemptTimeout(time.Nanosecond)},
			"zero attempt timeout": {opt: kvlease.WithAttemptTimeout(0)},
		} {
			t.Run(name, func(t *testing.T) {
				g := &fixedGrantor{}
				l, err := kvlease.Acquire(t.Context(), g, "a", "h", 3*time.Second, c.opt)
				if !errors.Is(err, kvlease.ErrInvalidOption) || l != nil {
					t.Fatalf("Acquire = (%v, %v), want ErrInvalidOption", l, err)
				}
				if c.timing != errors.Is(err, kvlease.ErrInvalidTiming) {
					t.Errorf("Acquire = %v: ErrInvalidTiming %v, want %v", err, !c.timing, c.timing)
				}
				if g.grants != 0 {
					t.Errorf("%d grants sent", g.grants)
				}
			})
		}
		// Good values still pass: no attributes, ρ = 0, a zero margin.
		for name, opt := range map[string]kvlease.LeaseOption{
			"nil attributes": kvlease.WithAttributes(nil),
			"clock rate 0":   kvlease.WithClockRate(0),
			"zero margin":    kvlease.WithHolderMargin(0),
		} {
			if _, err := kvlease.Acquire(t.Context(), &fixedGrantor{}, "a", "h", 3*time.Second, opt); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})

	t.Run("keeper", func(t *testing.T) {
		for name, c := range map[string]struct {
			opt    kvlease.KeeperOption
			timing bool
		}{
			"nil option":              {opt: nil},
			"zero renew interval":     {opt: kvlease.WithRenewInterval(0), timing: true},
			"negative renew interval": {opt: kvlease.WithRenewInterval(-time.Second), timing: true},
			"renew interval 1ms":      {opt: kvlease.WithRenewInterval(time.Millisecond), timing: true},
			"nil OnLost":              {opt: kvlease.WithOnLost(nil)},
			"nil OnRenew":             {opt: kvlease.WithOnRenew(nil)},
			"nil meter provider":      {opt: kvlease.WithMeterProvider(nil)},
			"nil renew-now channel":   {opt: kvlease.WithRenewNow(nil)},
		} {
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l, err := kvlease.Acquire(t.Context(), &fixedGrantor{}, "a", "h", 3*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					k, err := kvlease.Keep(t.Context(), l, c.opt)
					if !errors.Is(err, kvlease.ErrInvalidOption) || k != nil {
						t.Fatalf("Keep = (%v, %v), want ErrInvalidOption", k, err)
					}
					if c.timing != errors.Is(err, kvlease.ErrInvalidTiming) {
						t.Errorf("Keep = %v: ErrInvalidTiming %v, want %v", err, !c.timing, c.timing)
					}
					// Nothing was started: synctest.Test fails on goroutines
					// left in the bubble.
				})
			})
		}
	})

	t.Run("watch", func(t *testing.T) {
		_, st := kvleasetest.NewStore(t)
		w, err := st.Watch(t.Context(), "", kvlease.UpdatesOnly(), nil)
		if !errors.Is(err, kvlease.ErrInvalidOption) || w != nil {
			t.Fatalf("Watch = (%v, %v), want ErrInvalidOption", w, err)
		}
	})
}

// Acquire's deadline counts the shorter of the requested and the granted
// duration: a grantor that grants less is believed, one whose record claims
// more than was asked is not.
func TestAcquireDeadlineTrustsTheShorterDuration(t *testing.T) {
	const d = 6 * time.Second
	for name, granted := range map[string]time.Duration{
		"granted less": d / 2,
		"granted more": 2 * d,
		"as asked":     d,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				l, err := kvlease.Acquire(t.Context(), &fixedGrantor{d: granted}, "a", "h", d)
				if err != nil {
					t.Fatal(err)
				}
				want := kvlease.HolderValidity(min(d, granted), kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
				if got := l.Deadline().Sub(start); got != want {
					t.Errorf("deadline %v after the request, want %v (requested %v, granted %v)", got, want, d, granted)
				}
			})
		})
	}
}

func batchLimits(change func(*kvlease.BatchLimits)) kvlease.BatchLimits {
	l := kvlease.DefaultBatchLimits(1)
	change(&l)
	return l
}

// The default batch limits pass their own check, and disabled limits are
// not checked.
func TestDefaultBatchLimitsAreValid(t *testing.T) {
	for _, r := range []int{1, 3} {
		if err := kvlease.DefaultBatchLimits(r).Validate(); err != nil {
			t.Errorf("R%d: %v", r, err)
		}
	}
	if err := (kvlease.BatchLimits{}).Validate(); err != nil {
		t.Errorf("disabled: %v", err)
	}
	if err := kvlease.CheckOptions(kvlease.WithoutBatching()); err != nil {
		t.Error(err)
	}
}

// Acquire refuses a nil *Store as it does a nil Grantor (it panicked;
// found by an outside client).
func TestAcquireNilStore(t *testing.T) {
	var st *kvlease.Store
	if _, err := kvlease.Acquire(t.Context(), st, "a", "h", 5*time.Second); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("acquire from a nil store: %v, want ErrInvalidOption", err)
	}
}

// A holder's connection (ConnOptions) is back within about a quarter of a
// second of its server's restart: nats.go's default wait of 2 s cost a
// lease of 3 s its tenure over a restart that took 1.25 s (found by an
// outside client).
func TestConnOptionsReconnectSoon(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithPort(kvleasetest.FreePort(t)))
	nc, err := nats.Connect(srv.ClientURL(), kvlease.ConnOptions()...) // not kvleasetest.Connect, whose wait is short
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	back := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(back)
	away := nc.StatusChanged(nats.RECONNECTING)
	defer nc.RemoveStatusListener(away)
	srv.Shutdown()
	<-away
	time.Sleep(600 * time.Millisecond) // the outage: the client has tried the server and waits
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("not reconnected within 10 s")
	}
	if took := time.Since(restarted); took > time.Second {
		t.Errorf("reconnected %v after the server was back; want within about 350 ms (ReconnectWait and jitter)", took.Round(time.Millisecond))
	}
}
