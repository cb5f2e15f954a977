package kvlease_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A Store reports the durations and margin it was opened with: a service
// on it reads them there instead of holding its own copy.
func TestStoreReportsItsPolicy(t *testing.T) {
	_, st := kvleasetest.NewStore(t, kvlease.WithDurationRange(2*time.Second, time.Minute), kvlease.WithGrantorMargin(0))
	if minD, maxD := st.DurationRange(); minD != 2*time.Second || maxD != time.Minute {
		t.Errorf("DurationRange = %v, %v; want 2s, 1m", minD, maxD)
	}
	if mg := st.GrantorMargin(); mg != 0 {
		t.Errorf("GrantorMargin = %v, want 0", mg)
	}
	_, def := kvleasetest.NewStore(t)
	if minD, maxD := def.DurationRange(); minD != kvlease.MinDuration || maxD != kvlease.DefaultMaxDuration {
		t.Errorf("default DurationRange = %v, %v; want %v, %v", minD, maxD, kvlease.MinDuration, kvlease.DefaultMaxDuration)
	}
	if mg := def.GrantorMargin(); mg != kvlease.DefaultGrantorMargin {
		t.Errorf("default GrantorMargin = %v, want %v", mg, kvlease.DefaultGrantorMargin)
	}
}

// CheckOptions refuses what Open refuses, without a server.
func TestCheckOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []kvlease.Option
	}{
		{"min below 1s", []kvlease.Option{kvlease.WithDurationRange(100*time.Millisecond, time.Minute)}},
		{"max below min", []kvlease.Option{kvlease.WithDurationRange(2*time.Second, time.Second)}},
		{"negative margin", []kvlease.Option{kvlease.WithGrantorMargin(-time.Second)}},
		{"empty bucket", []kvlease.Option{kvlease.WithBucket("")}},
		// Their server TTL wrapped negative, and a grant was stored
		// without a TTL: a lease that never lapsed.
		{"max past the server TTL's range", []kvlease.Option{kvlease.WithDurationRange(time.Second, math.MaxInt64)}},
		{"margin past the server TTL's range", []kvlease.Option{kvlease.WithGrantorMargin(math.MaxInt64 - time.Minute)}},
		// nats-server adds the TTL to the message's time in Unix
		// nanoseconds, which wraps past 2262: such a grant said it lasted
		// until 2319 and the server lapsed it within a second, the name
		// then granted to another holder (serve --max-ttl 2562047h).
		{"max whose expiry is past the server's clock", []kvlease.Option{kvlease.WithDurationRange(time.Second, 2562047*time.Hour)}},
		{"margin whose expiry is past the server's clock", []kvlease.Option{kvlease.WithGrantorMargin(2100000 * time.Hour)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := kvlease.CheckOptions(c.opts...); !errors.Is(err, kvlease.ErrInvalidOption) {
				t.Fatalf("CheckOptions = %v, want ErrInvalidOption", err)
			}
		})
	}
	if err := kvlease.CheckOptions(kvlease.WithDurationRange(time.Second, time.Minute), kvlease.WithGrantorMargin(0)); err != nil {
		t.Fatalf("good options: %v", err)
	}
}

// The policy a grantor records on the bucket (WithBucketPolicy, as `leased
// serve` does) is what a Store opened without its own follows; one given
// its own keeps it. A grant through the follower gets the policy's margin
// in its server TTL and is held to its range (`leased elect` granted what
// the service refused, with the default margin).
func TestStoreFollowsTheBucketPolicy(t *testing.T) {
	srv, _ := kvleasetest.NewStore(t, kvlease.WithBucketPolicy(), kvlease.WithGrantorMargin(5*time.Second),
		kvlease.WithDurationRange(20*time.Second, 2*time.Hour))
	follower := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithoutCreate())
	if mg := follower.GrantorMargin(); mg != 5*time.Second {
		t.Errorf("follower's GrantorMargin = %v, want the bucket's 5s", mg)
	}
	if minD, maxD := follower.DurationRange(); minD != 20*time.Second || maxD != 2*time.Hour {
		t.Errorf("follower's DurationRange = %v, %v; want the bucket's 20s, 2h", minD, maxD)
	}
	ctx := t.Context()
	if _, err := follower.Grant(ctx, kvlease.GrantRequest{Name: "short", Holder: "h", Duration: 2 * time.Second}); !errors.Is(err, kvlease.ErrDurationOutOfRange) {
		t.Errorf("a 2 s grant through the follower: %v, want ErrDurationOutOfRange", err)
	}
	rec, err := follower.Grant(ctx, kvlease.GrantRequest{Name: "ok", Holder: "h", Duration: 20 * time.Second})
	if err != nil || rec.TTL != 25*time.Second {
		t.Errorf("a 20 s grant through the follower: TTL %v, %v; want 25s (the bucket's 5 s margin)", rec.TTL, err)
	}
	own := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithoutCreate(), kvlease.WithGrantorMargin(time.Second))
	if mg := own.GrantorMargin(); mg != time.Second {
		t.Errorf("a Store given its own margin: %v, want 1s", mg)
	}
	if minD, _ := own.DurationRange(); minD != 20*time.Second {
		t.Errorf("a Store given only a margin takes the bucket's range: min %v, want 20s", minD)
	}
}

// Nil where a value is needed is an invalid option, not a panic.
func TestNilArgumentsAreInvalidOptions(t *testing.T) {
	ctx := t.Context()
	if _, err := kvlease.Open(ctx, nil); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("Open(nil JetStream): %v", err)
	}
	if _, err := kvlease.Acquire(ctx, nil, "a", "h", 10*time.Second); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("Acquire(nil grantor): %v", err)
	}
	if _, err := kvlease.Keep(ctx, nil); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("Keep(nil lease): %v", err)
	}
}
